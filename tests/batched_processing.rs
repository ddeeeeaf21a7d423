//! Many events per processing transaction must give exactly the state that one transaction
//! per event gives, whether the batch is applied set-based (a few multi-row statements for
//! the whole batch, the default) or one savepoint per event: every outcome on its own, a
//! failing event's writes undone without touching its neighbours, and later events seeing
//! earlier ones of the same batch. Compared column by column, outbox payloads included.

mod common;

use common::fixtures::*;
use common::{snapshot, Kind, Snapshot, TestApp};
use serde_json::json;

both!(
    independent_writes_share_statements_within_the_parameter_limit,
    writes_then_a_query_run_every_write_and_return_the_query_rows,
    a_backlog_is_drained_in_larger_claims_by_fewer_workers_exactly_once,
    a_mixed_batch_in_one_transaction_equals_one_transaction_per_event,
    many_orders_in_concurrent_set_based_batches_equal_one_transaction_per_event,
    a_fenced_claim_fails_the_set_based_batch_naming_it,
    a_database_error_in_one_event_of_a_set_based_batch_fails_only_that_event,
    a_batch_claimed_in_its_own_transaction_rolls_its_claim_back_on_failure,
    an_aborted_group_transaction_is_reported_not_silently_rolled_back,
    per_event_and_set_based_workers_on_the_same_orders_never_deadlock,
    write_sessions_are_durable_and_plan_for_the_tables_as_they_are,
    the_reference_lookup_probes_the_key_without_statistics,
    a_one_commit_batch_files_each_event_with_one_write,
    a_claim_reads_the_head_of_a_backlog_not_all_of_it,
);

/// Every kind of outcome, in an order where later events depend on earlier ones.
fn mixed_events() -> Vec<serde_json::Value> {
    let mut unmapped = payment_intent_succeeded("evt_m_unmapped", "pi_x", "order-x", 1, T10_00);
    unmapped["type"] = json!("customer.created");
    let mut in_dollars = refund_created("evt_m_usd", "pi_b", "re_usd", 5, T10_00 + 70);
    in_dollars["data"]["object"]["currency"] = json!("usd");
    let mut twice_usd = refund_created("evt_m_twice_usd", "pi_b", "re_twice", 7, T10_00 + 95);
    twice_usd["data"]["object"]["currency"] = json!("usd");
    vec![
        // applied; remembers pi_b for the events below
        payment_intent_succeeded("evt_m_pay", "pi_b", "order-b", 100, T10_00),
        // the same payment under another event type: duplicate
        invoice_paid_new("evt_m_invoice", "pi_b", 100, T10_00 + 1),
        // names only pi_b: resolved through the reference written earlier in this batch;
        // refunds more than was paid: recorded and flagged, never dropped
        refund_created("evt_m_too_much", "pi_b", "re_big", 999_999, T10_00 + 60),
        // another currency: business failure, dead letter, its writes rolled back alone
        in_dollars,
        // a failure after the payment succeeded: a refused regression, recorded
        payment_intent_failed("evt_m_failed", "pi_b", "order-b", T10_00 + 30),
        // refunded total stamped 10:02, then the payment stamped 10:00: the payment is
        // stale, and its money counted
        charge_refunded("evt_m_refund", "pi_c", "re_c", "order-c", 50, T10_00 + 120),
        payment_intent_succeeded("evt_m_late_pay", "pi_c", "order-c", 50, T10_00),
        // names only a payment nobody has mentioned: retried later
        refund_created("evt_m_orphan", "pi_nobody", "re_o", 10, T10_00),
        // not in the mapping: ignored
        unmapped,
        // a partial refund that fits: applied after the failures above were rolled back
        refund_created("evt_m_refund_b", "pi_b", "re_b", 40, T10_00 + 90),
        // one refund announced twice: first in the wrong currency (dead letter, its effect
        // key left free), then right: the second event takes the key
        twice_usd,
        refund_created("evt_m_twice_eur", "pi_b", "re_twice", 7, T10_00 + 95),
    ]
}

struct Outcome {
    state: Snapshot,
    /// Every column the processor writes, times aside, table by table.
    columns: Vec<Vec<String>>,
    dead_letters: Vec<(String, String)>,
    waiting: Vec<String>,
}

/// How a test processes its claim.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// One transaction per event.
    PerEvent,
    /// One transaction for the claim, one savepoint and several statements per event.
    Savepoints,
    /// One transaction for the claim, a few multi-row statements for all of it (default).
    SetBased,
}

fn configure(s: &mut oncehook::config::Settings, mode: Mode) {
    s.processor.enabled = false;
    s.outbox.relay.enabled = false;
    s.processor.claim_batch = 32;
    match mode {
        Mode::PerEvent => s.processor.events_per_transaction = Some(1),
        Mode::Savepoints => {
            s.processor.events_per_transaction = None;
            s.processor.set_based = false;
        }
        Mode::SetBased => {
            s.processor.events_per_transaction = None;
            assert!(s.processor.set_based, "set-based is the default");
        }
    }
}

/// The columns the processor writes, as text, times (which differ run to run) left out.
async fn columns(db: &oncehook::store::Db) -> Vec<Vec<String>> {
    let queries = [
        "SELECT order_id, status, currency, amount_paid, amount_refunded, amount_disputed, \
         attention, last_event_at, last_event_id FROM orders ORDER BY order_id",
        "SELECT order_id, kind, resource_id, parent_ref, state, class, at_ms, sequence, rank, \
         amount, money_seen, canceled_at, provider, event_id FROM order_facts \
         ORDER BY order_id, kind, resource_id",
        "SELECT effect_key, transition, order_id, external_ref, provider, event_id, outcome \
         FROM processed_effects ORDER BY effect_key",
        "SELECT effect_key, order_id, transition, status_after, amount, currency, external_ref, \
         provider, event_id, occurred_at, entry, group_ref, counted FROM order_ledger \
         ORDER BY effect_key",
        // (correlation ids are fresh per request: not compared)
        "SELECT idempotency_key, effect_key, order_id, topic, sink, payload, status \
         FROM outbox ORDER BY idempotency_key",
        "SELECT event_id, order_id, provider, transition, kind, reason, order_status, amount, \
         currency, occurred_at FROM stale_events ORDER BY event_id",
        "SELECT provider, reference, order_id FROM payment_refs ORDER BY provider, reference",
        "SELECT event_id, status, reason, order_id, effect_key FROM inbox_events ORDER BY event_id",
    ];
    let mut out = Vec::new();
    for sql in queries {
        let rows = sqlx::query(sql).fetch_all(db.reader()).await.unwrap();
        out.push(rows.iter().map(row_text).collect());
    }
    out
}

