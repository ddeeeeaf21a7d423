//! `oncehook-bench`: drives the real server (`oncehook serve`, a child process per step on a
//! fresh database) over loopback HTTP with Stripe-signed events and measures, for SQLite and PostgreSQL:
//! ingest throughput and latency at 1, 16 and 64 senders (processor off), processing
//! throughput on a filled inbox, receipt-to-effect latency at half the peak rate, a 90 %
//! duplicate storm, and server memory; then compares them with the same run's ceilings
//! (pgbench with scripts/bench/*.sql, a bare SQLite loop). See BENCHMARKS.md.

mod capacity;
mod ceiling;
mod child;
mod commands;
mod counters;
mod dashboard;
mod diagnose;
mod failures;
mod fixture;
mod load;
mod recovery;
mod report;
mod soak;
mod sys;
mod verify;
mod watch;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use sha2::{Digest, Sha256};

use child::ChildServer;
use fixture::{FreshDb, Kind};
use load::{EventFactory, LoadReport, Pace, Plan};
use oncehook::config::{Overrides, Settings};
use oncehook::store::Db;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Sqlite,
    Postgres,
    Both,
}

#[derive(clap::Parser, Debug)]
#[command(
    name = "oncehook-bench",
    version,
    about = "Measures oncehook (the real binary, one child process per step) over loopback HTTP; see BENCHMARKS.md."
)]
pub struct BenchArgs {
    /// The servers' configuration (batch sizes, writers, workers are the operator's to
    /// tune); the benchmark sets the database, the port and the provider.
    #[arg(long, env = "ONCEHOOK_CONFIG")]
    pub config: Option<PathBuf>,
    /// The `oncehook` binary to measure [default: the one next to this binary].
    #[arg(long)]
    pub oncehook_bin: Option<PathBuf>,
    /// Which database(s) to measure.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    pub database: Which,
    /// PostgreSQL server to use; every step gets a fresh database with a random name there,
    /// dropped at the end.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub postgres_url: String,
    /// Seconds of each timed step [default: 5; 1 with --quick].
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// Events in the inbox for the processing step [default: 20000; 2000 with --quick].
    #[arg(long)]
    pub events: Option<u64>,
    /// A smoke run: short steps, small backlog, fewer ceiling variants (under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Worker threads of the load generator (its own runtime, measured apart).
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// The pgbench binary for the PostgreSQL ceilings.
    #[arg(long, default_value = "pgbench")]
    pub pgbench: PathBuf,
    /// Run only these steps (comma-separated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub steps: Vec<Step>,
    /// Offered rate for the latency step, events/s [default: half the measured peaks].
    #[arg(long)]
    pub latency_rate: Option<f64>,
    /// Diagnostic: run `ANALYZE inbox_events` on the filled inbox before the processing step, to see
    /// what query-planner statistics change.
    #[arg(long)]
    pub analyze_before_processing: bool,
    /// Seconds each capacity probe offers its rate [default: 60; 5 with --quick].
    #[arg(long)]
    pub capacity_window_secs: Option<u64>,
    /// Print each capacity probe's p99 for every second of receipt.
    #[arg(long)]
    pub capacity_seconds: bool,
    /// Probes of the capacity search at most [default: 7; 3 with --quick].
    #[arg(long)]
    pub capacity_probes: Option<usize>,
    /// The capacity search's first rate, events/s [default: half the same run's pgbench
    /// ceiling at 64 clients, else the processing step's rate, else 500].
    #[arg(long)]
    pub capacity_start: Option<f64>,
    /// Inbox size for the dashboard step [default: 1000000; 50000 with --quick].
    #[arg(long)]
    pub dashboard_events: Option<i64>,
    /// How long the soak step runs, seconds [default: 300; 30 with --quick].
    #[arg(long)]
    pub soak_secs: Option<u64>,
    /// Deliveries per second in the soak step (a fifth of them redeliveries).
    #[arg(long, default_value_t = 300)]
    pub soak_rate: u64,
    /// PostgreSQL's `autovacuum` during the soak (ALTER SYSTEM, restored after; needs a
    /// superuser) [default: as the server has it].
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    pub autovacuum: Option<bool>,
    /// Orders for the verify step [default: 1000000; 20000 with --quick].
    #[arg(long)]
    pub verify_orders: Option<i64>,
    /// Where the SQLite files go [default: the system temp directory]. Use a directory on
    /// the disk you care about: fsync cost is most of the SQLite numbers.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The parts of the benchmark, in the order they run for each database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// pgbench / bare SQLite loops: the ingest and processing ceilings.
    Ceilings,
    /// Acknowledged events/s at 1, 16, 64 senders, processor off.
    Ingest,
    /// Effects/s draining a filled inbox.
    Processing,
    /// What the per-event Prometheus counters and rollup increments cost, and a rollup flush.
    Counters,
    /// Receipt-to-effect latency at half the peak rate.
    Latency,
    /// The highest offered rate at which, over the window, the backlog stays flat and p99
    /// receipt → effect stays under 100 ms (receiver and processor in one server).
    Capacity,
    /// 90 % redeliveries from 64 senders.
    Storm,
    /// Relay deliveries/s to a loopback HTTP sink, refund commands/s to the simulator's API,
    /// and the time to redrive 10,000 dead letters.
    Failures,
    /// Kill -9 the binary mid-burst, restart it: seconds until every acknowledged event is applied.
    Recovery,
    /// Every dashboard page timed over HTTP on an inbox of `--dashboard-events` events.
    Dashboard,
    /// Not in the default run: the storage code without HTTP, fixed and varying batches.
    Diagnose,
    /// Not in the default run: the real binary under steady traffic for `--soak-secs`, its
    /// resident memory sampled every second (does it grow?).
    Soak,
    /// Not in the default run: `oncehook verify` (its own process) on `--verify-orders`
    /// orders and on a tenth of them: wall time and peak resident memory.
    Verify,
}

/// Ingest concurrency levels.
const SENDERS: [usize; 3] = [1, 16, 64];
/// Connections of the capacity probes: enough that the offered rate is not capped by
/// senders waiting for their answers (64 senders at 45 ms an answer offer 1,400/s at most),
/// and no more than the server's default `max_connections_per_address` (128): the load
/// comes from one address.
const CAPACITY_SENDERS: usize = 128;
/// Share of redeliveries in the duplicate storm.
const STORM_REDELIVERIES: f64 = 0.9;
/// Processing ceiling clients (the server's default worker count).
const PROCESS_CLIENTS: usize = 4;

