//! The server's memory allocator: mimalloc, set up to give freed memory back promptly.
//!
//! Why mimalloc: under load the server spent about a fifth of its CPU in glibc's malloc and
//! free (perf, BENCHMARKS.md). Why the two options: with mimalloc's defaults the server's
//! peak RSS in the ingest step was 104–122 MiB against 86–91 with glibc; returning freed
//! pages at once and committing arena memory only as it is used brought it to 58–103 MiB
//! (BENCHMARKS.md, issue 18, "mimalloc").

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// mimalloc v3's numbers for the two options (`mi_option_e` in its `mimalloc.h`), which
/// libmimalloc-sys does not name. The test below checks them against the defaults of
/// mimalloc's `options.c`.
const ARENA_EAGER_COMMIT: mi_option_t = 4;
const PURGE_DELAY: mi_option_t = 15;

/// Call once, first thing in `main`: later allocations follow these options. An operator's
/// `MIMALLOC_PURGE_DELAY` or `MIMALLOC_ARENA_EAGER_COMMIT` still wins.
pub fn tune() {
    for (option, name, value) in [
        (PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 0),
        (ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT", 0),
    ] {
        if std::env::var_os(name).is_none() {
            // SAFETY: sets one of mimalloc's option values (a plain integer store); any
            // value is valid for these two options.
            unsafe { mi_option_set(option, value) };
        }
    }
}

/// The options' current values: (purge delay ms, arena eager commit).
#[cfg(test)]
fn options() -> (std::ffi::c_long, std::ffi::c_long) {
    use libmimalloc_sys::mi_option_get;
    // SAFETY: reads an option value; initialises it from the environment if needed.
    unsafe {
        (
            mi_option_get(PURGE_DELAY),
            mi_option_get(ARENA_EAGER_COMMIT),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_numbers_name_the_options_meant_and_tune_sets_them() {
        // options.c: purge_delay 1000 ms, arena_eager_commit 2; a renumbered enum in a new
        // mimalloc would show here, not as a silent misconfiguration.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none()
            && std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none()
        {
            assert_eq!(options(), (1000, 2));
            tune();
            assert_eq!(options(), (0, 0));
        }
    }
}
