//! The consistency check at scale (`--steps verify`): orders written in SQL as the processor
//! leaves them (a payment each; every tenth also partly refunded: facts, ledger entries,
//! outbox messages), then `oncehook verify` run as the real binary in its own process, its
//! wall time and resident memory sampled. Run at a tenth of the size and at the full size:
//! bounded memory means the peak does not grow with the orders. Three orders are tampered
//! with and one message deleted before the full-size run, which must find exactly those.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::fixture::FreshDb;
use super::sys::memory_of;
use oncehook::store::{Backend, Db};

/// Orders written per transaction while seeding.
const CHUNK: i64 = 50_000;

pub struct VerifyRun {
    pub orders: i64,
    pub elapsed: Duration,
    /// Peak VmHWM / VmRSS of the `oncehook verify` process.
    pub peak_kb: u64,
    pub drifting: i64,
    pub missing: i64,
    /// Found what was planted (nothing, or the three orders and one message).
    pub ok: bool,
}

pub struct VerifyBench {
    pub runs: Vec<VerifyRun>,
    pub seed_secs: f64,
    /// `uptime`'s load averages when the step ended: other work on the machine.
    pub load: String,
}

/// Writes orders `from..=to` with their facts, ledger and outbox rows, in chunks.
async fn seed(db: &Db, from: i64, to: i64, now: i64) -> anyhow::Result<()> {
    let (prefix, source) = match db.backend {
        Backend::Postgres => (
            "",
            "generate_series(CAST($1 AS BIGINT), CAST($2 AS BIGINT)) AS s(g)",
        ),
        Backend::Sqlite => (
            "WITH RECURSIVE s(g) AS (SELECT $1 UNION ALL SELECT g + 1 FROM s WHERE g < $2) ",
            "s",
        ),
    };
    // $3: now. Every tenth order has a refund of 1000 of its 4200.
    let statements = [
        "INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, \
         amount_disputed, attention, last_event_at, last_event_id, created_at, updated_at) \
         SELECT 'ord_' || g, CASE WHEN g % 10 = 0 THEN 'partially_refunded' ELSE 'paid' END, \
         'EUR', 4200, CASE WHEN g % 10 = 0 THEN 1000 ELSE 0 END, 0, NULL, $3, 'evt_' || g, $3, $3 \
         FROM {source}",
        "INSERT INTO order_facts (order_id, kind, resource_id, parent_ref, state, class, at_ms, \
         sequence, rank, amount, money_seen, canceled_at, provider, event_id, created_at, updated_at) \
         SELECT 'ord_' || g, 'payment', 'pi_' || g, NULL, 'pay', 1, $3, NULL, 4, 4200, 1, NULL, \
         'stripe', 'evt_' || g, $3, $3 FROM {source}",
        "INSERT INTO order_facts (order_id, kind, resource_id, parent_ref, state, class, at_ms, \
         sequence, rank, amount, money_seen, canceled_at, provider, event_id, created_at, updated_at) \
         SELECT 'ord_' || g, 'refund', 're_' || g, 'pi_' || g, 'refund', 2, $3, NULL, 2, 1000, 1, \
         NULL, 'stripe', 'evt_r_' || g, $3, $3 FROM {source} WHERE g % 10 = 0",
        "INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, \
         external_ref, effect_key, provider, event_id, occurred_at, recorded_at, entry, group_ref, \
         counted) SELECT 'ord_' || g, 'pay', 'paid', 4200, 'EUR', 'pi_' || g, 'lp_' || g, 'stripe', \
         'evt_' || g, $3, $3, 'payment', NULL, 4200 FROM {source}",
        "INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, \
         external_ref, effect_key, provider, event_id, occurred_at, recorded_at, entry, group_ref, \
         counted) SELECT 'ord_' || g, 'refund', 'partially_refunded', 1000, 'EUR', 're_' || g, \
         'lr_' || g, 'stripe', 'evt_r_' || g, $3, $3, 'refund', 'pi_' || g, 1000 \
         FROM {source} WHERE g % 10 = 0",
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at, delivered_at) \
         SELECT 'ip_' || g, 'lp_' || g, 'ord_' || g, 'payment.recorded', 'log', '{}', 'c_' || g, \
         'delivered', $3, $3, $3 FROM {source}",
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at, delivered_at) \
         SELECT 'is_' || g, 'es_' || g, 'ord_' || g, 'order.paid', 'log', '{}', 'c_' || g, \
         'delivered', $3, $3, $3 FROM {source}",
        "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
         correlation_id, status, next_attempt_at, created_at, delivered_at) \
         SELECT 'ir_' || g, 'lr_' || g, 'ord_' || g, 'refund.recorded', 'log', '{}', 'c_' || g, \
         'delivered', $3, $3, $3 FROM {source} WHERE g % 10 = 0",
    ];
    let mut start = from;
    while start <= to {
        let end = (start + CHUNK - 1).min(to);
        let mut tx = db.writer().begin().await?;
        for statement in &statements {
            sqlx::query(&format!(
                "{prefix}{}",
                statement.replace("{source}", source)
            ))
            .bind(start)
            .bind(end)
            .bind(now)
            .execute(&mut *tx)
            .await
            .context("seeding orders")?;
        }
        tx.commit().await?;
        start = end + 1;
    }
    Ok(())
}