async fn process_mixed(kind: Kind, mode: Mode) -> Outcome {
    let app = TestApp::spawn_with(kind, |s| configure(s, mode)).await;
    for event in mixed_events() {
        assert_eq!(app.post_stripe(&event).await.status(), 200);
    }
    let processor = app.processor();
    let claimed = processor.run_once(&Default::default()).await.unwrap();
    assert_eq!(claimed, 12, "one claim takes the whole set");
    assert_eq!(
        processor.batch_fallbacks(),
        0,
        "{mode:?}: no batch fell back"
    );
    let rows = |sql: &'static str| {
        let pool = app.db.reader().clone();
        async move {
            sqlx::query_as::<_, (String, String)>(sql)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    let outcome = Outcome {
        state: snapshot(&app.db).await,
        columns: columns(&app.db).await,
        dead_letters: rows("SELECT event_id, error_class FROM dead_letters ORDER BY event_id")
            .await,
        waiting: rows(
            "SELECT event_id, status FROM inbox_events WHERE status = 'pending' ORDER BY event_id",
        )
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect(),
    };
    app.shutdown().await;
    outcome
}

async fn a_mixed_batch_in_one_transaction_equals_one_transaction_per_event(kind: Kind) {
    let single = process_mixed(kind, Mode::PerEvent).await;
    let savepoints = process_mixed(kind, Mode::Savepoints).await;
    let batched = process_mixed(kind, Mode::SetBased).await;
    for (name, other) in [("savepoints", &savepoints), ("set-based", &batched)] {
        assert_eq!(other.state, single.state, "{name}");
        for (table, (got, want)) in other.columns.iter().zip(&single.columns).enumerate() {
            assert_eq!(got.len(), want.len(), "{name}: rows of table {table}");
            for (g, w) in got.iter().zip(want) {
                assert_eq!(
                    g, w,
                    "{name}: table {table} differs from one transaction per event"
                );
            }
        }
        assert_eq!(other.dead_letters, single.dead_letters, "{name}");
        assert_eq!(other.waiting, single.waiting, "{name}");
    }

    // And the state is the right one, not merely the same one.
    let status = |id: &str| {
        batched
            .state
            .inbox
            .iter()
            .find(|(event, _, _)| event == id)
            .map(|(_, status, _)| status.clone())
            .unwrap()
    };
    assert_eq!(status("evt_m_pay"), "applied");
    assert_eq!(status("evt_m_invoice"), "duplicate");
    assert_eq!(status("evt_m_too_much"), "applied");
    assert_eq!(status("evt_m_usd"), "dead");
    assert_eq!(status("evt_m_failed"), "refused");
    assert_eq!(status("evt_m_refund"), "applied");
    assert_eq!(status("evt_m_late_pay"), "stale");
    assert_eq!(status("evt_m_orphan"), "pending");
    assert_eq!(status("evt_m_unmapped"), "ignored");
    assert_eq!(status("evt_m_refund_b"), "applied");
    assert_eq!(status("evt_m_twice_usd"), "dead");
    assert_eq!(status("evt_m_twice_eur"), "applied");
    assert_eq!(
        batched.dead_letters,
        vec![
            ("evt_m_twice_usd".to_string(), "business".to_string()),
            ("evt_m_usd".to_string(), "business".to_string())
        ]
    );
    assert_eq!(batched.waiting, vec!["evt_m_orphan".to_string()]);
    let orders: Vec<(&str, &str)> = batched
        .state
        .orders
        .iter()
        .map(|(id, status, _, _)| (id.as_str(), status.as_str()))
        .collect();
    assert_eq!(
        orders,
        vec![("order-b", "refunded"), ("order-c", "refunded")]
    );
    assert_eq!(
        batched.state.effects.len(),
        7,
        "pay b, too-much refund, refused failure, refund b, refund twice, refunded total c, \
         stale pay c: only the mismatched key stays free"
    );
    let twice = batched
        .state
        .effects
        .iter()
        .find(|(_, transition, event, _)| {
            transition == "refund" && event.starts_with("evt_m_twice")
        })
        .expect("the refund announced twice has its effect");
    assert_eq!(
        twice.2, "evt_m_twice_eur",
        "held by the event that applied it"
    );
    assert_eq!(
        batched.state.ledger.len(),
        6,
        "payment b, refunds re_big, re_b and re_twice, refunded total c, payment c"
    );
    assert_eq!(
        batched.state.stale.len(),
        2,
        "the late payment and the refusal"
    );
}

/// 40 orders, each with a payment announced twice (the second event names the order only
/// through the payment), a refund and some a dispute, all shuffled: four workers claiming
/// eight at a time apply them in overlapping set-based batches. The state must be the one
/// a single worker reaches one transaction per event, as far as arrival order cannot
/// change it, and on PostgreSQL no batch may deadlock (orders are locked in one order).
fn many_orders() -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    for o in 0..40i64 {
        let (order, pi) = (format!("order-{o:02}"), format!("pi_{o:02}"));
        events.push(payment_intent_succeeded(
            &format!("evt_p{o}"),
            &pi,
            &order,
            1000,
            T10_00 + o,
        ));
        events.push(invoice_paid_new(
            &format!("evt_i{o}"),
            &pi,
            1000,
            T10_00 + o + 1,
        ));
        events.push(refund_created(
            &format!("evt_r{o}"),
            &pi,
            &format!("re_{o}"),
            100 * (o % 5 + 1),
            T10_00 + o + 60,
        ));
        if o % 3 == 0 {
            events.push(dispute_created(
                &format!("evt_d{o}"),
                &pi,
                &format!("dp_{o}"),
                900,
                T10_00 + o + 120,
            ));
        }
    }
    let mut rng: u64 = 18;
    for i in (1..events.len()).rev() {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        events.swap(i, (rng >> 33) as usize % (i + 1));
    }
    events
}

