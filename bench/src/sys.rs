//! What the machine and its processes are doing, read from /proc: memory of a process, and
//! CPU time split into load generator (this process), server (the `oncehook serve` child
//! running now, see `set_server_pid`; without one, this process minus its load-generator
//! threads, as in the bare-loop ceilings) and the rest of the machine (PostgreSQL, pgbench,
//! and any unrelated load).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// The pid of the server child running now (0: none).
static SERVER_PID: AtomicU32 = AtomicU32::new(0);

pub fn set_server_pid(pid: Option<u32>) {
    SERVER_PID.store(pid.unwrap_or(0), Ordering::Relaxed);
}

/// Linux reports CPU times in USER_HZ ticks, 100 per second on every mainstream platform.
const TICKS_PER_SEC: f64 = 100.0;

/// Resident memory of this process, in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub rss_kb: u64,
    pub hwm_kb: u64,
}

pub fn memory() -> Memory {
    memory_of("self")
}

/// Resident memory of another process (`pid`), e.g. a server started as a child.
pub fn memory_of(pid: &str) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss_kb: field("VmRSS:"),
        hwm_kb: field("VmHWM:"),
    }
}

/// Threads whose name starts with this belong to the load generator.
pub const CLIENT_THREAD: &str = "oh-client";

#[derive(Clone, Debug)]
pub struct CpuSnapshot {
    at: Instant,
    machine_busy: u64,
    machine_total: u64,
    process: u64,
    /// CPU ticks of the server child, when one runs.
    server: Option<(u32, u64)>,
    /// CPU ticks of each PostgreSQL server process.
    postgres: HashMap<u32, u64>,
}

/// CPU used during an interval, in cores (1.0 = one core busy all the time).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub machine: f64,
    pub server: f64,
    pub client: f64,
    /// PostgreSQL's processes.
    pub postgres: f64,
    /// Machine minus this process: the database server, pgbench, anything else running.
    pub other: f64,
    pub cores: usize,
}

/// utime + stime from a /proc/.../stat line (fields 14 and 15, after the parenthesised name).
fn stat_ticks(stat: &str) -> u64 {
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
}

/// CPU seconds used so far by the live load-generator threads (each run starts new ones).
pub fn client_cpu_secs() -> f64 {
    client_ticks() as f64 / TICKS_PER_SEC
}

fn client_ticks() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with(CLIENT_THREAD))
        })
        .map(|t| stat_ticks(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// CPU ticks of every process named `postgres` (the server and its backends).
fn postgres_ticks() -> HashMap<u32, u64> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    procs
        .flatten()
        .filter_map(|p| {
            let pid: u32 = p.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(p.path().join("comm")).ok()?;
            (comm.trim_end() == "postgres").then_some(())?;
            let stat = std::fs::read_to_string(p.path().join("stat")).ok()?;
            Some((pid, stat_ticks(&stat)))
        })
        .collect()
}

pub fn cpu_snapshot() -> CpuSnapshot {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let times: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = times.iter().take(8).sum();
    // idle and iowait are not work.
    let idle = times.get(3).copied().unwrap_or(0) + times.get(4).copied().unwrap_or(0);
    CpuSnapshot {
        at: Instant::now(),
        machine_busy: total.saturating_sub(idle),
        machine_total: total,
        process: stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default()),
        server: match SERVER_PID.load(Ordering::Relaxed) {
            0 => None,
            pid => std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .map(|stat| (pid, stat_ticks(&stat))),
        },
        postgres: postgres_ticks(),
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl CpuSnapshot {
    /// CPU used between `self` and now, with no load generator running.
    pub fn since(&self) -> CpuUse {
        self.since_with_client(0.0)
    }

    /// CPU used between `self` and now, of which `client_secs` by the load generator.
    pub fn since_with_client(&self, client_secs: f64) -> CpuUse {
        let now = cpu_snapshot();
        let secs = now.at.duration_since(self.at).as_secs_f64().max(1e-3);
        let cores = cores();
        let total = now.machine_total.saturating_sub(self.machine_total).max(1) as f64;
        let machine =
            now.machine_busy.saturating_sub(self.machine_busy) as f64 / total * cores as f64;
        let process = now.process.saturating_sub(self.process) as f64 / TICKS_PER_SEC / secs;
        let client = client_secs / secs;
        // Backends that ended during the interval are missed; the benchmark's connections
        // live through each step.
        let postgres_ticks: u64 = now
            .postgres
            .iter()
            .map(|(pid, t)| t.saturating_sub(self.postgres.get(pid).copied().unwrap_or(0)))
            .sum();
        let postgres = postgres_ticks as f64 / TICKS_PER_SEC / secs;
        // A server child that started during the interval used all its ticks in it.
        let server_ticks = match (self.server, now.server) {
            (Some((pid, before)), Some((pid_now, after))) if pid == pid_now => {
                Some(after.saturating_sub(before))
            }
            (None, Some((_, after))) => Some(after),
            _ => None,
        };
        match server_ticks {
            // The server is a child: this whole process is the load generator.
            Some(ticks) => {
                let server = ticks as f64 / TICKS_PER_SEC / secs;
                CpuUse {
                    machine,
                    server,
                    client: process,
                    postgres,
                    other: (machine - process - server).max(0.0),
                    cores,
                }
            }
            _ => CpuUse {
                machine,
                server: (process - client).max(0.0),
                client,
                postgres,
                other: (machine - process).max(0.0),
                cores,
            },
        }
    }
}

/// Busy share of the machine over a short idle period, to warn about unrelated load.
pub async fn background_load(ms: u64) -> f64 {
    let before = cpu_snapshot();
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    before.since().machine
}

/// The facts BENCHMARKS.md records about the machine.
pub fn machine_summary() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    vec![
        ("cores".into(), cores().to_string()),
        ("CPU".into(), model),
        ("RAM".into(), mem_gib),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_ticks_skips_names_with_spaces() {
        let line = "42 (tokio runtime) S 1 2 3 4 5 6 7 8 9 10 300 40 0 0";
        assert_eq!(super::stat_ticks(line), 340);
    }
}