struct Ctx {
    base: Settings,
    steps: Vec<Step>,
    latency_rate: Option<f64>,
    analyze_before_processing: bool,
    duration: Duration,
    events: u64,
    quick: bool,
    client_threads: usize,
    pgbench: PathBuf,
    secret: String,
    body0: String,
    dashboard_events: i64,
    soak_secs: u64,
    soak_rate: u64,
    autovacuum: Option<bool>,
    verify_orders: i64,
    capacity_window: Duration,
    capacity_seconds: bool,
    capacity_probes: usize,
    capacity_start: Option<f64>,
}

/// One ingest level.
pub struct IngestRun {
    pub senders: usize,
    /// The processor ran in the same server (else the receiver alone).
    pub processor: bool,
    pub load: LoadReport,
    pub cpu: sys::CpuUse,
    pub commits: Option<Commits>,
}

/// How the receiver's commits looked (PostgreSQL: read from the rows' xmin and the WAL).
#[derive(Clone, Copy, Debug)]
pub struct Commits {
    /// Events per ingest transaction, on average.
    pub events_per_tx: f64,
    /// Largest ingest transaction seen.
    pub max_events_per_tx: i64,
    /// WAL written per event, bytes.
    pub wal_per_event: f64,
}

/// The WAL position, in bytes (PostgreSQL).
async fn wal_position(db: &Db) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar::<_, i64>(
        "SELECT CAST(pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS BIGINT)",
    )
    .fetch_one(db.reader())
    .await?)
}

/// Groups the inbox rows above `after_id` by the transaction that wrote them.
async fn commits_since(db: &Db, after_id: i64, wal_before: i64) -> anyhow::Result<Commits> {
    let wal = wal_position(db).await? - wal_before;
    let sizes: Vec<i64> = sqlx::query_scalar(
        "SELECT COUNT(*) FROM inbox_events WHERE id > $1 GROUP BY CAST(xmin AS TEXT)",
    )
    .bind(after_id)
    .fetch_all(db.reader())
    .await?;
    let events: i64 = sizes.iter().sum();
    Ok(Commits {
        events_per_tx: events as f64 / sizes.len().max(1) as f64,
        max_events_per_tx: sizes.iter().copied().max().unwrap_or(0),
        wal_per_event: wal as f64 / events.max(1) as f64,
    })
}

pub struct Processing {
    pub events: u64,
    pub elapsed: Duration,
    pub drained: bool,
    pub cpu: sys::CpuUse,
    pub fill: LoadReport,
    pub check: String,
    pub ok: bool,
}

impl Latency {
    /// Seconds of receipt whose p99 was at or over `bound_ms`, and the worst (second, p99).
    pub fn slow_seconds(&self, bound_ms: u64) -> (usize, Option<(i64, u64)>) {
        let slow = self
            .by_second
            .iter()
            .filter(|(_, p)| *p >= bound_ms)
            .count();
        let worst = self.by_second.iter().copied().max_by_key(|(_, p)| *p);
        (slow, worst)
    }