/// Runs every worker until idle, at once, again and again until no event is open (events
/// waiting for a retry come due between rounds).
async fn drain(
    app: &TestApp,
    workers: &[std::sync::Arc<oncehook::pipeline::processor::Processor>],
) {
    for round in 0.. {
        let tasks: Vec<_> = workers
            .iter()
            .map(|p| {
                let p = p.clone();
                tokio::spawn(async move { p.run_until_idle().await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let open = app
            .count("SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')")
            .await;
        if open == 0 {
            return;
        }
        assert!(round < 2000, "{open} events still open");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn process_many(kind: Kind, mode: Mode, workers: usize) -> (Vec<Vec<String>>, u64, u64) {
    let app = TestApp::spawn_with(kind, |s| {
        configure(s, mode);
        s.processor.claim_batch = 8;
        // Events that name their order only through a payment not yet applied retry soon.
        s.processor.retry.base_ms = 5;
        s.processor.retry.cap_ms = 20;
    })
    .await;
    for event in many_orders() {
        assert_eq!(app.post_stripe(&event).await.status(), 200);
    }
    let processor = std::sync::Arc::new(app.processor());
    drain(&app, &vec![processor.clone(); workers]).await;
    // What arrival order cannot change.
    let queries = [
        "SELECT order_id, status, currency, amount_paid, amount_refunded, amount_disputed, \
         attention FROM orders ORDER BY order_id",
        "SELECT order_id, kind, resource_id, parent_ref, state, amount, money_seen, canceled_at \
         FROM order_facts ORDER BY order_id, kind, resource_id",
        "SELECT effect_key, transition, order_id, external_ref FROM processed_effects \
         ORDER BY effect_key",
        "SELECT effect_key, order_id, entry, amount, counted, currency FROM order_ledger \
         ORDER BY effect_key",
        "SELECT provider, reference, order_id FROM payment_refs ORDER BY provider, reference",
        "SELECT effect_key, COUNT(*) FROM outbox WHERE topic NOT LIKE 'order.%' \
         GROUP BY effect_key ORDER BY effect_key",
        "SELECT status, COUNT(*) FROM inbox_events GROUP BY status ORDER BY status",
    ];
    let mut out = Vec::new();
    for sql in queries {
        let rows = sqlx::query(sql).fetch_all(app.db.reader()).await.unwrap();
        out.push(rows.iter().map(row_text).collect());
    }
    let dead = app.count("SELECT COUNT(*) FROM dead_letters").await;
    assert_eq!(dead, 0, "{mode:?}: nothing dead-lettered");
    let unannounced = app
        .count(
            "SELECT COUNT(*) FROM order_ledger l WHERE \
             (SELECT COUNT(*) FROM outbox o WHERE o.effect_key = l.effect_key) <> 1",
        )
        .await;
    assert_eq!(unannounced, 0, "{mode:?}: one message per ledger entry");
    let result = (
        out,
        processor.batch_fallbacks(),
        processor.batch_conflicts(),
    );
    app.shutdown().await;
    result
}

async fn many_orders_in_concurrent_set_based_batches_equal_one_transaction_per_event(kind: Kind) {
    let (single, _, _) = process_many(kind, Mode::PerEvent, 1).await;
    let (batched, fallbacks, conflicts) = process_many(kind, Mode::SetBased, 4).await;
    for (table, (got, want)) in batched.iter().zip(&single).enumerate() {
        assert_eq!(got, want, "table {table}");
    }
    assert_eq!(single[0].len(), 40, "every order exists");
    assert_eq!(fallbacks, 0, "every batch was applied set-based");
    assert_eq!(
        conflicts, 0,
        "no batch deadlocked: orders are locked in one order"
    );
}

/// Each claim's event as the processor maps it, for calling `apply_batch` directly.
fn map_claims(
    app: &TestApp,
    claims: &[oncehook::store::inbox::Claimed],
) -> Vec<oncehook::provider::mapping::MappedEvent> {
    let providers = oncehook::config::Providers::build(&app.settings.providers).unwrap();
    claims
        .iter()
        .map(|c| {
            let provider = providers.get(&c.provider).unwrap();
            provider.mapping.map(&c.raw_body).unwrap()
        })
        .collect()
}

fn mapped_inputs<'a>(
    claims: &'a [oncehook::store::inbox::Claimed],
    mapped: &'a [oncehook::provider::mapping::MappedEvent],
) -> Vec<oncehook::store::batch::Input<'a>> {
    claims
        .iter()
        .zip(mapped)
        .map(|(claim, event)| oncehook::store::batch::Input::Mapped { claim, event })
        .collect()
}

/// A claim another worker took over (its attempt moved on) fails the whole batch, naming
/// it, and nothing of the batch is written; the processor then runs it without that claim.
async fn a_fenced_claim_fails_the_set_based_batch_naming_it(kind: Kind) {
    use oncehook::store::batch::{apply_batch, BatchError};
    use sqlx::Connection;
    let app = TestApp::spawn_with(kind, |s| configure(s, Mode::SetBased)).await;
    for o in 0..3 {
        post_payment(&app, &format!("f{o}"), 500, T10_00).await;
    }
    let now = oncehook::store::now_ms();
    let claims = oncehook::store::inbox::claim(&app.db, now, now + 30_000, 10)
        .await
        .unwrap();
    assert_eq!(claims.len(), 3);
    sqlx::query("UPDATE inbox_events SET attempts = attempts + 1 WHERE id = $1")
        .bind(claims[1].id)
        .execute(app.db.writer())
        .await
        .unwrap();
    let mapped = map_claims(&app, &claims);
    let inputs = mapped_inputs(&claims, &mapped);
    let mut conn = app.db.writer().acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let result = apply_batch(&mut tx, app.db.backend, &inputs, &app.settings.outbox, now).await;
    match result {
        Err(BatchError::Fenced(ids)) => assert_eq!(ids, vec![claims[1].id]),
        other => panic!("expected the fenced claim, got {other:?}"),
    }
    tx.rollback().await.unwrap();
    drop(conn);
    assert_eq!(app.count("SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM processed_effects").await, 0);

    // Handed back (as after its lease), the three are applied by one set-based batch.
    sqlx::query("UPDATE inbox_events SET status = 'pending', next_attempt_at = 0")
        .execute(app.db.writer())
        .await
        .unwrap();
    let processor = app.processor();
    assert_eq!(processor.run_until_idle().await.unwrap(), 3);
    assert_eq!(processor.batch_fallbacks(), 0);
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'")
            .await,
        3
    );
    app.shutdown().await;
}

/// A set-based batch claims its rows in the transaction that applies them (SQLite: a lease
/// written in that transaction; PostgreSQL: advisory locks, nothing written): a failure
/// anywhere in the batch rolls the claim back with everything else, so the rows are due
/// again at once with their attempt counters untouched (not leased for `lease_secs`), and
/// the step-by-step path then isolates the failing event.
async fn a_batch_claimed_in_its_own_transaction_rolls_its_claim_back_on_failure(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| configure(s, Mode::SetBased)).await;
    refuse_ledger_rows_of(&app, kind, "order-bad").await;
    for (id, order) in [("evt_ok", "order-ok"), ("evt_bad", "order-bad")] {
        let event = payment_intent_succeeded(id, &format!("pi_{id}"), order, 900, T10_00);
        assert_eq!(app.post_stripe(&event).await.status(), 200);
    }
    let inbox = || async {
        sqlx::query_as::<_, (String, String, i64)>(
            "SELECT event_id, status, attempts FROM inbox_events ORDER BY event_id",
        )
        .fetch_all(app.db.reader())
        .await
        .unwrap()
    };
    let row =
        |id: &str, status: &str, attempts: i64| (id.to_string(), status.to_string(), attempts);
    let processor = app.processor();
    let error = processor.claim_and_apply(32).await.unwrap_err();
    assert!(
        format!("{error:#}").contains("refused for the test"),
        "{error:#}"
    );
    assert_eq!(
        inbox().await,
        vec![row("evt_bad", "pending", 0), row("evt_ok", "pending", 0)],
        "the claim rolled back with the batch"
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM orders").await, 0);
    // run_once: the one-commit batch fails again, the step-by-step path claims (a commit),
    // falls back to one event at a time, and only the refused event waits for a retry.
    assert_eq!(processor.run_once(&Default::default()).await.unwrap(), 2);
    assert_eq!(
        inbox().await,
        vec![row("evt_bad", "pending", 1), row("evt_ok", "applied", 1)]
    );
    app.shutdown().await;
}

/// Makes the database refuse ledger rows of one order (a trigger stands in for any
/// constraint or storage failure).
async fn refuse_ledger_rows_of(app: &TestApp, kind: Kind, order: &str) {
    let trigger: Vec<String> = match kind {
        Kind::Sqlite => vec![format!(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON order_ledger \
             WHEN NEW.order_id = '{order}' BEGIN SELECT RAISE(ABORT, 'refused for the test'); END"
        )],
        Kind::Postgres => vec![
            format!(
                "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.order_id = '{order}' THEN RAISE EXCEPTION 'refused for the test'; \
                 END IF; RETURN NEW; END $$"
            ),
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON order_ledger \
             FOR EACH ROW EXECUTE FUNCTION refuse_bad()"
                .to_string(),
        ],
    };
    for sql in trigger {
        sqlx::query(&sql).execute(app.db.writer()).await.unwrap();
    }
}

/// A write the database refuses for one order (a trigger stands in for any constraint or
/// storage failure): the set-based batch as a whole fails, is processed again one event at a
/// time, and only that event fails (to be retried); its neighbours are applied.
async fn a_database_error_in_one_event_of_a_set_based_batch_fails_only_that_event(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| configure(s, Mode::SetBased)).await;
    refuse_ledger_rows_of(&app, kind, "order-bad").await;
    for (id, order) in [
        ("evt_ok1", "order-ok1"),
        ("evt_bad", "order-bad"),
        ("evt_ok2", "order-ok2"),
    ] {
        let event = payment_intent_succeeded(id, &format!("pi_{id}"), order, 700, T10_00);
        assert_eq!(app.post_stripe(&event).await.status(), 200);
    }
    let processor = app.processor();
    assert_eq!(processor.run_once(&Default::default()).await.unwrap(), 3);
    assert_eq!(processor.batch_fallbacks(), 1, "the batch fell back once");
    let state = snapshot(&app.db).await;
    let inbox: Vec<(&str, &str)> = state
        .inbox
        .iter()
        .map(|(id, status, _)| (id.as_str(), status.as_str()))
        .collect();
    assert_eq!(
        inbox,
        vec![
            ("evt_bad", "pending"),
            ("evt_ok1", "applied"),
            ("evt_ok2", "applied")
        ]
    );
    let orders: Vec<&str> = state.orders.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(
        orders,
        vec!["order-ok1", "order-ok2"],
        "nothing of the failed event kept"
    );
    let reason: String =
        sqlx::query_scalar("SELECT reason FROM inbox_events WHERE event_id = 'evt_bad'")
            .fetch_one(app.db.reader())
            .await
            .unwrap();
    assert!(reason.contains("refused for the test"), "{reason}");
    app.shutdown().await;
}

fn row_text(r: &sqlx::any::AnyRow) -> String {
    use sqlx::Row;
    (0..r.columns().len())
        .map(|i| {
            r.try_get::<Option<String>, _>(i)
                .map(|v| format!("{v:?}"))
                .or_else(|_| r.try_get::<Option<i64>, _>(i).map(|v| format!("{v:?}")))
                .unwrap()
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// On PostgreSQL a statement failing outside a savepoint aborts the transaction and COMMIT
/// then rolls back without an error; the group commit must see that, not report success.
async fn an_aborted_group_transaction_is_reported_not_silently_rolled_back(kind: Kind) {
    use sqlx::Connection;
    let app = TestApp::spawn_with(kind, |s| {
        s.processor.enabled = false;
        s.outbox.relay.enabled = false;
    })
    .await;
    let mut conn = app.db.writer().acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO audit_log (actor, action, target, at) VALUES ('t', 'a', 'x', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let failed =
        sqlx::query("INSERT INTO audit_log (actor, action, target, at) VALUES (NULL, 'a', 'x', 1)")
            .execute(&mut *tx)
            .await;
    assert!(failed.is_err(), "NOT NULL violation");
    let committed = oncehook::store::commit_checked(tx).await;
    drop(conn);
    let kept = app
        .count("SELECT COUNT(*) FROM audit_log WHERE actor = 't'")
        .await;
    match kind {
        // The failed statement aborted everything: reported as an error, nothing kept.
        Kind::Postgres => {
            assert!(committed.is_err());
            assert_eq!(kept, 0);
        }
        // SQLite undoes only the failed statement: the rest commits.
        Kind::Sqlite => {
            committed.unwrap();
            assert_eq!(kept, 1);
        }
    }
    app.shutdown().await;
}

/// The per-event path (one transaction per event; also what a batch falls back to) takes
/// the order's lock before the effect key, as the set-based path does: a worker of each on
/// the same orders never waits on the other in a cycle. Before, the per-event path inserted
/// the key first, so two events of one payment (one effect key, e.g. a resend under a new
/// event id) taken by a worker of each deadlocked (PostgreSQL).
async fn per_event_and_set_based_workers_on_the_same_orders_never_deadlock(kind: Kind) {
    const ORDERS: i64 = 150;
    let app = TestApp::spawn_with(kind, |s| {
        configure(s, Mode::SetBased);
        s.processor.claim_batch = 1;
        // A failed event retries soon.
        s.processor.retry.base_ms = 5;
        s.processor.retry.cap_ms = 20;
    })
    .await;
    // Both announcements of each payment side by side, so workers take them at once.
    for o in 0..ORDERS {
        let (order, pi) = (format!("order-{o:03}"), format!("pi_{o:03}"));
        let pay = payment_intent_succeeded(&format!("evt_p{o}"), &pi, &order, 1000, T10_00 + o);
        // The same change under a second event id (a provider's resend): one effect key.
        let again = payment_intent_succeeded(&format!("evt_q{o}"), &pi, &order, 1000, T10_00 + o);
        assert_eq!(app.post_stripe(&pay).await.status(), 200);
        assert_eq!(app.post_stripe(&again).await.status(), 200);
    }
    let set_based = std::sync::Arc::new(app.processor());
    let mut per_event_settings = app.settings.clone();
    configure(&mut per_event_settings, Mode::Savepoints);
    per_event_settings.processor.events_per_transaction = Some(1);
    per_event_settings.processor.claim_batch = 1;
    let per_event = std::sync::Arc::new(common::processor(&app.db, &per_event_settings));
    let started = std::time::Instant::now();
    drain(
        &app,
        &[
            set_based.clone(),
            per_event.clone(),
            set_based.clone(),
            per_event.clone(),
        ],
    )
    .await;
    eprintln!("drained in {:?}", started.elapsed());
    let deadlocked = app
        .count(
            "SELECT COUNT(*) FROM inbox_events WHERE error_history LIKE '%deadlock%' \
             OR reason LIKE '%deadlock%'",
        )
        .await;
    assert_eq!(deadlocked, 0, "no event of either path met a deadlock");
    assert_eq!(
        set_based.batch_conflicts(),
        0,
        "no set-based batch deadlocked"
    );
    let paid = app
        .count("SELECT COUNT(*) FROM orders WHERE status = 'paid' AND amount_paid = 1000")
        .await;
    assert_eq!(paid, ORDERS, "each order paid once");
    let effects = app.count("SELECT COUNT(*) FROM processed_effects").await;
    assert_eq!(
        effects, ORDERS,
        "one effect per payment, whichever announcement won"
    );
    app.shutdown().await;
}

/// The write pool's session settings the processor relies on. SQLite: WAL with FULL
/// sync. PostgreSQL: durable commits, and every statement planned for the tables as they
/// are when it runs, never from a generic plan cached while they were empty (with
/// autovacuum off nothing ever replaces it: the batch's key lookups became scans of the
/// whole table, slower with every order). Checked on a pooled connection after it ran the
/// processor's statements many times over a growing table.
async fn write_sessions_are_durable_and_plan_for_the_tables_as_they_are(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        // Driven by the test (`drain`, then one large claim), not in the background.
        s.processor.enabled = false;
        s.processor.claim_batch = 8;
        s.processor.workers = 1;
    })
    .await;
    let processor = std::sync::Arc::new(app.processor());
    for n in 0..120 {
        post_payment(&app, &format!("plan{n}"), 1000, T10_00 + n).await;
        // A batch after every few receipts, as a live stream gives the workers.
        if n % 3 == 2 {
            drain(&app, std::slice::from_ref(&processor)).await;
        }
    }
    assert_eq!(
        app.count("SELECT COUNT(*) FROM orders WHERE status = 'paid'")
            .await,
        120
    );
    match kind {
        Kind::Sqlite => {
            let mut conn = app.db.writer().acquire().await.unwrap();
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!((journal.as_str(), synchronous), ("wal", 2), "WAL, FULL");
        }
        Kind::Postgres => {
            // Every open session of the write pool (those the processor used): durable,
            // and none of the statements they prepared with parameters ran on a cached
            // generic plan (one without parameters has only the one plan, which
            // PostgreSQL counts generic).
            let write = app.db.write_sessions().await.unwrap();
            assert_eq!(
                (
                    write.plan_cache_mode.as_str(),
                    write.synchronous_commit.as_str()
                ),
                ("force_custom_plan", "on")
            );
            assert!(
                write.custom_plans() > 100,
                "{} custom plans over {} sessions",
                write.custom_plans(),
                write.count
            );
            assert_eq!(
                write.generic_plans(),
                0,
                "no statement ran on a cached generic plan"
            );
            // The batch's independent writes (facts, ledger, outbox, references, orders)
            // went as one statement (`store::values::Writes`), not one per table; a live
            // stream's small batches keep theirs prepared, planned afresh each time.
            let group = write
                .plans
                .iter()
                .find(|(k, _)| k.starts_with("WITH w0"))
                .map(|(_, p)| *p)
                .unwrap_or_else(|| panic!("no writes statement kept: {:?}", write.plans));
            assert!(group.custom > 0 && group.generic == 0, "{group:?}");
            assert!(
                !write.plans.contains_key("INSERT INTO order_ledger"),
                "{:?}",
                write.plans.keys()
            );
            // The inbox's filing was the main query of that statement, not one of its own.
            assert!(
                !write
                    .plans
                    .keys()
                    .any(|k| k.starts_with("SELECT oncehook_file")),
                "{:?}",
                write.plans.keys()
            );
            // The receipt pool: durable too, and its one statement (inserts over the
            // batch's VALUES list, whose plan cannot depend on the tables' size) reuses a
            // cached plan instead of planning each batch. The 120 receipts, posted one after
            // another, came mostly one per batch: one statement text run many times.
            let receipts = app.db.receipt_sessions().await.unwrap();
            assert_eq!(
                (
                    receipts.plan_cache_mode.as_str(),
                    receipts.synchronous_commit.as_str()
                ),
                ("auto", "on")
            );
            let statements: Vec<&str> = receipts.plans.keys().map(String::as_str).collect();
            assert_eq!(
                statements,
                ["WITH batch (n, provider,"],
                "only receipts are written here, one statement per batch"
            );
            for (statement, plans) in &receipts.plans {
                assert!(
                    plans.generic >= 50 && plans.custom <= 5 * receipts.count as i64,
                    "{statement}: {plans:?} over {} sessions",
                    receipts.count
                );
            }
            // A backlog's large claim runs its writes unprepared: no connection keeps a
            // text with more parameters than `MAX_PREPARED_PARAMS` (each is tens of KB,
            // one per combination of row counts).
            for n in 0..100 {
                post_payment(&app, &format!("plan_big{n}"), 1000, T10_00 + 200 + n).await;
            }
            let mut claims = Vec::new();
            loop {
                match processor.claim_and_apply(100).await.unwrap() {
                    0 => break,
                    n => claims.push(n),
                }
            }
            assert_eq!(claims, [100]);
            let write = app.db.write_sessions().await.unwrap();
            let most = write.plans.values().map(|p| p.params).max().unwrap();
            assert!(
                most > 0 && most as usize <= oncehook::store::values::MAX_PREPARED_PARAMS,
                "{most} parameters kept: {:?}",
                write.plans
            );
        }
    }
    assert_eq!(
        app.count("SELECT COUNT(*) FROM orders WHERE status = 'paid'")
            .await,
        if kind == Kind::Postgres { 220 } else { 120 }
    );
    app.shutdown().await;
}

/// The batch's payment-reference lookup reads one key per reference, not every reference
/// of the provider, on a table that has never been analysed (PostgreSQL with autovacuum
/// off, or a fresh SQLite file): as the plan the database really makes for the statement
/// the batch sends, with 32 references bound.
async fn the_reference_lookup_probes_the_key_without_statistics(kind: Kind) {
    let app = TestApp::spawn(kind).await;
    let fill = match kind {
        Kind::Postgres => {
            "INSERT INTO payment_refs (provider, reference, order_id) \
             SELECT 'stripe', 'pi_' || g, 'ord_' || g FROM generate_series(1, 20000) AS g"
        }
        Kind::Sqlite => {
            "WITH RECURSIVE g (x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 20000) \
             INSERT INTO payment_refs (provider, reference, order_id) \
             SELECT 'stripe', 'pi_' || x, 'ord_' || x FROM g"
        }
    };
    sqlx::query(fill).execute(app.db.writer()).await.unwrap();
    let sql = oncehook::store::batch::payment_refs_lookup(app.db.backend, 32);
    let explain = match kind {
        Kind::Postgres => format!("EXPLAIN {sql}"),
        Kind::Sqlite => format!("EXPLAIN QUERY PLAN {sql}"),
    };
    let mut q = sqlx::query(&explain).bind("stripe");
    for n in 0..32 {
        q = q.bind(format!("pi_{}", n * 600 + 7));
    }
    let rows = q.fetch_all(app.db.writer()).await.unwrap();
    let plan: Vec<String> = rows
        .iter()
        .map(|r| {
            use sqlx::Row;
            match kind {
                Kind::Postgres => r.try_get::<String, _>(0).unwrap(),
                Kind::Sqlite => r.try_get::<String, _>(3).unwrap(),
            }
        })
        .collect();
    let plan = plan.join("\n");
    match kind {
        Kind::Postgres => {
            assert!(
                plan.contains("Index Scan using payment_refs_pkey")
                    && plan.contains("reference = "),
                "one probe of the key per reference:\n{plan}"
            );
            assert!(!plan.contains("Seq Scan on payment_refs"), "{plan}");
            assert!(
                !plan.contains("Filter"),
                "nothing read to be thrown away:\n{plan}"
            );
        }
        Kind::Sqlite => assert!(
            plan.starts_with("SEARCH payment_refs USING")
                && plan.contains("(provider=? AND reference=?)"),
            "one probe of the key per reference:\n{plan}"
        ),
    }
    // And it finds what is there.
    let mut q = sqlx::query(&sql).bind("stripe");
    for n in 0..32 {
        q = q.bind(format!("pi_{}", n * 600 + 7));
    }
    assert_eq!(q.fetch_all(app.db.writer()).await.unwrap().len(), 32);
    app.shutdown().await;
}

/// PostgreSQL's one-commit claim (`inbox::claim_locked`) holds rows with advisory locks
/// for its transaction only and writes nothing: a second locked claim skips them, a
/// rollback hands them back at once with their counters untouched, and a lease taken
/// meanwhile by a step-by-step claim (which does not ask for the locks) fences the
/// locked batch off instead of applying an event twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locked_claims_hold_their_rows_for_their_transaction_only() {
    use oncehook::store::batch::{apply_batch, BatchError};
    use oncehook::store::inbox::{claim_locked, Hold};
    use sqlx::Connection;
    if common::postgres_base_url().is_none() {
        return;
    }
    let app = TestApp::spawn_with(Kind::Postgres, |s| configure(s, Mode::SetBased)).await;
    for o in 0..3 {
        post_payment(&app, &format!("l{o}"), 500, T10_00).await;
    }
    let untouched = || async {
        sqlx::query_as::<_, (String, i64)>("SELECT status, attempts FROM inbox_events ORDER BY id")
            .fetch_all(app.db.reader())
            .await
            .unwrap()
    };
    let pending = vec![("pending".to_string(), 0); 3];
    let now = oncehook::store::now_ms();
    let mut first = app.db.writer().acquire().await.unwrap();
    let mut first_tx = first.begin().await.unwrap();
    let held = claim_locked(&mut first_tx, now, 2, 10).await.unwrap();
    assert_eq!(
        held.iter().map(|c| c.event_id.as_str()).collect::<Vec<_>>(),
        ["evt_l0", "evt_l1"]
    );
    assert!(held
        .iter()
        .all(|c| c.hold == Hold::TxLock && c.attempt == 1));
    assert_eq!(untouched().await, pending, "a locked claim writes nothing");

    let mut second = app.db.writer().acquire().await.unwrap();
    let mut second_tx = second.begin().await.unwrap();
    let rest = claim_locked(&mut second_tx, now, 10, 10).await.unwrap();
    assert_eq!(
        rest.iter().map(|c| c.event_id.as_str()).collect::<Vec<_>>(),
        ["evt_l2"]
    );
    second_tx.rollback().await.unwrap();
    let mut second_tx = second.begin().await.unwrap();
    let again = claim_locked(&mut second_tx, now, 10, 10).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|c| c.event_id.as_str())
            .collect::<Vec<_>>(),
        ["evt_l2"],
        "a rollback releases the rows at once"
    );
    second_tx.rollback().await.unwrap();
    drop(second);

    // A step-by-step claim leases every due row, the locked ones included; the locked
    // batch is then fenced off as a whole and writes nothing.
    let leased = oncehook::store::inbox::claim(&app.db, now, now + 30_000, 10)
        .await
        .unwrap();
    assert_eq!(leased.len(), 3);
    let mapped = map_claims(&app, &held);
    let inputs = mapped_inputs(&held, &mapped);
    match apply_batch(
        &mut first_tx,
        app.db.backend,
        &inputs,
        &app.settings.outbox,
        now,
    )
    .await
    {
        Err(BatchError::Fenced(ids)) => {
            assert_eq!(ids, held.iter().map(|c| c.id).collect::<Vec<_>>())
        }
        other => panic!("expected both claims fenced off, got {other:?}"),
    }
    first_tx.rollback().await.unwrap();
    drop(first);
    assert_eq!(app.count("SELECT COUNT(*) FROM orders").await, 0);
    app.shutdown().await;
}

/// The one-commit path files each event with a single write of its inbox row on both
/// databases: applied with attempt 1, and (PostgreSQL) no lease ever written, so nothing
/// is left for a successor to take back after a crash.
async fn a_one_commit_batch_files_each_event_with_one_write(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| configure(s, Mode::SetBased)).await;
    for o in 0..4 {
        post_payment(&app, &format!("w{o}"), 700, T10_00).await;
    }
    let processor = app.processor();
    assert_eq!(processor.claim_and_apply(32).await.unwrap(), 4);
    let rows = sqlx::query_as::<_, (String, i64, Option<String>)>(
        "SELECT status, attempts, claimed_by FROM inbox_events ORDER BY id",
    )
    .fetch_all(app.db.reader())
    .await
    .unwrap();
    let expected_claimer = match kind {
        Kind::Sqlite => Some(app.db.instance_id().to_string()),
        Kind::Postgres => None,
    };
    assert_eq!(rows, vec![("applied".to_string(), 1, expected_claimer); 4]);
    assert_eq!(
        app.count("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM order_ledger")
            .await,
        4 * 700
    );
    app.shutdown().await;
}

