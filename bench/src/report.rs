//! The printed report: one table per database (Markdown, so it pastes into BENCHMARKS.md)
//! and the issue's targets with the ratios against the same run's ceilings.

use std::fmt::Write;
use std::time::Duration;

use super::fixture::Kind;
use super::sys::CpuUse;
use super::{Ceiling, CeilingKind, DbResults};
use oncehook::config::Settings;

pub struct RunInfo<'a> {
    pub machine: Vec<(String, String)>,
    pub sqlite_version: String,
    pub settings: &'a Settings,
    pub duration: Duration,
    pub events: u64,
    pub quick: bool,
    pub client_threads: usize,
    pub rss_before_kb: u64,
    pub hwm_kb: u64,
    pub idle_load: f64,
    pub total: Duration,
    pub body_bytes: usize,
}

/// 12345.6 → "12,346".
fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn cpu(c: &CpuUse) -> String {
    format!(
        "{:.2} / {:.2} / {:.2} / {:.2} of {}",
        c.server,
        c.client,
        c.postgres,
        (c.other - c.postgres).max(0.0),
        c.cores
    )
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn mib(kb: u64) -> String {
    format!("{:.0} MiB", kb as f64 / 1024.0)
}

pub fn render(info: &RunInfo, results: &[DbResults]) -> String {
    let mut o = String::new();
    let s = info.settings;
    let _ = writeln!(o, "\n# oncehook bench\n");
    let machine: Vec<String> = info
        .machine
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(o, "- machine: {}", machine.join("; "));
    let _ = writeln!(o, "- SQLite (linked by sqlx): {}", info.sqlite_version);
    for r in results.iter().filter(|r| r.kind == Kind::Postgres) {
        let _ = writeln!(o, "- PostgreSQL: {}", r.version);
    }
    let _ = writeln!(
        o,
        "- server settings: receiver.max_batch {}, receiver.writers {} (SQLite: 1), \
         receiver.linger_ms {}, receiver.commit_timeout_ms {}, processor.workers {}, \
         processor.claim_batch {}, processor.linger_ms {}, \
         processor.events_per_transaction {}, outbox sinks {:?}",
        s.receiver.max_batch,
        s.receiver.writers,
        s.receiver.linger_ms,
        s.receiver.commit_timeout_ms,
        s.processor.workers,
        s.processor.claim_batch,
        s.processor.linger_ms,
        s.processor
            .events_per_transaction
            .map_or("auto (the claim)".into(), |n| n.to_string()),
        s.outbox.sinks
    );
    let _ = writeln!(
        o,
        "- run: {} s per timed step, {}-event processing backlog, {} B Stripe event bodies, \
         load generator on {} thread(s){}; {:.2} cores busy before start; took {:.0} s",
        info.duration.as_secs(),
        info.events,
        info.body_bytes,
        info.client_threads,
        if info.quick { ", --quick" } else { "" },
        info.idle_load,
        info.total.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "- CPU columns: cores used by the server (the `oncehook serve` child; in the SQLite ceilings, the bench's own loop) / \
         the load generator / PostgreSQL's processes / everything else on the machine \
         (pgbench, the kernel's I/O threads, unrelated load)"
    );

    for r in results {
        render_db(&mut o, r);
        render_soak(&mut o, r);
    }

    let _ = writeln!(o, "\n## Targets (issue 2)\n");
    let _ = write!(o, "| target |");
    for r in results {
        let _ = write!(o, " {} |", r.kind.label());
    }
    let _ = write!(o, "\n|---|");
    for _ in results {
        let _ = write!(o, "---|");
    }
    let _ = writeln!(o);

    let row = |o: &mut String, name: &str, f: &dyn Fn(&DbResults) -> String| {
        let _ = write!(o, "| {name} |");
        for r in results {
            let _ = write!(o, " {} |", f(r));
        }
        let _ = writeln!(o);
    };
    row(
        &mut o,
        "ingest at 64 senders ≥ 60 % of the best one-event-per-transaction ceiling",
        &|r| match (
            r.ingest.iter().find(|i| i.senders == 64 && !i.processor),
            r.ceiling_max(),
        ) {
            (Some(i), Some(c)) => {
                let ratio = i.load.per_sec() / c;
                format!(
                    "{} / {} = {} — {}",
                    thousands(i.load.per_sec()),
                    thousands(c),
                    pct(ratio),
                    mark(ratio >= 0.6)
                )
            }
            _ => "n/a".into(),
        },
    );
    row(&mut o, "processing ≥ 50 % of its ceiling", &|r| match (
        &r.processing,
        r.processing_ceiling().map(|c| c.rate),
    ) {
        (Some(p), Some(c)) => {
            let ratio = p.per_sec() / c;
            format!(
                "{} / {} = {} — {}",
                thousands(p.per_sec()),
                thousands(c),
                pct(ratio),
                mark(ratio >= 0.5 && p.ok)
            )
        }
        _ => "n/a".into(),
    });
    row(
        &mut o,
        "p99 receipt-to-effect < 50 ms at half the peak rate",
        &|r| {
            r.latency
                .iter()
                .map(|l| {
                    let capacity = r.processing.as_ref().map(|p| p.per_sec());
                    let overload = match capacity {
                        Some(c) if l.offered > c => format!(
                            ", more than the {}/s the processor sustains, so the backlog grows",
                            thousands(c)
                        ),
                        _ => String::new(),
                    };
                    format!(
                        "{} at {}/s ({}{overload}): {}",
                        ms(l.p99_ms as f64),
                        thousands(l.offered),
                        l.label,
                        mark(l.p99_ms < 50 && l.drained)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
    );
    row(&mut o, "server RSS < 150 MB under load", &|r| {
        // Only the steps from ingest to storm read the peak; a run of other steps (a soak
        // alone) has none, and "0 MiB — met" would pass a check nobody made.
        if r.rss_peak_kb == 0 {
            return "n/a".into();
        }
        format!(
            "{} peak — {}",
            mib(r.rss_peak_kb),
            mark(r.rss_peak_kb * 1024 < 150_000_000)
        )
    });
    row(
        &mut o,
        "10,000 signature candidates + 256 KiB body refused with 400",
        &|r| match &r.refusal {
            Some(f) => format!(
                "mean {:.2} ms, max {:.2} ms over {} requests — {}",
                f.mean_ms,
                f.max_ms,
                f.requests,
                mark(f.all_400 && f.max_ms < 100.0)
            ),
            None => "n/a".into(),
        },
    );
    row(
        &mut o,
        "kill -9 mid-burst: every acknowledged event applied within 5 s of the restart",
        &|r| match &r.recovery {
            Some(c) => format!(
                "{:.2} s ({:.2} s to healthy; {} waiting, {} claimed at the kill; {}) — {}",
                c.applied_secs,
                c.healthy_secs,
                c.waiting_at_kill,
                c.claimed_at_kill,
                c.check,
                mark(c.ok && c.applied_secs < 5.0)
            ),
            None => "n/a".into(),
        },
    );
    row(
        &mut o,
        "duplicate storm: effects == distinct events",
        &|r| match &r.storm {
            Some(s) => format!("{} == {} — {}", s.effects, s.distinct, mark(s.ok)),
            None => "n/a".into(),
        },
    );
    render_issue_18_targets(&mut o, results);
    let _ = writeln!(
        o,
        "\nRSS before the first server started: {}; VmHWM of the whole run (includes the \
         ceilings and the load generator): {}.",
        mib(info.rss_before_kb),
        mib(info.hwm_kb)
    );
    o
}

fn render_db(o: &mut String, r: &DbResults) {
    let _ = writeln!(o, "\n## {}\n", r.kind.label());
    let _ = writeln!(
        o,
        "| step | result | p50 | p99 | CPU server / client / PostgreSQL / rest | notes |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---|---|");
    let ceiling = r.ceiling_max();
    for c in r
        .ceilings
        .iter()
        .filter(|c| c.kind != CeilingKind::Processing)
    {
        ceiling_row(o, r.kind, c);
    }
    for i in &r.ingest {
        let rate = i.load.per_sec();
        let mut notes = ceiling
            .map(|c| format!("{} of the best ceiling", pct(rate / c)))
            .unwrap_or_default();
        let same = r
            .ceilings
            .iter()
            .find(|c| c.kind == CeilingKind::Ingest && c.clients == i.senders);
        if let (Kind::Postgres, Some(c)) = (r.kind, same) {
            let _ = write!(
                notes,
                "; {} of pgbench at {} clients",
                pct(rate / c.rate),
                c.clients
            );
        }
        if let Some(c) = i.commits {
            let _ = write!(
                notes,
                "; {:.1} events per commit (max {}), {:.0} B of WAL per event",
                c.events_per_tx, c.max_events_per_tx, c.wal_per_event
            );
        }
        if i.load.failed > 0 {
            let _ = write!(
                notes,
                "; {} failed ({})",
                i.load.failed,
                i.load.first_failure.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(
            o,
            "| ingest, {} sender(s), processor {} | {} events/s | {} | {} | {} | {} |",
            i.senders,
            if i.processor { "on" } else { "off" },
            thousands(rate),
            ms(i.load.p_ms(0.5)),
            ms(i.load.p_ms(0.99)),
            cpu(&i.cpu),
            notes
        );
    }
    for c in r.ceilings.iter().filter(|c| {
        matches!(
            c.kind,
            CeilingKind::Processing | CeilingKind::ProcessingBatch(_)
        )
    }) {
        ceiling_row(o, r.kind, c);
    }
    if let Some(p) = &r.processing {
        let ratio = r
            .processing_ceiling()
            .map(|c| format!("{} of ceiling; ", pct(p.per_sec() / c.rate)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "| processing a {}-event backlog, receiver off | {} effects/s | | | {} | {ratio}{}{} |",
            p.events,
            thousands(p.per_sec()),
            cpu(&p.cpu),
            p.check,
            if p.drained { "" } else { "; NOT DRAINED" }
        );
        let _ = writeln!(
            o,
            "| (filling that backlog, 64 senders) | {} events/s | {} | {} | | |",
            thousands(p.fill.per_sec()),
            ms(p.fill.p_ms(0.5)),
            ms(p.fill.p_ms(0.99))
        );
    }
    for l in &r.latency {
        let _ = writeln!(
            o,
            "| receipt-to-effect at {} ({}/s offered), processor on | max {} ms | {} | {} | {} | {} processed, {:.0}/s acknowledged (ack p99 {}), {} waiting when senders stopped{}; receipt to visible to a reader, polled every {} ms ({} ms while {} or more are unfinished) |",
            l.label,
            thousands(l.offered),
            l.max_ms,
            ms(l.p50_ms as f64),
            ms(l.p99_ms as f64),
            cpu(&l.cpu),
            l.processed,
            l.load.per_sec(),
            ms(l.load.p_ms(0.99)),
            l.backlog_at_end,
            if l.drained { "" } else { "; NOT DRAINED" },
            super::watch::POLL.as_millis(),
            super::watch::POLL_BEHIND.as_millis(),
            super::watch::BEHIND
        );
    }
    for (probe, verdict) in &r.capacity {
        let _ = writeln!(
            o,
            "| capacity probe, {}/s offered for {} s, processor on | {} | {} | {} | {} | {:.0}/s acknowledged; backlog {:.0} → {:.0} (first → last quarter); {} |",
            thousands(probe.offered),
            probe.window_ms / 1000,
            if verdict.sustained { "sustained" } else { "not sustained" },
            ms(probe.p50_ms as f64),
            ms(probe.p99_ms as f64),
            cpu(&probe.cpu),
            probe.load.per_sec(),
            verdict.backlog_early,
            verdict.backlog_late,
            verdict.reason
        );
    }
    if let Some(c) = r.capacity_rate {
        let _ = writeln!(
            o,
            "| **end-to-end capacity** | **{} events/s** | | | | the highest probe with a flat backlog and p99 < {} ms |",
            thousands(c),
            super::capacity::P99_BOUND_MS
        );
    }
    if let Some(s) = &r.storm {
        let _ = writeln!(
            o,
            "| duplicate storm, 64 senders, 90 % redeliveries, processor on | {} deliveries/s | {} | {} | {} | {} % answered duplicate; {} distinct events, {} inbox rows, {} effects, {} deliveries ({} duplicates){} |",
            thousands(s.load.per_sec()),
            ms(s.load.p_ms(0.5)),
            ms(s.load.p_ms(0.99)),
            cpu(&s.cpu),
            (100.0 * s.load.acked_duplicates as f64 / s.load.acked.max(1) as f64).round(),
            s.distinct,
            s.inbox_rows,
            s.effects,
            s.deliveries,
            s.duplicate_deliveries,
            if s.ok { "; verified" } else { "; CHECK FAILED" }
        );
    }
    for d in &r.diagnostics {
        let _ = writeln!(
            o,
            "| diagnose: {} (no HTTP) | {} events/s | | | {} | |",
            d.label,
            thousands(d.per_sec),
            cpu(&d.cpu)
        );
    }
    // Only the steps from ingest to storm read it: a run of other steps has no such peak
    // (the soak reports its server's memory minute by minute).
    if r.rss_peak_kb > 0 {
        let _ = writeln!(
            o,
            "| peak RSS of the servers (ingest to storm) | {} | | | | the highest VmHWM of the `oncehook serve` children, read just before each was stopped |",
            mib(r.rss_peak_kb)
        );
    }
    if let Some(d) = &r.dashboard {
        for page in &d.pages {
            let _ = writeln!(
                o,
                "| dashboard on {} events: {} | HTTP {} | {} | {} | | `{}`, {} requests after one warm-up, admin session (pages) or viewer token (API) |",
                thousands(d.events as f64),
                page.label,
                page.status,
                ms(page.p50_ms),
                ms(page.p99_ms),
                page.path,
                d.requests
            );
        }
    }
    if let Some(c) = &r.counters {
        // One effect's share of the processing step's time, for scale.
        let effect_ns = r.processing.as_ref().map(|p| 1e9 / p.per_sec().max(1e-9));
        for (threads, ns) in &c.per_event_ns {
            let share = effect_ns
                .map(|e| format!("{:.2} % of one effect's processing time", ns / e * 100.0))
                .unwrap_or_else(|| "run the processing step for the comparison".into());
            let _ = writeln!(
                o,
                "| counters per event (Prometheus + rollup), {threads} thread(s) at once | {ns:.0} ns | | | | CPU time per event; {share} |"
            );
        }
        let _ = writeln!(
            o,
            "| rollup flush, {} rows (every 5 s) | {:.2} ms | | | | median of 20 |",
            c.flush_rows, c.flush_ms
        );
    }
    if let Some(s) = &r.soak {
        let (first, last) = s.throughput_first_last();
        let (p99_first, p99_last, p99_max) = s.p99_first_last_max();
        let _ = writeln!(
            o,
            "| soak: {} s at {} deliveries/s, autovacuum {} | applied {}/s → {}/s | | {} → {} ms | | first steady minute → last; worst minute p99 {} ms ({:+.2} ms/min); VmRSS {} at the start, {} at most, {:+.0} KiB/min over the second half; {} acknowledged, {} events, {} effects — {} |",
            s.secs,
            s.rate,
            s.autovacuum,
            thousands(first),
            thousands(last),
            p99_first,
            p99_last,
            p99_max,
            s.p99_slope_ms_per_min(),
            mib(s.first_kb()),
            mib(s.max_kb()),
            s.late_slope_kb_per_min(),
            s.acked,
            s.distinct,
            s.effects,
            s.verdict()
        );
    }
    if let Some(v) = &r.verify {
        for run in &v.runs {
            let _ = writeln!(
                o,
                "| `oncehook verify` on {} orders | {:.1} s | | | | {} orders/s; peak RSS {} (VmHWM of its own process); {} drifting, {} missing messages — {}; load average {} |",
                thousands(run.orders as f64),
                run.elapsed.as_secs_f64(),
                thousands(run.orders as f64 / run.elapsed.as_secs_f64().max(1e-9)),
                mib(run.peak_kb),
                run.drifting,
                run.missing,
                if run.ok { "as planted" } else { "CHECK FAILED" },
                v.load
            );
        }
    }
    if let Some(c) = &r.recovery {
        let _ = writeln!(
            o,
            "| peak RSS of the server alone (its own process, 8 senders, processor on) | {} | | | | VmHWM of `oncehook serve` just before the kill -9 |",
            mib(c.killed_server_hwm_kb)
        );
    }
}

/// Processing effects/s from a backlog before issue 18 (BENCHMARKS.md, "Processing keeps
/// up with ingest": the reference run of 2026-11-30, release build, this machine).
const BEFORE_PROCESSING_POSTGRES: f64 = 1_050.0;
const BEFORE_PROCESSING_SQLITE: f64 = 1_630.0;

fn render_issue_18_targets(o: &mut String, results: &[DbResults]) {
    let _ = writeln!(o, "\n## Targets (issue 18)\n");
    let _ = writeln!(o, "| target | result |\n|---|---|");
    for r in results {
        let label = r.kind.label();
        let pgbench_64 = r.pgbench_64();
        let (before, capacity_factor) = match r.kind {
            Kind::Postgres => (BEFORE_PROCESSING_POSTGRES, 3.0),
            Kind::Sqlite => (BEFORE_PROCESSING_SQLITE, 2.0),
        };
        if let Some(c) = r.capacity_rate.or(if r.capacity.is_empty() {
            None
        } else {
            Some(0.0)
        }) {
            let mut verdicts = vec![format!(
                "≥ {capacity_factor}× {} (processing before) — {}",
                thousands(before),
                mark(c >= capacity_factor * before)
            )];
            if let (Kind::Postgres, Some(p)) = (r.kind, pgbench_64) {
                verdicts.push(format!(
                    "{} of pgbench ingest at 64 clients ({}) — {}",
                    pct(c / p),
                    thousands(p),
                    mark(c >= 0.5 * p)
                ));
            }
            let _ = writeln!(
                o,
                "| {label}: end-to-end capacity (backlog flat, p99 < {} ms) | {} events/s; {} |",
                super::capacity::P99_BOUND_MS,
                thousands(c),
                verdicts.join("; ")
            );
        }
        if let (Kind::Postgres, Some(p)) = (r.kind, &r.processing) {
            let set_based = r
                .ceilings
                .iter()
                .filter(|c| matches!(c.kind, CeilingKind::ProcessingBatch(_)))
                .map(|c| format!("{} ({:?})", thousands(c.rate), c.kind))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                o,
                "| {label}: processing from a backlog ≥ 3× {} | {} effects/s = {:.1}× — {}; set-based ceiling {} |",
                thousands(before),
                thousands(p.per_sec()),
                p.per_sec() / before,
                mark(p.per_sec() >= 3.0 * before && p.ok),
                if set_based.is_empty() { "not run".into() } else { set_based }
            );
        }
        if let (Some(i), Some(p)) = (
            r.ingest.iter().find(|i| i.senders == 64 && i.processor),
            pgbench_64.or(r.ceiling_max()),
        ) {
            let ratio = i.load.per_sec() / p;
            let _ = writeln!(
                o,
                "| {label}: ingest at 64 senders with the processor on ≥ 60 % of the one-event-per-transaction ceiling | {} / {} = {} — {} |",
                thousands(i.load.per_sec()),
                thousands(p),
                pct(ratio),
                mark(ratio >= 0.6)
            );
        }
        if let Some(c) = &r.recovery {
            let _ = writeln!(
                o,
                "| {label}: kill -9 mid-burst, every acknowledged event applied < 2 s after the restart | {:.2} s — {} |",
                c.applied_secs,
                mark(c.ok && c.applied_secs < 2.0)
            );
        }
        if r.rss_peak_kb > 0 {
            let _ = writeln!(
                o,
                "| {label}: server RSS < 150 MB | {} peak — {} |",
                mib(r.rss_peak_kb),
                mark(r.rss_peak_kb * 1024 < 150_000_000)
            );
        }
        if let Some(s) = &r.soak {
            let _ = writeln!(
                o,
                "| {label}: soak flat ({} s, autovacuum {}) | {} |",
                s.secs,
                s.autovacuum,
                if s.flat() {
                    "flat — met"
                } else {
                    "NOT FLAT — MISSED"
                }
            );
        }
    }
}

/// The soak minute by minute.
fn render_soak(o: &mut String, r: &DbResults) {
    let Some(s) = &r.soak else { return };
    let _ = writeln!(
        o,
        "\n### {}: soak minute by minute ({} deliveries/s, autovacuum {})\n",
        r.kind.label(),
        s.rate,
        s.autovacuum
    );
    let _ = writeln!(
        o,
        "| minute | acknowledged/s | applied/s | p50 | p99 | backlog max | VmRSS |\n|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (i, m) in s.minutes.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} ms | {} ms | {} | {} |",
            i + 1,
            thousands(m.acked as f64 / 60.0),
            thousands(m.applied as f64 / 60.0),
            m.p50_ms,
            m.p99_ms,
            m.backlog_max,
            mib(m.rss_kb)
        );
    }
}

fn ceiling_row(o: &mut String, db: Kind, c: &Ceiling) {
    let n = c.clients;
    let (what, unit, note) = match (db, c.kind) {
        (Kind::Postgres, CeilingKind::Ingest) => (
            format!("ceiling: pgbench pg_ingest.sql (1 round trip), {n} clients"),
            "tx/s",
            "one event per transaction",
        ),
        (Kind::Postgres, CeilingKind::IngestRoundTrips) => (
            format!("ceiling: pgbench pg_ingest_tx.sql (BEGIN/INSERT/INSERT/COMMIT), {n} clients"),
            "tx/s",
            "one event per transaction",
        ),
        (Kind::Sqlite, CeilingKind::Ingest | CeilingKind::IngestRoundTrips) => (
            "ceiling: bare sqlx loop, 1 event per transaction".to_string(),
            "tx/s",
            "WAL, synchronous=FULL, same schema",
        ),
        (_, CeilingKind::IngestBatched) => (
            "context: bare sqlx loop, 100 events per transaction".to_string(),
            "events/s",
            "what batching can reach",
        ),
        (Kind::Postgres, CeilingKind::Processing) => (
            format!("ceiling: processing transaction, pgbench pg_process.sql, {n} clients"),
            "tx/s",
            "same statements, no claim",
        ),
        (_, CeilingKind::ProcessingBatch(batch)) => (
            format!(
                "ceiling: processing set-based, pgbench pg_process_batch.sql, {batch} events per transaction, {n} clients"
            ),
            "events/s",
            "one statement per table for the batch",
        ),
        (Kind::Sqlite, CeilingKind::Processing) => (
            "ceiling: processing transaction, bare sqlx loop, 1 connection".to_string(),
            "tx/s",
            "same statements, no claim",
        ),
    };
    // The SQLite loops run in this process (the "server" column is the loop); pgbench's
    // backends end before the run does, so PostgreSQL's share is only known with pgbench's.
    let usage = match db {
        Kind::Sqlite => cpu(&c.cpu),
        Kind::Postgres => format!("PostgreSQL + pgbench {:.2} of {}", c.cpu.other, c.cpu.cores),
    };
    let _ = writeln!(
        o,
        "| {what} | {} {unit} | | | {usage} | {note} |",
        thousands(c.rate)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of the soak alone reads no server peak: its RSS target says n/a, not met.
    #[test]
    fn a_run_without_a_server_peak_has_no_rss_verdict() {
        let settings = Settings::default();
        let info = RunInfo {
            machine: vec![],
            sqlite_version: "3".into(),
            settings: &settings,
            duration: Duration::from_secs(5),
            events: 0,
            quick: false,
            client_threads: 1,
            rss_before_kb: 0,
            hwm_kb: 0,
            idle_load: 0.0,
            total: Duration::from_secs(1),
            body_bytes: 0,
        };
        let rss_row = |peak_kb: u64| {
            let mut results = DbResults::new(Kind::Postgres);
            results.rss_peak_kb = peak_kb;
            let out = render(&info, &[results]);
            out.lines()
                .find(|l| l.starts_with("| server RSS < 150 MB under load"))
                .expect("the row is rendered")
                .to_string()
        };
        assert_eq!(rss_row(0), "| server RSS < 150 MB under load | n/a |");
        assert!(
            rss_row(80 * 1024).ends_with("80 MiB peak — met |"),
            "{}",
            rss_row(80 * 1024)
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::thousands(1234567.4), "1,234,567");
        assert_eq!(super::thousands(999.0), "999");
        assert_eq!(super::thousands(0.0), "0");
    }
}