/// `oncehook verify --json` on `db` in its own process: its report and peak memory.
async fn run_binary(db: &FreshDb) -> anyhow::Result<(serde_json::Value, Duration, u64)> {
    let started = Instant::now();
    let child = tokio::process::Command::new(crate::child::binary())
        .args([
            "verify",
            "--json",
            "--limit",
            "10",
            "--database-url",
            &db.url,
        ])
        .env("RUST_LOG", "warn")
        .env_remove("ONCEHOOK_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting oncehook verify")?;
    let pid = child.id().context("the child's pid")?.to_string();
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        loop {
            let m = memory_of(&pid);
            if m.rss_kb == 0 {
                // Gone: the last sample's high-water mark is the peak.
                return peak;
            }
            peak = peak.max(m.hwm_kb).max(m.rss_kb);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let out = child.wait_with_output().await?;
    let elapsed = started.elapsed();
    let peak = sampler.await?;
    let code = out.status.code();
    anyhow::ensure!(
        matches!(code, Some(0) | Some(3)),
        "oncehook verify failed (exit {code:?})"
    );
    Ok((serde_json::from_slice(&out.stdout)?, elapsed, peak))
}

pub async fn measure(db_url: &FreshDb, orders: i64) -> anyhow::Result<VerifyBench> {
    let db = Db::connect(&db_url.url).await?;
    db.migrate().await?;
    let now = oncehook::store::now_ms();
    let mut runs = Vec::new();
    let tenth = (orders / 10).max(1);
    let seeding = Instant::now();
    seed(&db, 1, tenth, now).await?;
    let mut seed_secs = seeding.elapsed().as_secs_f64();
    for (size, tamper) in [(tenth, false), (orders, true)] {
        if size > tenth {
            let seeding = Instant::now();
            seed(&db, tenth + 1, size, now).await?;
            seed_secs += seeding.elapsed().as_secs_f64();
        }
        if tamper {
            sqlx::query(
                "UPDATE orders SET status = 'refunded' WHERE order_id IN ('ord_1', 'ord_2', 'ord_3')",
            )
            .execute(db.writer())
            .await?;
            sqlx::query("DELETE FROM outbox WHERE idempotency_key = 'ip_4'")
                .execute(db.writer())
                .await?;
        }
        if db.backend == Backend::Postgres {
            // Planner statistics after a bulk load, as autovacuum would gather them.
            sqlx::query("ANALYZE").execute(db.writer()).await?;
        }
        super::progress(format!("  verify on {size} orders"));
        let (report, elapsed, peak_kb) = run_binary(db_url).await?;
        let count = |k: &str| report[k].as_i64().unwrap_or(-1);
        let (checked, drifting, missing) = (
            count("orders_checked"),
            count("drifting_orders"),
            count("missing_messages"),
        );
        let expected = if tamper { (3, 1) } else { (0, 0) };
        runs.push(VerifyRun {
            orders: checked,
            elapsed,
            peak_kb,
            drifting,
            missing,
            ok: checked == size && (drifting, missing) == expected,
        });
    }
    db.close().await;
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    Ok(VerifyBench {
        runs,
        seed_secs,
        load,
    })
}