/// Entries of `index` the current transaction has read so far (PostgreSQL); for a table,
/// the rows its sequential scans read.
async fn index_entries_read_here(tx: &mut sqlx::AnyConnection, index: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT CAST(pg_stat_get_xact_tuples_returned('{index}'::regclass) AS BIGINT)"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap()
}

/// A claim walks the head of the `_due` index, whatever the statistics say: with 20,000
/// due rows and no statistics (autovacuum off, nothing analysed yet) PostgreSQL chose to
/// fetch every due row through a bitmap and sort them, 15 ms per claim against 0.03 ms,
/// and SQLite read every pending row through the status index. Both claims (the inbox's
/// advisory-lock claim, the leasing claim the outbox and the step-by-step path share)
/// must still take the oldest rows, in order.
async fn a_claim_reads_the_head_of_a_backlog_not_all_of_it(kind: Kind) {
    const BACKLOG: i64 = 20_000;
    let app = TestApp::spawn_with(kind, |s| configure(s, Mode::SetBased)).await;
    // Rows straight into both queues: the claim's search is under test, not the receipt.
    let series = "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)";
    for sql in
        [
            format!(
            "INSERT INTO inbox_events (provider, event_id, event_type, raw_body, correlation_id, \
             received_at, status, attempts, next_attempt_at, retries_base) \
             {series} SELECT 'stripe', 'evt_b' || i, 'payment_intent.succeeded', \
             CAST('{{}}' AS {blob}), 'c' || i, 1000 + i, 'pending', 0, 1000 + i, 0 FROM n",
            blob = if kind == Kind::Postgres { "BYTEA" } else { "BLOB" }
        ),
            format!(
                "INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload, \
             correlation_id, status, next_attempt_at, created_at) \
             {series} SELECT 'k' || i, 'e' || i, 'o' || i, 'order.paid', 'log', '{{}}', 'c' || i, \
             'pending', 1000 + i, 1000 + i FROM n"
            ),
        ]
    {
        sqlx::query(&sql).execute(app.db.writer()).await.unwrap();
    }
    let now = 1_000 + BACKLOG + 1;
    let oldest: Vec<i64> = (1..=32).collect();
    match kind {
        Kind::Postgres => {
            let mut conn = app.db.writer().acquire().await.unwrap();
            // The inbox's locked claim, then the leasing claim of the outbox, each in a
            // transaction whose own index counters are read before it is rolled back.
            let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
            let claims = oncehook::store::inbox::claim_locked(&mut tx, now, 32, 96)
                .await
                .unwrap();
            let inbox_read = index_entries_read_here(&mut tx, "inbox_events_due").await;
            let inbox_scanned = index_entries_read_here(&mut tx, "inbox_events").await;
            // The batch's filing (planned once per connection, migration 0017) finds each
            // row through the primary key as well.
            let keys_before = index_entries_read_here(&mut tx, "inbox_events_pkey").await;
            let inputs: Vec<oncehook::store::batch::Input> = claims
                .iter()
                .map(|claim| oncehook::store::batch::Input::Ignored {
                    claim,
                    reason: "not mapped".into(),
                })
                .collect();
            let outputs = oncehook::store::batch::apply_batch(
                &mut tx,
                app.db.backend,
                &inputs,
                &app.settings.outbox,
                now,
            )
            .await
            .unwrap();
            let filing_keys =
                index_entries_read_here(&mut tx, "inbox_events_pkey").await - keys_before;
            let filing_scanned = index_entries_read_here(&mut tx, "inbox_events").await;
            let ignored: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM inbox_events WHERE status = 'ignored' AND id <= 32",
            )
            .fetch_one(&mut *tx)
            .await
            .unwrap();
            tx.rollback().await.unwrap();
            assert_eq!(claims.iter().map(|c| c.id).collect::<Vec<_>>(), oldest);
            assert_eq!((outputs.len(), ignored), (32, 32), "the batch was filed");
            assert_eq!(
                (filing_keys, filing_scanned),
                (32, 0),
                "the filing's primary-key entries and sequentially scanned rows"
            );
            let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
            let rows = oncehook::store::queue::claim(
                &mut *tx,
                &app.db,
                "outbox",
                "delivering",
                "id",
                (now, now + 60_000, 32),
            )
            .await
            .unwrap();
            let outbox_read = index_entries_read_here(&mut tx, "outbox_due").await;
            // No sequential scan either: the leased rows are updated through their keys.
            let outbox_scanned = index_entries_read_here(&mut tx, "outbox").await;
            tx.rollback().await.unwrap();
            let mut ids: Vec<i64> = rows
                .iter()
                .map(|r| sqlx::Row::get::<i64, _>(r, "id"))
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, oldest);
            // The walk reads the claim's candidates; the bitmap read all 20,000.
            assert!(
                (32..=96).contains(&inbox_read),
                "the inbox claim read {inbox_read} entries of its due index"
            );
            assert!(
                (32..=96).contains(&outbox_read),
                "the outbox claim read {outbox_read} entries of its due index"
            );
            assert_eq!(
                (inbox_scanned, outbox_scanned),
                (0, 0),
                "rows read by sequential scans of the inbox and the outbox"
            );
        }
        Kind::Sqlite => {
            let claims = oncehook::store::inbox::claim(&app.db, now, now + 60_000, 32)
                .await
                .unwrap();
            assert_eq!(claims.iter().map(|c| c.id).collect::<Vec<_>>(), oldest);
            let outbox = oncehook::store::outbox::claim(&app.db, now, now + 60_000, 32)
                .await
                .unwrap();
            assert_eq!(outbox.iter().map(|c| c.id).collect::<Vec<_>>(), oldest);
        }
    }
    app.shutdown().await;
}