    /// Every second's p99 as `second:watcher/stamped` (ms), `-` where the server's stamps
    /// have no event of that second: `--capacity-seconds`, to match slow seconds with what
    /// the machine did then (checkpoints, writeback, CPU).
    pub fn by_second_line(&self) -> String {
        self.by_second
            .iter()
            .map(|(s, p)| {
                let stamped = self
                    .stamped_p99_at(*s)
                    .map_or_else(|| "-".to_string(), |q| q.to_string());
                format!("{s}:{p}/{stamped}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The server's own p99 (`processed_at` − received at) in the second `second`.
    pub fn stamped_p99_at(&self, second: i64) -> Option<u64> {
        self.stamped_by_second
            .iter()
            .find(|(s, _)| *s == second)
            .map(|(_, p)| *p)
    }
}

impl Processing {
    pub fn per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

pub struct Latency {
    pub label: String,
    pub offered: f64,
    pub load: LoadReport,
    /// processed_at - received_at per event, milliseconds.
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
    pub processed: u64,
    /// (second of receipt since the timed load started, p99 ms of the events received in it).
    pub by_second: Vec<(i64, u64)>,
    /// The same from the server's own stamps (`processed_at` − received at): a second slow
    /// here too was slow in the server, not only in the watcher's looks.
    pub stamped_by_second: Vec<(i64, u64)>,
    /// (ms since the timed load started, ms): the watcher's longest wait between two looks.
    pub longest_look_gap: Option<(i64, i64)>,
    /// (ms since the timed load started, events not yet finished), about once a second
    /// while the senders sent.
    pub backlog: Vec<(i64, usize)>,
    pub window_ms: i64,
    /// Events still waiting when the senders stopped.
    pub backlog_at_end: i64,
    pub drained: bool,
    pub cpu: sys::CpuUse,
}

pub struct Storm {
    pub load: LoadReport,
    pub cpu: sys::CpuUse,
    pub distinct: u64,
    pub inbox_rows: i64,
    pub effects: i64,
    pub deliveries: i64,
    pub duplicate_deliveries: i64,
    pub ok: bool,
}

/// What a ceiling measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeilingKind {
    /// One event per transaction, one round trip (pg_ingest.sql; the SQLite loop).
    Ingest,
    /// One event per transaction, BEGIN/INSERT/INSERT/COMMIT (pg_ingest_tx.sql).
    IngestRoundTrips,
    /// SQLite loop, 100 events per transaction (context, not a ceiling).
    IngestBatched,
    /// The processing transaction's statements, one event per transaction.
    Processing,
    /// The same work set-based (pg_process_batch.sql): one statement per table for a batch
    /// of this many events per transaction; its rate is in events/s.
    ProcessingBatch(u32),
}

pub struct Ceiling {
    pub kind: CeilingKind,
    pub clients: usize,
    /// Transactions (Processing, Ingest*) or events (IngestBatched) per second.
    pub rate: f64,
    pub cpu: sys::CpuUse,
}

/// Everything measured on one database.
pub struct DbResults {
    pub kind: Kind,
    pub version: String,
    pub ceilings: Vec<Ceiling>,
    pub ingest: Vec<IngestRun>,
    pub processing: Option<Processing>,
    pub counters: Option<counters::Counters>,
    pub latency: Vec<Latency>,
    /// Every capacity probe, in the order run, and the highest sustained rate.
    pub capacity: Vec<(Latency, capacity::Verdict)>,
    pub capacity_rate: Option<f64>,
    pub storm: Option<Storm>,
    pub recovery: Option<recovery::Recovery>,
    pub dashboard: Option<dashboard::DashboardRun>,
    pub soak: Option<soak::Soak>,
    pub verify: Option<verify::VerifyBench>,
    pub diagnostics: Vec<diagnose::StoreRun>,
    pub rss_peak_kb: u64,
    /// Unauthenticated requests with 10,000 signature candidates: how fast they are refused.
    pub refusal: Option<Refusal>,
}

/// Requests with 10,000 empty `v1=` candidates and a 256 KiB body, sent one after another.
pub struct Refusal {
    pub requests: usize,
    /// Every answer's status was 400.
    pub all_400: bool,
    pub mean_ms: f64,
    pub max_ms: f64,
}

/// Sends `requests` requests with 10,000 signature candidates each and times the refusals.
async fn refusal(base_url: &str, requests: usize) -> anyhow::Result<Refusal> {
    let http = reqwest::Client::new();
    let header = format!(
        "t={}{}",
        oncehook::store::now_ms() / 1000,
        ",v1=".repeat(10_000)
    );
    let body = vec![b'x'; 256 * 1024 - 1];
    let (mut total, mut max, mut all_400) = (Duration::ZERO, Duration::ZERO, true);
    for _ in 0..requests {
        let started = Instant::now();
        let r = http
            .post(format!("{base_url}/webhooks/stripe"))
            .header("stripe-signature", &header)
            .body(body.clone())
            .send()
            .await?;
        all_400 &= r.status() == 400;
        let _ = r.bytes().await;
        let took = started.elapsed();
        total += took;
        max = max.max(took);
    }
    Ok(Refusal {
        requests,
        all_400,
        mean_ms: total.as_secs_f64() * 1000.0 / requests as f64,
        max_ms: max.as_secs_f64() * 1000.0,
    })
}

impl DbResults {
    fn new(kind: Kind) -> Self {
        DbResults {
            kind,
            version: String::new(),
            ceilings: vec![],
            ingest: vec![],
            processing: None,
            counters: None,
            latency: vec![],
            capacity: vec![],
            capacity_rate: None,
            storm: None,
            recovery: None,
            dashboard: None,
            soak: None,
            verify: None,
            diagnostics: vec![],
            rss_peak_kb: 0,
            refusal: None,
        }
    }

    /// The best one-event-per-transaction rate the database reached in this run.
    pub fn ceiling_max(&self) -> Option<f64> {
        self.ceilings
            .iter()
            .filter(|c| matches!(c.kind, CeilingKind::Ingest | CeilingKind::IngestRoundTrips))
            .map(|c| c.rate)
            .reduce(f64::max)
    }

    /// pgbench's one-event-per-transaction rate at 64 clients: the line the PostgreSQL
    /// targets are drawn against.
    pub fn pgbench_64(&self) -> Option<f64> {
        self.ceilings
            .iter()
            .find(|c| c.kind == CeilingKind::Ingest && c.clients == 64)
            .map(|c| c.rate)
    }

    pub fn processing_ceiling(&self) -> Option<&Ceiling> {
        self.ceilings
            .iter()
            .find(|c| c.kind == CeilingKind::Processing)
    }

    pub fn peak_ingest(&self) -> f64 {
        self.ingest
            .iter()
            .filter(|r| !r.processor)
            .map(|r| r.load.per_sec())
            .fold(0.0, f64::max)
    }
}

fn progress(message: impl AsRef<str>) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[bench {t:5.1}s] {}", message.as_ref());
}

fn main() -> anyhow::Result<()> {
    let args = BenchArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    child::set_binary(args.oncehook_bin.clone())?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let quick = args.quick;
    let duration = Duration::from_secs(args.duration_secs.unwrap_or(if quick { 1 } else { 5 }));
    let events = args.events.unwrap_or(if quick { 2_000 } else { 20_000 });
    anyhow::ensure!(
        duration.as_secs() >= 1,
        "--duration-secs must be at least 1"
    );
    anyhow::ensure!(events >= 100, "--events must be at least 100");
    let kinds: Vec<Kind> = match args.database {
        Which::Sqlite => vec![Kind::Sqlite],
        Which::Postgres => vec![Kind::Postgres],
        Which::Both => vec![Kind::Sqlite, Kind::Postgres],
    };
    if tracing::level_filters::LevelFilter::current() >= tracing::Level::INFO {
        progress(
            "note: info-level logging is on, so the server writes a log line per event to \
             stderr and the numbers include that cost; RUST_LOG=warn measures without it",
        );
    }
    let idle_load = sys::background_load(500).await;
    if idle_load > 0.2 {
        progress(format!(
            "warning: the machine is already busy ({idle_load:.2} cores used before the \
             benchmark started); numbers will be low and noisy"
        ));
    }

    let base = Settings::load(args.config.as_deref(), &Overrides::default())?;
    let factory = EventFactory::new();
    let steps = if args.steps.is_empty() {
        vec![
            Step::Ceilings,
            Step::Ingest,
            Step::Processing,
            Step::Counters,
            Step::Latency,
            Step::Capacity,
            Step::Storm,
            Step::Failures,
            Step::Recovery,
            Step::Dashboard,
        ]
    } else {
        args.steps.clone()
    };
    let ctx = Ctx {
        base,
        steps,
        latency_rate: args.latency_rate,
        analyze_before_processing: args.analyze_before_processing,
        duration,
        events,
        quick,
        client_threads: args.client_threads,
        pgbench: args.pgbench.clone(),
        secret: format!("whsec_bench_{}", uuid::Uuid::new_v4().simple()),
        body0: factory.body(0),
        soak_secs: args.soak_secs.unwrap_or(if quick { 30 } else { 300 }),
        soak_rate: args.soak_rate,
        autovacuum: args.autovacuum,
        capacity_seconds: args.capacity_seconds,
        capacity_window: Duration::from_secs(
            args.capacity_window_secs
                .unwrap_or(if quick { 5 } else { 60 })
                .max(2),
        ),
        capacity_probes: args.capacity_probes.unwrap_or(if quick { 3 } else { 7 }),
        capacity_start: args.capacity_start,
        verify_orders: args
            .verify_orders
            .unwrap_or(if quick { 20_000 } else { 1_000_000 }),
        dashboard_events: args
            .dashboard_events
            .unwrap_or(if quick { 50_000 } else { 1_000_000 }),
    };

    let rss_before_kb = sys::memory().rss_kb;

    let mut fixtures = fixture::Fixtures::new(&args.postgres_url, args.dir.as_deref())?;
    let started = Instant::now();
    let mut results = vec![];
    let mut outcome = Ok(());
    for kind in kinds {
        match bench_database(kind, &ctx, &mut fixtures).await {
            Ok(r) => results.push(r),
            Err(error) => {
                outcome = Err(error.context(format!("benchmarking {}", kind.label())));
                break;
            }
        }
    }
    fixtures.cleanup().await;
    outcome?;

    let info = report::RunInfo {
        machine: sys::machine_summary(),
        sqlite_version: ceiling::sqlite_version().await,
        settings: &ctx.base,
        duration,
        events,
        quick,
        client_threads: args.client_threads,
        rss_before_kb,
        hwm_kb: sys::memory().hwm_kb,
        idle_load,
        total: started.elapsed(),
        body_bytes: ctx.body0.len(),
    };
    print!("{}", report::render(&info, &results));
    Ok(())
}

async fn bench_database(
    kind: Kind,
    ctx: &Ctx,
    fixtures: &mut fixture::Fixtures,
) -> anyhow::Result<DbResults> {
    let mut r = DbResults::new(kind);
    let label = kind.label();
    let on = |step: Step| ctx.steps.contains(&step);

    // 1. The ceiling for ingest, then ingest through the server.
    if on(Step::Ceilings) {
        progress(format!("{label}: ingest ceiling"));
        match kind {
            Kind::Postgres => pg_ingest_ceiling(ctx, fixtures, &mut r).await?,
            Kind::Sqlite => {
                for (per_tx, kind, duration) in [
                    (1, CeilingKind::Ingest, ctx.duration),
                    (100, CeilingKind::IngestBatched, ctx.duration / 2),
                ] {
                    let db = fixtures.fresh(Kind::Sqlite, "ceiling").await?;
                    let cpu = sys::cpu_snapshot();
                    let rate =
                        ceiling::sqlite_ingest(&db, ctx.body0.as_bytes(), per_tx, duration).await?;
                    let cpu = cpu.since();
                    progress(format!(
                        "  {per_tx} event(s) per transaction: {rate:.0} events/s \
                         (cores: loop {:.2})",
                        cpu.server
                    ));
                    r.ceilings.push(Ceiling {
                        kind,
                        clients: 1,
                        rate,
                        cpu,
                    });
                }
            }
        }
    }
    // The peak RSS figure is the servers' (each in its own process), not the ceilings'.
    child::reset_peak_kb();

    if on(Step::Ingest) {
        progress(format!("{label}: ingest through the server, processor off"));
        let db = fixtures.fresh(kind, "ingest").await?;
        let server = start(ctx, fixtures, &db, true, false).await?;
        r.version = database_version(&server.db).await;
        let factory = EventFactory::new();
        let mut next = 0;
        let postgres = kind == Kind::Postgres;
        for senders in SENDERS {
            let last_id =
                count(&server.db, "SELECT COALESCE(MAX(id), 0) FROM inbox_events").await?;
            let wal_before = if postgres {
                wal_position(&server.db).await?
            } else {
                0
            };
            let cpu = sys::cpu_snapshot();
            let load = load::drive(
                plan(
                    ctx,
                    &server,
                    &factory,
                    senders,
                    next,
                    0.0,
                    Pace::AsFastAsPossible {
                        duration: ctx.duration,
                    },
                ),
                ctx.client_threads,
            )
            .await?;
            let cpu = cpu.since_with_client(load.client_cpu_secs);
            next = load.next_new;
            let commits = if postgres {
                Some(commits_since(&server.db, last_id, wal_before).await?)
            } else {
                None
            };
            if let Some(c) = commits {
                progress(format!(
                    "     {:.1} events per commit (max {}), {:.0} WAL bytes per event",
                    c.events_per_tx, c.max_events_per_tx, c.wal_per_event
                ));
            }
            progress(format!(
                "  {senders:>2} senders: {:.0} events/s, p50 {:.2} ms, p99 {:.2} ms \
                 (cores: server {:.2}, client {:.2}, PostgreSQL {:.2}, rest {:.2})",
                load.per_sec(),
                load.p_ms(0.5),
                load.p_ms(0.99),
                cpu.server,
                cpu.client,
                cpu.postgres,
                cpu.other - cpu.postgres
            ));
            r.ingest.push(IngestRun {
                senders,
                processor: false,
                load,
                cpu,
                commits,
            });
        }
        let refused = refusal(&server.url(), if ctx.quick { 20 } else { 200 }).await?;
        progress(format!(
            "  10,000 signature candidates + 256 KiB body: {} requests refused{}, mean {:.2} ms, \
             max {:.2} ms",
            refused.requests,
            if refused.all_400 {
                " with 400"
            } else {
                " (NOT all 400)"
            },
            refused.mean_ms,
            refused.max_ms
        ));
        r.refusal = Some(refused);
        server.shutdown().await?;

        progress(format!(
            "{label}: ingest at 64 senders with the processor on"
        ));
        let db = fixtures.fresh(kind, "ingest-processing").await?;
        let server = start(ctx, fixtures, &db, true, true).await?;
        let cpu = sys::cpu_snapshot();
        let load = load::drive(
            plan(
                ctx,
                &server,
                &factory,
                64,
                0,
                0.0,
                Pace::AsFastAsPossible {
                    duration: ctx.duration,
                },
            ),
            ctx.client_threads,
        )
        .await?;
        let cpu = cpu.since_with_client(load.client_cpu_secs);
        server.shutdown().await?;
        progress(format!(
            "  64 senders, processor on: {:.0} events/s, p99 {:.2} ms (cores: server {:.2}, \
             client {:.2}, PostgreSQL {:.2})",
            load.per_sec(),
            load.p_ms(0.99),
            cpu.server,
            cpu.client,
            cpu.postgres
        ));
        r.ingest.push(IngestRun {
            senders: 64,
            processor: true,
            load,
            cpu,
            commits: None,
        });
    }

    // 2. Processing: its ceiling, then a full inbox and the workers alone.
    if on(Step::Ceilings) {
        progress(format!("{label}: processing ceiling"));
        let ceiling_rows = 16_000 * ctx.duration.as_secs() + 2_000;
        let db = fixtures.fresh(kind, "process-ceiling").await?;
        if kind == Kind::Postgres {
            migrate(&db).await?;
            ceiling::prepare_pg_processing(&db.url, ceiling_rows, ctx.body0.as_bytes()).await?;
        }
        let cpu = sys::cpu_snapshot();
        let (clients, rate) = match kind {
            Kind::Postgres => {
                let run = ceiling::pgbench(
                    &ctx.pgbench,
                    fixtures.dir(),
                    ("pg_process.sql", ceiling::PG_PROCESS),
                    &db.url,
                    PROCESS_CLIENTS,
                    ctx.duration,
                    &[("payload", &ceiling::outbox_payload())],
                )
                .await?;
                (PROCESS_CLIENTS, run.tps)
            }
            Kind::Sqlite => {
                let rate = ceiling::sqlite_processing(
                    &db,
                    ctx.body0.as_bytes(),
                    ctx.duration,
                    ceiling_rows,
                )
                .await?;
                (1, rate)
            }
        };
        let cpu = cpu.since();
        progress(format!(
            "  {clients} client(s): {rate:.0} tx/s (cores: this process {:.2}, everything else \
             {:.2})",
            cpu.server, cpu.other
        ));
        r.ceilings.push(Ceiling {
            kind: CeilingKind::Processing,
            clients,
            rate,
            cpu,
        });
        if kind == Kind::Postgres {
            let batches: &[u32] = if ctx.quick { &[32] } else { &[32, 128] };
            for &batch in batches {
                let db = fixtures.fresh(kind, "process-ceiling").await?;
                migrate(&db).await?;
                ceiling::prepare_pg_processing(&db.url, ceiling_rows, ctx.body0.as_bytes()).await?;
                let cpu = sys::cpu_snapshot();
                let run = ceiling::pgbench(
                    &ctx.pgbench,
                    fixtures.dir(),
                    ("pg_process_batch.sql", ceiling::PG_PROCESS_BATCH),
                    &db.url,
                    PROCESS_CLIENTS,
                    ctx.duration,
                    &[
                        ("payload", &ceiling::outbox_payload()),
                        ("batch", &batch.to_string()),
                    ],
                )
                .await?;
                let cpu = cpu.since();
                let rate = run.tps * f64::from(batch);
                progress(format!(
                    "  set-based, {batch} events per transaction, {PROCESS_CLIENTS} clients: \
                     {rate:.0} events/s (cores: everything else {:.2})",
                    cpu.other
                ));
                r.ceilings.push(Ceiling {
                    kind: CeilingKind::ProcessingBatch(batch),
                    clients: PROCESS_CLIENTS,
                    rate,
                    cpu,
                });
            }
        }
    }
    if on(Step::Processing) {
        progress(format!(
            "{label}: processing {} events through the processor",
            ctx.events
        ));
        let p = processing(ctx, fixtures, kind).await?;
        progress(format!(
            "  {:.0} effects/s ({}) (cores: server {:.2}, other {:.2})",
            p.per_sec(),
            p.check,
            p.cpu.server,
            p.cpu.other
        ));
        r.processing = Some(p);
    }
    if on(Step::Counters) {
        progress(format!(
            "{label}: the hot path's counters, and a rollup flush"
        ));
        let fresh = fixtures.fresh(kind, "counters").await?;
        migrate(&fresh).await?;
        let db = Db::connect(&fresh.url).await?;
        let measured = counters::measure(&db, if ctx.quick { 100_000 } else { 1_000_000 }).await;
        db.close().await;
        let c = measured?;
        for (threads, ns) in &c.per_event_ns {
            progress(format!(
                "  {threads} thread(s): {ns:.0} ns of CPU per event"
            ));
        }
        progress(format!(
            "  flush of {} rollup rows: {:.2} ms (median of 20)",
            c.flush_rows, c.flush_ms
        ));
        r.counters = Some(c);
    }

    // 3. Receipt to effect at half the peak rate, processor on.
    if on(Step::Latency) {
        let mut rates = vec![];
        let peak_ingest = r.peak_ingest();
        let processing_rate = r.processing.as_ref().map_or(0.0, Processing::per_sec);
        let overload = processing_rate > 0.0 && peak_ingest / 2.0 > processing_rate;
        if let Some(rate) = ctx.latency_rate {
            rates.push(("the given rate".to_string(), rate));
        } else if peak_ingest > 0.0 && !(ctx.quick && overload) {
            // (--quick skips it when it is known to overload the processor: that run is
            // mostly waiting for the backlog to drain.)
            rates.push(("½ peak ingest".to_string(), peak_ingest / 2.0));
        }
        if ctx.latency_rate.is_none()
            && processing_rate > 0.0
            && (peak_ingest / 2.0 > 0.8 * processing_rate || peak_ingest == 0.0)
        {
            // Half the ingest peak is more than the processor sustains: the backlog (and the
            // latency) grows without bound there. Half the end-to-end peak is the fair test.
            rates.push(("½ peak processing".to_string(), processing_rate / 2.0));
        }
        anyhow::ensure!(
            !rates.is_empty(),
            "the latency step needs the ingest or processing step, or --latency-rate"
        );
        for (what, rate) in rates {
            progress(format!(
                "{label}: receipt-to-effect latency at {rate:.0} events/s ({what})"
            ));
            r.latency.push(
                latency(
                    ctx,
                    fixtures,
                    kind,
                    what,
                    rate.max(1.0),
                    ctx.duration.max(Duration::from_secs(2)),
                    64,
                )
                .await?,
            );
        }
    }

    if on(Step::Capacity) {
        // With the same run's pgbench ceiling, the first probe is the target line (half of
        // it), so the search confirms or refutes the target before it bisects.
        let start = ctx.capacity_start.unwrap_or_else(|| {
            r.pgbench_64().map(|c| c / 2.0).unwrap_or_else(|| {
                r.processing
                    .as_ref()
                    .map_or(500.0, |p| p.per_sec().max(50.0))
            })
        });
        let mut search = capacity::Search::new(start, ctx.capacity_probes);
        while let Some(rate) = search.next_rate() {
            progress(format!(
                "{label}: capacity probe at {rate:.0} events/s for {} s",
                ctx.capacity_window.as_secs()
            ));
            let probe = latency(
                ctx,
                fixtures,
                kind,
                "capacity".into(),
                rate,
                ctx.capacity_window,
                CAPACITY_SENDERS,
            )
            .await?;
            let verdict = capacity::verdict(&probe);
            let (slow, worst) = probe.slow_seconds(capacity::P99_BOUND_MS);
            progress(format!(
                "  {} of {} seconds had p99 ≥ {} ms; worst second {}",
                slow,
                probe.by_second.len(),
                capacity::P99_BOUND_MS,
                worst.map_or("-".into(), |(s, p)| format!("{s} s in: p99 {p} ms"))
            ));
            if ctx.capacity_seconds {
                progress(format!(
                    "  p99 by second of receipt (watcher / server's stamps, ms): {}",
                    probe.by_second_line()
                ));
            }
            // Tells a stall of the server from a slow look of the watcher.
            progress(format!(
                "  in that second by the server's own stamps (processed_at, at work start): \
                 p99 {}; the watcher's longest wait between two looks: {}",
                worst
                    .and_then(|(s, _)| probe.stamped_p99_at(s))
                    .map_or("-".into(), |p| format!("{p} ms")),
                probe
                    .longest_look_gap
                    .map_or("-".into(), |(at, gap)| format!(
                        "{gap} ms, ending {:.1} s in",
                        at as f64 / 1000.0
                    ))
            ));
            progress(format!(
                "  {}: backlog {:.0} → {:.0}, p99 {} ms{}",
                if verdict.sustained {
                    "sustained"
                } else {
                    "NOT sustained"
                },
                verdict.backlog_early,
                verdict.backlog_late,
                probe.p99_ms,
                if verdict.sustained {
                    String::new()
                } else {
                    format!(" ({})", verdict.reason)
                }
            ));
            search.record(rate, verdict.sustained);
            r.capacity.push((probe, verdict));
        }
        r.capacity_rate = search.capacity();
        progress(format!(
            "  capacity: {}",
            r.capacity_rate
                .map_or("no probed rate was sustained".into(), |c| format!(
                    "{c:.0} events/s"
                ))
        ));
    }

    // 4. Duplicate storm, processor on.
    if on(Step::Storm) {
        progress(format!(
            "{label}: duplicate storm ({:.0} % redeliveries, 64 senders)",
            STORM_REDELIVERIES * 100.0
        ));
        r.storm = Some(storm(ctx, fixtures, kind).await?);
    }
    r.rss_peak_kb = child::peak_kb();

    // 5. Failure handling: the relay and bulk redrive.
    if on(Step::Failures) {
        let rows = if ctx.quick { 1_000 } else { 5_000 };
        progress(format!(
            "{label}: relay, {rows} outbox rows to a loopback HTTP sink"
        ));
        let db = fixtures.fresh(kind, "relay").await?;
        let relay = failures::relay_throughput(&db.url, rows, 2).await?;
        progress(format!(
            "  relay: {:.0} deliveries/s ({} delivered in {:.2} s, sink received {})",
            relay.per_sec(),
            relay.deliveries,
            relay.secs,
            relay.received
        ));
        let orders = if ctx.quick { 200 } else { 2_000 };
        progress(format!(
            "{label}: relay, refund commands to the simulator's API ({orders} orders)"
        ));
        let db = fixtures.fresh(kind, "commands").await?;
        let run = commands::refunds_throughput(&ctx.base, &db, fixtures.dir(), &ctx.secret, orders)
            .await?;
        progress(format!(
            "  commands: {} orders, {} refunds asked, all sent in {:.2} s ({:.0} commands/s), all confirmed by their webhooks in {:.2} s; {} failed",
            run.orders,
            run.commands,
            run.sent_secs,
            run.sent_per_sec(),
            run.confirmed_secs,
            run.failed
        ));
        let db = fixtures.fresh(kind, "redrive").await?;
        let redrive = failures::redrive_many(&db.url, 10_000).await?;
        progress(format!(
            "  redrive: {} dead letters in {:.2} s ({:.0}/s)",
            redrive.items,
            redrive.secs,
            redrive.items as f64 / redrive.secs.max(1e-9)
        ));
    }

    // 6. Crash recovery: the real binary, killed mid-burst and restarted.
    if on(Step::Recovery) {
        let (burst, kill_after) = if ctx.quick {
            (2_000, 500)
        } else {
            (10_000, 3_000)
        };
        progress(format!(
            "{label}: crash recovery, kill -9 after {kill_after} of {burst} events, restart"
        ));
        let db = fixtures.fresh(kind, "recovery").await?;
        let recovered =
            recovery::crash_and_restart(&db, fixtures.dir(), &ctx.secret, burst, kill_after)
                .await?;
        progress(format!(
            "  recovery: healthy after {:.2} s, every acknowledged event applied after {:.2} s \
             ({} waiting, {} claimed by the killed process); {}",
            recovered.healthy_secs,
            recovered.applied_secs,
            recovered.waiting_at_kill,
            recovered.claimed_at_kill,
            recovered.check
        ));
        r.recovery = Some(recovered);
    }

    // 7. The dashboard on a large inbox.
    if on(Step::Dashboard) {
        let events = ctx.dashboard_events;
        progress(format!(
            "{label}: dashboard pages on {events} events (real traffic, then the inbox multiplied in SQL)"
        ));
        let db = fixtures.fresh(kind, "dashboard").await?;
        let run = dashboard::measure(
            &ctx.base,
            &db,
            fixtures.dir(),
            &ctx.secret,
            events,
            if ctx.quick { 10 } else { 30 },
        )
        .await?;
        progress(format!(
            "  {} events in the inbox after {:.1} s of seeding",
            run.events, run.seed_secs
        ));
        for page in &run.pages {
            progress(format!(
                "  {}: p50 {:.1} ms, p99 {:.1} ms ({}; {})",
                page.label, page.p50_ms, page.p99_ms, page.status, page.path
            ));
        }
        r.dashboard = Some(run);
    }

    if on(Step::Soak) {
        let (secs, rate) = (ctx.soak_secs, ctx.soak_rate);
        progress(format!(
            "{label}: soak, the real binary at {rate} deliveries/s for {secs} s"
        ));
        let db = fixtures.fresh(kind, "soak").await?;
        let soak = soak::run(
            &ctx.base,
            &db,
            fixtures.dir(),
            &ctx.secret,
            secs,
            rate,
            ctx.autovacuum,
        )
        .await?;
        let (first, last) = soak.throughput_first_last();
        let (p99_first, p99_last, p99_max) = soak.p99_first_last_max();
        progress(format!(
            "  autovacuum {}: applied {first:.0}/s in the first steady minute, {last:.0}/s in the \
             last; p99 {p99_first} → {p99_last} ms (worst minute {p99_max} ms, {:+.2} ms/min); \
             VmRSS {} KiB at the start, {} KiB at most, {:+.0} KiB/min over the second half; \
             {} acknowledged, {} events, {} effects — {}",
            soak.autovacuum,
            soak.p99_slope_ms_per_min(),
            soak.first_kb(),
            soak.max_kb(),
            soak.late_slope_kb_per_min(),
            soak.acked,
            soak.distinct,
            soak.effects,
            soak.verdict()
        ));
        r.soak = Some(soak);
    }

    if on(Step::Verify) {
        let orders = ctx.verify_orders;
        progress(format!(
            "{label}: oncehook verify on {orders} orders (seeded in SQL) and on a tenth of them"
        ));
        let db = fixtures.fresh(kind, "verify").await?;
        let bench = verify::measure(&db, orders).await?;
        for run in &bench.runs {
            progress(format!(
                "  {} orders: {:.1} s, peak RSS {} KiB, {} drifting, {} missing messages{}",
                run.orders,
                run.elapsed.as_secs_f64(),
                run.peak_kb,
                run.drifting,
                run.missing,
                if run.ok {
                    ""
                } else {
                    " — NOT WHAT WAS PLANTED"
                }
            ));
        }
        progress(format!(
            "  seeded in {:.1} s; load average {}",
            bench.seed_secs, bench.load
        ));
        r.verify = Some(bench);
    }

    if on(Step::Diagnose) {
        use diagnose::Sizes::*;
        let writers = match kind {
            Kind::Sqlite => 1,
            Kind::Postgres => ctx.base.receiver.writers.max(1),
        };
        for (sizes, tasks) in [
            (Fixed(1), 1),
            (Fixed(8), 1),
            (Fixed(32), 1),
            (Varying(64), 1),
            (Fixed(8), writers),
            (Varying(16), writers),
        ] {
            let db = fixtures.fresh(kind, "diagnose").await?;
            let run = diagnose::store_direct(&db, sizes, tasks, ctx.duration).await?;
            progress(format!(
                "  {}: {:.0} events/s (cores: this process {:.2}, PostgreSQL {:.2}, rest {:.2})",
                run.label,
                run.per_sec,
                run.cpu.server,
                run.cpu.postgres,
                run.cpu.other - run.cpu.postgres
            ));
            r.diagnostics.push(run);
        }
    }
    if r.version.is_empty() {
        r.version = match kind {
            Kind::Sqlite => format!("SQLite {}", ceiling::sqlite_version().await),
            Kind::Postgres => fixtures.postgres_version().await,
        };
    }
    Ok(r)
}

fn plan(
    ctx: &Ctx,
    server: &ChildServer,
    factory: &EventFactory,
    senders: usize,
    first_new: u64,
    redelivery_share: f64,
    pace: Pace,
) -> Plan {
    Plan {
        addr: server.addr,
        provider: fixture::PROVIDER.into(),
        secret: ctx.secret.clone(),
        factory: factory.clone(),
        senders,
        pace,
        redelivery_share,
        first_new,
    }
}

async fn start(
    ctx: &Ctx,
    fixtures: &fixture::Fixtures,
    db: &FreshDb,
    receiver: bool,
    processor: bool,
) -> anyhow::Result<ChildServer> {
    let settings = fixture::server_settings(
        &ctx.base,
        db,
        fixtures.dir(),
        &ctx.secret,
        receiver,
        processor,
    );
    ChildServer::start(&settings, fixtures.dir(), "server")
        .await
        .context("starting the server under test")
}

async fn migrate(db: &FreshDb) -> anyhow::Result<()> {
    let handle = Db::connect(&db.url).await?;
    handle.migrate().await?;
    handle.close().await;
    Ok(())
}

async fn database_version(db: &Db) -> String {
    let sql = match db.backend {
        oncehook::store::Backend::Postgres => "SELECT version()",
        oncehook::store::Backend::Sqlite => "SELECT 'SQLite ' || sqlite_version()",
    };
    sqlx::query_scalar::<_, String>(sql)
        .fetch_one(db.reader())
        .await
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

async fn count(db: &Db, sql: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(db.reader())
        .await
        .with_context(|| sql.to_string())
}

const PENDING: &str = "SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')";

/// Whether any inbox row is waiting: one probe of the claim's partial index. (Counting
/// them every 10 ms took 30-40 ms per count at a 20k backlog on PostgreSQL, most of a core
/// the processor being measured did not get.)
const ANY_PENDING: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM inbox_events \
    WHERE status IN ('pending', 'processing') LIMIT 1) AS waiting";

/// Waits (bounded) until no inbox row is waiting; returns whether it got there.
pub(crate) async fn wait_drained(db: &Db, timeout: Duration) -> anyhow::Result<bool> {
    let start = Instant::now();
    loop {
        if count(db, ANY_PENDING).await? == 0 {
            return Ok(true);
        }
        if start.elapsed() > timeout {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn pg_ingest_ceiling(
    ctx: &Ctx,
    fixtures: &mut fixture::Fixtures,
    r: &mut DbResults,
) -> anyhow::Result<()> {
    let sha = hex::encode(Sha256::digest(ctx.body0.as_bytes()));
    let vars = [("body", ctx.body0.as_str()), ("body_sha256", sha.as_str())];
    let mut scripts = vec![("pg_ingest.sql", ceiling::PG_INGEST)];
    if !ctx.quick {
        scripts.push(("pg_ingest_tx.sql", ceiling::PG_INGEST_TX));
    }
    for script in scripts {
        let db = fixtures.fresh(Kind::Postgres, "ceiling").await?;
        migrate(&db).await?;
        for clients in SENDERS {
            let cpu = sys::cpu_snapshot();
            let run = ceiling::pgbench(
                &ctx.pgbench,
                fixtures.dir(),
                script,
                &db.url,
                clients,
                ctx.duration,
                &vars,
            )
            .await?;
            let cpu = cpu.since();
            progress(format!(
                "  {} {clients:>2} clients: {:.0} tx/s, latency {:.2} ms \
                 (cores: PostgreSQL + pgbench {:.2})",
                script.0,
                run.tps,
                run.latency_ms.unwrap_or(f64::NAN),
                cpu.other
            ));
            r.ceilings.push(Ceiling {
                kind: if script.0 == "pg_ingest.sql" {
                    CeilingKind::Ingest
                } else {
                    CeilingKind::IngestRoundTrips
                },
                clients,
                rate: run.tps,
                cpu,
            });
        }
    }
    Ok(())
}

async fn processing(
    ctx: &Ctx,
    fixtures: &mut fixture::Fixtures,
    kind: Kind,
) -> anyhow::Result<Processing> {
    let db = fixtures.fresh(kind, "processing").await?;
    let factory = EventFactory::new();
    let receiver = start(ctx, fixtures, &db, true, false).await?;
    let fill = load::drive(
        plan(
            ctx,
            &receiver,
            &factory,
            64,
            0,
            0.0,
            Pace::Count { count: ctx.events },
        ),
        ctx.client_threads,
    )
    .await?;
    receiver.shutdown().await?;
    anyhow::ensure!(
        fill.acked == ctx.events,
        "filling the inbox: {} of {} events acknowledged ({})",
        fill.acked,
        ctx.events,
        fill.first_failure.as_deref().unwrap_or("")
    );
    if ctx.analyze_before_processing {
        // Diagnostic: give the query planner statistics before the workers start.
        let handle = Db::connect(&db.url).await?;
        sqlx::query("ANALYZE inbox_events")
            .execute(handle.writer())
            .await?;
        handle.close().await;
    }

    let cpu = sys::cpu_snapshot();
    let t0 = Instant::now();
    let workers = start(ctx, fixtures, &db, false, true).await?;
    let drained = wait_drained(&workers.db, Duration::from_secs(120 + ctx.events / 100)).await?;
    let elapsed = t0.elapsed();
    let cpu = cpu.since();
    let applied = count(
        &workers.db,
        "SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'",
    )
    .await?;
    let effects = count(&workers.db, "SELECT COUNT(*) FROM processed_effects").await?;
    let outbox = count(&workers.db, "SELECT COUNT(*) FROM outbox").await?;
    let ledger = count(&workers.db, "SELECT COUNT(*) FROM order_ledger").await?;
    workers.shutdown().await?;
    let n = ctx.events as i64;
    // Each event pays a new order: a payment.recorded and an order.paid message.
    let ok = drained && applied == n && effects == n && outbox == 2 * n && ledger == n;
    Ok(Processing {
        events: ctx.events,
        elapsed,
        drained,
        cpu,
        fill,
        check: format!(
            "{applied} applied, {effects} effects, {ledger} ledger rows, {outbox} outbox rows \
             of {n} events"
        ),
        ok,
    })
}

async fn latency(
    ctx: &Ctx,
    fixtures: &mut fixture::Fixtures,
    kind: Kind,
    label: String,
    rate: f64,
    duration: Duration,
    senders: usize,
) -> anyhow::Result<Latency> {
    let db = fixtures.fresh(kind, "latency").await?;
    let factory = EventFactory::new();
    let server = start(ctx, fixtures, &db, true, true).await?;
    // A second of light traffic first, not counted: the pools open their connections and
    // prepare their statements there, which is start-up, not steady state. (Light, so an
    // overloading rate does not leave a backlog behind it.)
    let warm_up = load::drive(
        plan(
            ctx,
            &server,
            &factory,
            64,
            0,
            0.0,
            Pace::Rate {
                per_sec: rate.min(200.0),
                duration: Duration::from_secs(1),
            },
        ),
        ctx.client_threads,
    )
    .await?;
    wait_drained(&server.db, Duration::from_secs(30)).await?;
    let warm_up_rows = count(&server.db, "SELECT COALESCE(MAX(id), 0) FROM inbox_events").await?;
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = watch::spawn(server.db.clone(), warm_up_rows, stop_watching.clone());
    let cpu = sys::cpu_snapshot();
    let load_started_ms = oncehook::store::now_ms();
    let load = load::drive(
        plan(
            ctx,
            &server,
            &factory,
            senders,
            warm_up.next_new,
            0.0,
            Pace::Rate {
                per_sec: rate,
                duration,
            },
        ),
        ctx.client_threads,
    )
    .await?;
    let cpu = cpu.since_with_client(load.client_cpu_secs);
    let window_ms = duration.as_millis() as i64;
    let backlog_at_end = count(&server.db, PENDING).await?;
    let drained = wait_drained(&server.db, Duration::from_secs(30)).await?;
    stop_watching.cancel();
    let watched = watcher.await.context("the effect watcher panicked")??;
    server.shutdown().await?;
    let by_second = watch::p99_by_second(&watched, load_started_ms);
    let stamped_by_second = watch::p99_by_second_of(&watched.stamped, load_started_ms);
    let longest_look_gap = watched
        .gaps
        .longest
        .map(|(at, gap)| (at - load_started_ms, gap));
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("valid histogram");
    for ms in watched.latency_ms() {
        hist.record(ms.max(0) as u64)
            .context("recording a latency")?;
    }
    progress(format!(
        "  offered {rate:.0}/s, acknowledged {:.0}/s; receipt-to-effect p50 {} ms, p99 {} ms",
        load.per_sec(),
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99)
    ));
    Ok(Latency {
        label,
        offered: rate,
        load,
        p50_ms: hist.value_at_quantile(0.5),
        p99_ms: hist.value_at_quantile(0.99),
        max_ms: hist.max(),
        processed: watched.latencies.len() as u64,
        by_second,
        stamped_by_second,
        longest_look_gap,
        backlog: watched
            .backlog
            .into_iter()
            .filter(|(at, _)| *at <= window_ms)
            .collect(),
        window_ms,
        backlog_at_end,
        drained,
        cpu,
    })
}

async fn storm(ctx: &Ctx, fixtures: &mut fixture::Fixtures, kind: Kind) -> anyhow::Result<Storm> {
    let db = fixtures.fresh(kind, "storm").await?;
    let factory = EventFactory::new();
    let server = start(ctx, fixtures, &db, true, true).await?;
    let seed_count = if ctx.quick { 500 } else { 2_000 };
    let seed = load::drive(
        plan(
            ctx,
            &server,
            &factory,
            16,
            0,
            0.0,
            Pace::Count { count: seed_count },
        ),
        ctx.client_threads,
    )
    .await?;
    let cpu = sys::cpu_snapshot();
    let load = load::drive(
        plan(
            ctx,
            &server,
            &factory,
            64,
            seed_count,
            STORM_REDELIVERIES,
            Pace::AsFastAsPossible {
                duration: ctx.duration,
            },
        ),
        ctx.client_threads,
    )
    .await?;
    let cpu = cpu.since_with_client(load.client_cpu_secs);
    progress(format!(
        "  {:.0} deliveries/s acknowledged ({:.0} % duplicates), p99 {:.2} ms",
        load.per_sec(),
        100.0 * load.acked_duplicates as f64 / load.acked.max(1) as f64,
        load.p_ms(0.99)
    ));
    let drained = wait_drained(&server.db, Duration::from_secs(60)).await?;
    let inbox_rows = count(&server.db, "SELECT COUNT(*) FROM inbox_events").await?;
    let applied = count(
        &server.db,
        "SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'",
    )
    .await?;
    let effects = count(&server.db, "SELECT COUNT(*) FROM processed_effects").await?;
    let deliveries = count(&server.db, "SELECT COUNT(*) FROM deliveries").await?;
    let duplicate_deliveries = count(
        &server.db,
        "SELECT COUNT(*) FROM deliveries WHERE duplicate = 1",
    )
    .await?;
    server.shutdown().await?;
    let distinct = load.next_new;
    let failures = seed.failed + load.failed;
    let ok = drained
        && failures == 0
        && inbox_rows == distinct as i64
        && applied == inbox_rows
        && effects == inbox_rows
        && deliveries == (seed.acked + load.acked) as i64
        && duplicate_deliveries == load.acked_duplicates as i64;
    Ok(Storm {
        load,
        cpu,
        distinct,
        inbox_rows,
        effects,
        deliveries,
        duplicate_deliveries,
        ok,
    })
}