/// `n` payment references `{prefix}{i}` of provider acme, each naming order `order-{prefix}{i}`.
/// Posts a `payment_intent.succeeded` of order `order-{tag}` (event `evt_{tag}`, payment
/// `pi_{tag}`) through the Stripe route, which must take it.
async fn post_payment(app: &TestApp, tag: &str, amount: i64, at: i64) {
    let event = payment_intent_succeeded(
        &format!("evt_{tag}"),
        &format!("pi_{tag}"),
        &format!("order-{tag}"),
        amount,
        at,
    );
    assert_eq!(app.post_stripe(&event).await.status(), 200);
}

fn reference_rows(prefix: &str, n: usize) -> Vec<Vec<oncehook::store::values::Val>> {
    (0..n)
        .map(|i| {
            vec![
                "acme".into(),
                format!("{prefix}{i}").into(),
                format!("order-{prefix}{i}").into(),
            ]
        })
        .collect()
}

/// Exactly the `n` references `reference_rows(prefix, n)` wrote are stored.
async fn assert_references(app: &TestApp, prefix: &str, n: usize) {
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM payment_refs WHERE reference LIKE '{prefix}%' \
             AND order_id = 'order-' || reference"
        ))
        .await,
        n as i64,
        "{prefix}"
    );
}

/// `Writes` over parts that fit one statement together, one that must be split from the
/// next, and one larger than the parameter limit alone: every row is written, once.
async fn independent_writes_share_statements_within_the_parameter_limit(kind: Kind) {
    use oncehook::store::values::{Writes, MAX_PARAMS};
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    const HEAD: &str = "INSERT INTO payment_refs (provider, reference, order_id) VALUES ";
    let sizes = [
        ("a", 5),
        ("b", 7),
        ("c", MAX_PARAMS / 3 - 10),
        ("d", MAX_PARAMS / 3 + 1),
        ("e", 3),
    ];
    let mut writes = Writes::default();
    for (prefix, n) in sizes {
        writes.push(HEAD, "", 3, reference_rows(prefix, n));
    }
    writes.push(HEAD, "", 3, vec![]);
    let mut tx = app.db.writer().begin().await.unwrap();
    writes.run(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    for (prefix, n) in sizes {
        assert_references(&app, prefix, n).await;
    }
    app.shutdown().await;
}

/// `Writes::run_then`: every write pushed is made, and the query after them returns its own
/// rows with its parameters numbered after the writes' (on PostgreSQL the query is the
/// writes' main query), also when the writes fill a statement and the query must go alone.
async fn writes_then_a_query_run_every_write_and_return_the_query_rows(kind: Kind) {
    use oncehook::store::values::{Then, Writes, MAX_PARAMS};
    use oncehook::store::{placeholder, Backend};
    use sqlx::Row;
    let app = TestApp::spawn_with(kind, |s| s.processor.enabled = false).await;
    const HEAD: &str = "INSERT INTO payment_refs (provider, reference, order_id) VALUES ";
    let then = || Then {
        sql: |backend: Backend, first: usize| {
            format!(
                "SELECT CAST({} AS BIGINT) + 1, CAST({} AS TEXT)",
                placeholder(backend, first),
                placeholder(backend, first + 1)
            )
        },
        binds: vec![41_i64.into(), "filed".into()],
    };
    // A few rows (the query joins their statement), then a full statement's worth (the
    // query goes alone), then none at all.
    for (prefix, n) in [("small", 4), ("full", MAX_PARAMS / 3), ("none", 0)] {
        let mut writes = Writes::default();
        writes.push(HEAD, "", 3, reference_rows(prefix, n));
        let mut tx = app.db.writer().begin().await.unwrap();
        let returned = writes.run_then(&mut tx, Some(then())).await.unwrap();
        tx.commit().await.unwrap();
        let returned: Vec<(i64, String)> = returned
            .iter()
            .map(|r| (r.try_get(0).unwrap(), r.try_get(1).unwrap()))
            .collect();
        assert_eq!(returned, vec![(42, "filed".to_string())], "{prefix}");
        assert_references(&app, prefix, n).await;
    }
    app.shutdown().await;
}

/// A backlog on PostgreSQL is drained by at most `processor.backlog_workers` workers in
/// claims of `processor.backlog_claim_batch` (the receiver keeps its share of the CPU), and
/// every event is still applied exactly once; SQLite keeps the usual claims. Four workers
/// run as the server runs them, woken by nothing but their first round and the poll.
async fn a_backlog_is_drained_in_larger_claims_by_fewer_workers_exactly_once(kind: Kind) {
    let app = TestApp::spawn_with(kind, |s| {
        configure(s, Mode::SetBased);
        s.processor.workers = 4;
        s.processor.claim_batch = 10;
        s.processor.backlog_workers = 2;
        s.processor.backlog_claim_batch = 50;
        s.processor.poll_interval_ms = 20;
    })
    .await;
    const EVENTS: usize = 300;
    for o in 0..EVENTS {
        post_payment(&app, &format!("b{o}"), 100 + o as i64, T10_00).await;
    }
    let processor = std::sync::Arc::new(app.processor());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let workers = processor.clone().spawn_workers(shutdown.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while app
        .count("SELECT COUNT(*) FROM inbox_events WHERE status IN ('pending', 'processing')")
        .await
        > 0
    {
        assert!(std::time::Instant::now() < deadline, "backlog not drained");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    for w in workers {
        w.await.unwrap();
    }
    let largest = processor.largest_claim();
    match kind {
        Kind::Postgres => assert_eq!(largest, 50, "the backlog went in backlog claims"),
        Kind::Sqlite => assert_eq!(largest, 10, "SQLite keeps the usual claim"),
    }
    // Exactly once, money included: one effect, one ledger entry of the event's amount
    // and two messages per event.
    let expected_paid: i64 = (0..EVENTS as i64).map(|o| 100 + o).sum();
    assert_eq!(
        app.count("SELECT COUNT(*) FROM inbox_events WHERE status = 'applied'")
            .await,
        EVENTS as i64
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM processed_effects").await,
        EVENTS as i64
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM order_ledger").await,
        EVENTS as i64
    );
    assert_eq!(
        app.count("SELECT CAST(COALESCE(SUM(amount_paid), 0) AS BIGINT) FROM orders WHERE status = 'paid'")
            .await,
        expected_paid
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox").await,
        2 * EVENTS as i64
    );
    assert_eq!(processor.batch_fallbacks(), 0);
    app.shutdown().await;
}

/// The session report reads the connection that ran a caller's statements even when the
/// caller has only just let go of it. sqlx gives a dropped connection back to the pool on a
/// spawned task; on a runtime with one thread that task cannot run before the report
/// starts, so the connection is neither idle nor held by anyone when the report asks.
/// Counting idle connections then opened a fresh session that had prepared nothing (the
/// intermittent CI failure of `write_sessions_are_durable…` on 2026-12-05).
#[tokio::test(flavor = "current_thread")]
async fn postgres_session_report_sees_a_connection_just_released() {
    if common::postgres_base_url().is_none() {
        return;
    }
    let test_db = common::TestDb::new(Kind::Postgres).await;
    let db = test_db.connect().await;
    let mut conn = db.writer().acquire().await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT $1::int4 + 0")
        .bind(1)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(one, 1);
    drop(conn);
    let sessions = db.write_sessions().await.unwrap();
    assert!(
        sessions.plans.contains_key("SELECT $1::int4 + 0"),
        "{} sessions, statements {:?}",
        sessions.count,
        sessions.plans.keys()
    );
    db.close().await;
}
