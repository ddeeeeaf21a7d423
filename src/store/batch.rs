//! Set-based processing: the events of one claim applied as one batch, in a handful of
//! multi-row statements instead of several statements per event.
//!
//! The story of a batch, in one transaction:
//! 1. resolve the orders the events name (payment references: one SELECT);
//! 2. lock those orders in one sorted order (PostgreSQL: placeholder rows for new orders,
//!    then `SELECT … ORDER BY order_id FOR UPDATE`), so concurrent batches never wait on
//!    each other in a cycle;
//! 3. claim every effect key of the batch in one `INSERT … ON CONFLICT DO NOTHING
//!    RETURNING` (the database decides who wins, first, as in the per-event transaction);
//! 4. read the orders' facts and ledgers (two SELECTs), then apply the events in claim
//!    order in memory, each exactly as `effects::apply` would in its own transaction (the
//!    guarded UPDATE's rule mirrored in `record_change`, the projection and ledger plan
//!    from `domain::money`);
//! 5. write the result: facts, ledger, outbox, stale events, payment references, orders
//!    and inbox statuses (key fix-ups first, only when an event that took a key ended up
//!    not owning it). On PostgreSQL all of it is one statement, the filing of the inbox
//!    its main query (`values::Writes::run_then`); on SQLite one statement each.
//!
//! The inbox UPDATE is fenced on every claim's attempt: a claim another worker owns now
//! makes the whole batch fail with [`BatchError::Fenced`], and the caller runs it again
//! without that event. `tests/batched_processing.rs` and `tests/property_db.rs` compare
//! the result with one transaction per event and with the pure model.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::effects::{
    self, attention_json, classify, effect_key, entry_rows, stale_row, status_rows, EffectOutcome,
    LedgerRow, OrderBefore, OutboxRow, StaleRow, Written,
};
use super::inbox::{Claimed, Fence, Filed};
use super::values::{run_values, Then, Val, Writes, MAX_PARAMS};
use super::{in_list, placeholder, values_list, Backend};
use crate::domain::event::MappedEvent;
use crate::domain::money::{class, guard, plan_entries};
use crate::domain::outbox::OutboxSettings;
use crate::domain::{
    project, Change, EffectKey, Entry, Fact, OrderStatus, Totals, Transition, Update,
};

/// One claimed event as the processor hands it to the batch.
pub enum Input<'a> {
    /// Mapped to a transition: applied.
    Mapped {
        claim: &'a Claimed,
        event: &'a MappedEvent,
    },
    /// Nothing to act on (e.g. an event type the mapping ignores): filed `ignored`.
    Ignored { claim: &'a Claimed, reason: String },
}

impl Input<'_> {
    fn claim(&self) -> &Claimed {
        match self {
            Input::Mapped { claim, .. } | Input::Ignored { claim, .. } => claim,
        }
    }
}

/// What became of one input; failures are the caller's to file (retry or dead letter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Effect {
        order_id: String,
        outcome: EffectOutcome,
    },
    /// No order named and no earlier event told us the order of its references.
    Unresolved(String),
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// These claims (inbox ids) belong to another worker now: run the batch without them.
    #[error("claims {0:?} were fenced off")]
    Fenced(Vec<i64>),
    /// The batch cannot be applied set-based as planned (a payment reference named two
    /// orders within the batch): process it one event at a time instead.
    #[error("not set-based: {0}")]
    Fallback(String),
    #[error(transparent)]
    Db(#[from] anyhow::Error),
}

impl From<sqlx::Error> for BatchError {
    fn from(e: sqlx::Error) -> Self {
        BatchError::Db(e.into())
    }
}

/// The order of each of `n` payment references of one provider (`$1`; the references
/// `$2…`). On PostgreSQL one probe of the primary key per reference, whatever the
/// statistics say: as `provider = $1 AND reference IN (…)`, a planner without statistics
/// (a server with autovacuum off) takes `provider` as selective and reads every reference
/// of the provider, filtering them against the list (5.3 ms at 20,000 references against
/// 0.14 ms once analysed, and growing with every order). The `OFFSET 0` keeps the lateral
/// subquery from being flattened into a join the planner could run as a scan.
pub fn payment_refs_lookup(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Postgres => format!(
            "SELECT v.reference, p.order_id FROM (VALUES {}) AS v (reference) \
             CROSS JOIN LATERAL (SELECT order_id FROM payment_refs \
             WHERE provider = $1 AND reference = v.reference OFFSET 0) AS p",
            (2..2 + n)
                .map(|i| format!("(${i})"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Backend::Sqlite => format!(
            "SELECT reference, order_id FROM payment_refs WHERE provider = ? \
             AND reference IN ({})",
            in_list(backend, 2, n)
        ),
    }
}

/// Runs a SELECT whose only parameters are `values` in one IN list (`{in}` in `sql`),
/// chunked.
async fn select_in(
    tx: &mut Transaction<'_, Any>,
    sql: &str,
    values: &[String],
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let mut out = Vec::new();
    for chunk in values.chunks(MAX_PARAMS) {
        let sql = sql.replace("{in}", &in_list(Backend::of(tx), 1, chunk.len()));
        let mut q = sqlx::query(&sql);
        for v in chunk {
            q = q.bind(v.clone());
        }
        out.extend(q.fetch_all(&mut **tx).await?);
    }
    Ok(out)
}

/// A fact with the columns its row carries beside the model's.
#[derive(Clone, Debug)]
struct FactRow {
    fact: Fact,
    provider: String,
    event_id: String,
    created_at: i64,
    updated_at: i64,
    dirty: bool,
}

/// An order's row as the batch keeps it in memory.
#[derive(Clone, Debug)]
struct OrderRow {
    status: OrderStatus,
    currency: Option<String>,
    last_event_at: Option<i64>,
    last_event_id: Option<String>,
    totals: Totals,
    attention: Option<String>,
}

#[derive(Default)]
struct OrderState {
    /// None: no row yet (or only this batch's placeholder).
    row: Option<OrderRow>,
    facts: Vec<FactRow>,
    ledger: Vec<Entry>,
    dirty: bool,
}

/// (inbox id, claim's fence, status, reason, order, effect key) of one filed event.
type InboxFiling = (
    i64,
    Fence,
    Filed,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Who holds an effect key.
#[derive(Clone, Debug)]
enum Owner {
    /// An earlier transaction: this event id.
    Earlier(String),
    /// An event of this batch (its index).
    Batch(usize),
}

/// Records the change of one resource in memory, exactly as `effects::record_change`
/// does in SQL: a new fact; for a running total the larger amount; else the guarded
/// update (class, then stamp) and, whatever the guard decided, the monotone columns.
fn record_change(facts: &mut Vec<FactRow>, change: &Change, claim: &Claimed, now: i64) -> Update {
    let t = change.transition;
    let kind = t.resource();
    let Some(row) = facts
        .iter_mut()
        .find(|f| f.fact.kind == kind && f.fact.resource_id == change.resource_id)
    else {
        facts.push(FactRow {
            fact: Fact::new(change),
            provider: claim.provider.clone(),
            event_id: claim.event_id.clone(),
            created_at: now,
            updated_at: now,
            dirty: true,
        });
        return Update::Applied;
    };
    let f = &mut row.fact;
    if t == Transition::RefundTotal {
        // SQL: `amount IS NULL OR amount < $new` (a NULL new amount grows nothing).
        let grew = match (f.amount, change.amount) {
            (None, _) => true,
            (Some(old), Some(new)) => old < new,
            (Some(_), None) => false,
        };
        if grew {
            f.amount = change.amount;
            f.stamp.at_ms = change.stamp.at_ms;
            row.event_id = claim.event_id.clone();
            row.updated_at = now;
            row.dirty = true;
            return Update::Applied;
        }
    } else {
        let (from, to) = (class(f.state), class(t));
        let applied = from < to || (from == to && change.stamp.is_newer_than(&f.stamp));
        if applied {
            f.state = t;
            f.stamp = change.stamp;
            row.event_id = claim.event_id.clone();
            row.updated_at = now;
        }
        if t.proves_money() && !f.money_seen {
            f.amount = change.amount.or(f.amount);
        } else {
            f.amount = f.amount.or(change.amount);
        }
        f.money_seen |= t.proves_money();
        if t == Transition::Cancel {
            f.canceled_at = Some(
                f.canceled_at
                    .map_or(change.stamp.at_ms, |c| c.max(change.stamp.at_ms)),
            );
        }
        if f.parent_ref.is_none() {
            f.parent_ref = change.parent_ref.clone();
        }
        row.dirty = true;
        if applied {
            return Update::Applied;
        }
    }
    match guard(f, change) {
        Update::Applied => Update::Stale(format!(
            "{} of {} changes nothing new",
            t.as_str(),
            change.resource_id
        )),
        other => other,
    }
}

/// The references an event remembers, sorted (index locks in one order) and deduplicated.
fn sorted_refs(event: &MappedEvent) -> Vec<&String> {
    let mut refs: Vec<&String> = event.lookup_refs.iter().collect();
    refs.sort();
    refs.dedup();
    refs
}

/// The order an event names, directly or through a reference `refs` knows.
fn resolve(
    event: &MappedEvent,
    provider: &str,
    refs: &HashMap<(String, String), String>,
) -> Option<String> {
    event.order_id.clone().or_else(|| {
        event
            .lookup_refs
            .iter()
            .find_map(|r| refs.get(&(provider.to_string(), r.clone())).cloned())
    })
}

const ORDER_COLUMNS: &str = "order_id, status, currency, last_event_at, last_event_id, \
     amount_paid, amount_refunded, amount_disputed, attention";

fn order_row(row: &AnyRow) -> anyhow::Result<(String, OrderRow)> {
    let id: String = row.try_get(0)?;
    let status: String = row.try_get(1)?;
    Ok((
        id.clone(),
        OrderRow {
            status: OrderStatus::parse(&status)
                .ok_or_else(|| anyhow::anyhow!("order {id} has unknown status {status:?}"))?,
            currency: row.try_get(2)?,
            last_event_at: row.try_get(3)?,
            last_event_id: row.try_get(4)?,
            totals: Totals {
                paid: row.try_get(5)?,
                refunded: row.try_get(6)?,
                disputed: row.try_get(7)?,
            },
            attention: row.try_get(8)?,
        },
    ))
}

/// Runs the batch's `writes`, then files every claimed row of the batch, fenced on its
/// claim (`inbox::Fence`: the row still holds the attempts the claim saw and is not filed
/// yet). Returns the ids filed.
/// PostgreSQL goes through `oncehook_file_inbox` (migration 0017), whose join the server
/// plans once per connection: as one statement over a VALUES list it was planned on every
/// batch, 0.35 ms a time, the largest planning cost of a live stream. The call is the main
/// query of the writes' statement (`Writes::run_then`): one round trip for both.
async fn write_and_file(
    tx: &mut Transaction<'_, Any>,
    backend: Backend,
    writes: Writes,
    filed: &[InboxFiling],
    now: i64,
) -> anyhow::Result<BTreeSet<i64>> {
    let mut done: BTreeSet<i64> = BTreeSet::new();
    if filed.is_empty() {
        writes.run(tx).await?;
        return Ok(done);
    }
    if backend == Backend::Postgres {
        let batch: Vec<serde_json::Value> = filed
            .iter()
            .map(|(id, fence, status, reason, order, key)| {
                serde_json::json!({
                    "id": id, "attempt": fence.attempt, "seen": fence.seen, "also": fence.also,
                    "status": status.as_str(), "reason": reason, "order_id": order,
                    "effect_key": key,
                })
            })
            .collect();
        let filing = Then {
            sql: |backend, first| {
                format!(
                    "SELECT oncehook_file_inbox(CAST({} AS JSONB), {})",
                    placeholder(backend, first),
                    placeholder(backend, first + 1)
                )
            },
            binds: vec![
                serde_json::Value::Array(batch).to_string().into(),
                now.into(),
            ],
        };
        for row in writes.run_then(tx, Some(filing)).await? {
            done.insert(row.try_get(0)?);
        }
        return Ok(done);
    }
    writes.run(tx).await?;
    let rows: Vec<Vec<Val>> = filed
        .iter()
        .map(|(id, fence, status, reason, order, key)| {
            vec![
                (*id).into(),
                fence.attempt.into(),
                fence.seen.into(),
                fence.also.into(),
                status.as_str().into(),
                reason.clone().into(),
                order.clone().into(),
                key.clone().into(),
            ]
        })
        .collect();
    for chunk in rows.chunks(MAX_PARAMS / 9) {
        let n = chunk.len() * 8;
        let sql = format!(
            "WITH v (vid, vattempt, vseen, valso, vstatus, vreason, vorder, vkey) AS (VALUES {}) \
             UPDATE inbox_events SET status = v.vstatus, reason = v.vreason, \
             order_id = v.vorder, effect_key = v.vkey, processed_at = {}, \
             attempts = v.vattempt \
             FROM v WHERE id = v.vid AND attempts = v.vseen \
             AND status IN ('processing', v.valso) \
             RETURNING id",
            values_list(backend, chunk.len(), 8),
            placeholder(backend, n + 1)
        );
        let mut q = sqlx::query(&sql);
        for row in chunk {
            for v in row {
                q = match v {
                    Val::Text(t) => q.bind(t.clone()),
                    Val::Int(i) => q.bind(*i),
                };
            }
        }
        for row in q.bind(now).fetch_all(&mut **tx).await? {
            done.insert(row.try_get(0)?);
        }
    }
    Ok(done)
}

/// Applies `inputs` (in claim order) as one batch inside `tx`. See the module's story.
pub async fn apply_batch(
    tx: &mut Transaction<'_, Any>,
    backend: Backend,
    inputs: &[Input<'_>],
    outbox: &OutboxSettings,
    now: i64,
) -> Result<Vec<Output>, BatchError> {
    // 1. Every payment reference the events name (those they look up and those they
    //    will remember), per provider: the primary key (provider, reference) serves it.
    let mut wanted: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for input in inputs {
        if let Input::Mapped { claim, event } = input {
            wanted
                .entry(claim.provider.as_str())
                .or_default()
                .extend(event.lookup_refs.iter().cloned());
        }
    }
    let mut refs: HashMap<(String, String), String> = HashMap::new();
    for (provider, references) in wanted {
        let references: Vec<String> = references.into_iter().collect();
        if references.is_empty() {
            continue;
        }
        for chunk in references.chunks(MAX_PARAMS) {
            let sql = payment_refs_lookup(backend, chunk.len());
            let mut q = sqlx::query(&sql).bind(provider);
            for r in chunk {
                q = q.bind(r.clone());
            }
            for row in q.fetch_all(&mut **tx).await? {
                refs.insert((provider.to_string(), row.try_get(0)?), row.try_get(1)?);
            }
        }
    }

    // The order each event will name, assuming every earlier event of the batch remembers
    // its references (checked against what really happens in step 4).
    let mut planned: Vec<Option<String>> = Vec::with_capacity(inputs.len());
    {
        let mut optimistic = refs.clone();
        for input in inputs {
            let Input::Mapped { claim, event } = input else {
                planned.push(None);
                continue;
            };
            let order = resolve(event, &claim.provider, &optimistic);
            if let Some(order) = &order {
                for r in &event.lookup_refs {
                    optimistic
                        .entry((claim.provider.clone(), r.clone()))
                        .or_insert_with(|| order.clone());
                }
            }
            planned.push(order);
        }
    }
    let order_ids: Vec<String> = planned
        .iter()
        .flatten()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    // 2. Lock the orders in one sorted order.
    let mut orders: BTreeMap<String, OrderState> = order_ids
        .iter()
        .map(|id| (id.clone(), OrderState::default()))
        .collect();
    let mut placeholders: BTreeSet<String> = BTreeSet::new();
    if !order_ids.is_empty() {
        if backend == Backend::Postgres {
            // New orders get a placeholder row first (in sorted order), so that the row
            // lock below covers them too: a concurrent batch creating the same order waits
            // here instead of overwriting ours.
            let rows: Vec<Vec<Val>> = order_ids
                .iter()
                .map(|id| vec![id.as_str().into(), "pending".into(), now.into(), now.into()])
                .collect();
            // `order_ids` is sorted: the rows are inserted (and waited for) in that order.
            let (created, _) = run_values(
                tx,
                "INSERT INTO orders (order_id, status, created_at, updated_at) VALUES ",
                " ON CONFLICT (order_id) DO NOTHING RETURNING order_id",
                4,
                &rows,
            )
            .await?;
            for row in created {
                placeholders.insert(row.try_get(0)?);
            }
        }
        let lock = if backend == Backend::Postgres {
            " ORDER BY order_id FOR UPDATE"
        } else {
            ""
        };
        // The orders this batch just created are locked by their insert and hold nothing
        // to read: only the others are read (and locked, still in sorted order). A batch
        // of new orders, the common case of a live stream, skips the statement.
        let existing: Vec<String> = order_ids
            .iter()
            .filter(|id| !placeholders.contains(*id))
            .cloned()
            .collect();
        for row in select_in(
            tx,
            &format!("SELECT {ORDER_COLUMNS} FROM orders WHERE order_id IN ({{in}}){lock}"),
            &existing,
        )
        .await?
        {
            let (id, order) = order_row(&row)?;
            if !placeholders.contains(&id) {
                if let Some(state) = orders.get_mut(&id) {
                    state.row = Some(order);
                }
            }
        }
    }

    // 3. Every effect key of the batch, first: the database decides who wins.
    let mut keys: Vec<Option<EffectKey>> = Vec::with_capacity(inputs.len());
    let mut first_of_key: BTreeMap<String, usize> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        let key = match (input, &planned[i]) {
            (Input::Mapped { event, .. }, Some(order)) => Some(effect_key(event, order)),
            _ => None,
        };
        if let Some(key) = &key {
            first_of_key.entry(key.as_str().to_string()).or_insert(i);
        }
        keys.push(key);
    }
    let mut owners: HashMap<String, Owner> = HashMap::new();
    let mut inserted: BTreeMap<String, usize> = BTreeMap::new();
    if !first_of_key.is_empty() {
        let rows: Vec<Vec<Val>> = first_of_key
            .iter()
            .map(|(key, &i)| {
                let Input::Mapped { claim, event } = &inputs[i] else {
                    unreachable!("keys come from mapped events")
                };
                vec![
                    key.as_str().into(),
                    event.transition.as_str().into(),
                    planned[i].clone().into(),
                    event.external_ref.as_str().into(),
                    claim.provider.as_str().into(),
                    claim.event_id.as_str().into(),
                    "applied".into(),
                    now.into(),
                ]
            })
            .collect();
        // Sorted by key (a BTreeMap), so concurrent batches wait on keys in one order.
        let (won, _) = run_values(
            tx,
            "INSERT INTO processed_effects (effect_key, transition, order_id, external_ref, \
             provider, event_id, outcome, applied_at) VALUES ",
            " ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key",
            8,
            &rows,
        )
        .await?;
        for row in won {
            let key: String = row.try_get(0)?;
            let i = first_of_key[&key];
            inserted.insert(key, i);
        }
        let earlier: Vec<String> = first_of_key
            .keys()
            .filter(|k| !inserted.contains_key(*k))
            .cloned()
            .collect();
        if !earlier.is_empty() {
            for row in select_in(
                tx,
                "SELECT effect_key, event_id FROM processed_effects WHERE effect_key IN ({in})",
                &earlier,
            )
            .await?
            {
                owners.insert(row.try_get(0)?, Owner::Earlier(row.try_get(1)?));
            }
        }
    }

    // 4. The orders' facts and ledgers, then every event in claim order.
    let existing: Vec<String> = orders
        .iter()
        .filter(|(_, s)| s.row.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    if !existing.is_empty() {
        for row in select_in(
            tx,
            &format!(
                "SELECT order_id, provider, event_id, created_at, updated_at, {} \
                 FROM order_facts WHERE order_id IN ({{in}}) ORDER BY order_id, kind, resource_id",
                effects::FACT_COLUMNS
            ),
            &existing,
        )
        .await?
        {
            let order: String = row.try_get(0)?;
            let fact = FactRow {
                provider: row.try_get(1)?,
                event_id: row.try_get(2)?,
                created_at: row.try_get(3)?,
                updated_at: row.try_get(4)?,
                fact: effects::fact_row(row)?,
                dirty: false,
            };
            if let Some(state) = orders.get_mut(&order) {
                state.facts.push(fact);
            }
        }
        for row in select_in(
            tx,
            "SELECT entry, external_ref, group_ref, amount, counted, order_id FROM order_ledger \
             WHERE order_id IN ({in}) ORDER BY id",
            &existing,
        )
        .await?
        {
            let order: String = row.try_get(5)?;
            let entry = effects::entry_row(row)?;
            if let Some(state) = orders.get_mut(&order) {
                state.ledger.push(entry);
            }
        }
    }

    let mut out: Vec<Output> = Vec::with_capacity(inputs.len());
    let mut ledger_rows: Vec<LedgerRow> = Vec::new();
    let mut outbox_rows: Vec<OutboxRow> = Vec::new();
    let mut stale_rows: Vec<StaleRow> = Vec::new();
    let mut new_refs: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut filed: Vec<InboxFiling> = Vec::new();
    // Keys whose outcome is not 'applied' (stale or refused).
    let mut key_outcomes: HashMap<String, &'static str> = HashMap::new();

    for (i, input) in inputs.iter().enumerate() {
        let (claim, event) = match input {
            Input::Ignored { claim, reason } => {
                filed.push((
                    claim.id,
                    claim.fence(),
                    Filed::Ignored,
                    Some(reason.clone()),
                    None,
                    None,
                ));
                out.push(Output::Ignored);
                continue;
            }
            Input::Mapped { claim, event } => (*claim, *event),
        };
        let Some(order_id) = resolve(event, &claim.provider, &refs) else {
            if planned[i].is_some() {
                return Err(BatchError::Fallback(format!(
                    "event {} names its order only through a reference an earlier event of \
                     the batch did not record",
                    claim.event_id
                )));
            }
            out.push(Output::Unresolved(format!(
                "order not known yet: no earlier event named an order for {}",
                event.lookup_refs.join(", ")
            )));
            continue;
        };
        if planned[i].as_deref() != Some(order_id.as_str()) {
            return Err(BatchError::Fallback(format!(
                "a reference of event {} named two orders within the batch",
                claim.event_id
            )));
        }
        let key = keys[i].clone().expect("planned events have keys");
        let transition = event.transition;

        if let Some(owner) = owners.get(key.as_str()) {
            let winner = match owner {
                Owner::Earlier(id) => id.clone(),
                Owner::Batch(j) => inputs[*j].claim().event_id.clone(),
            };
            let reason = format!(
                "{} of {} already recorded by event {winner}",
                transition.as_str(),
                event.external_ref
            );
            filed.push((
                claim.id,
                claim.fence(),
                Filed::Duplicate,
                Some(reason.clone()),
                Some(order_id.clone()),
                Some(key.as_str().to_string()),
            ));
            out.push(Output::Effect {
                order_id,
                outcome: EffectOutcome::Duplicate {
                    key: key.to_string(),
                    reason,
                },
            });
            continue;
        }

        if !inserted.contains_key(key.as_str()) {
            // Neither ours nor an earlier transaction's: freed concurrently. Rare; the
            // per-event path handles it.
            return Err(BatchError::Fallback(format!(
                "effect key of event {} is held by nobody",
                claim.event_id
            )));
        }
        let state = orders
            .get_mut(&order_id)
            .expect("planned orders are loaded");
        let change = effects::change_of(event);
        let created = state.row.is_none();
        let (before, update, projection, entries) = if created {
            let first = Fact::new(&change);
            let facts = vec![first];
            let projection = project(&facts);
            let entries = plan_entries(&facts, &[]);
            state.facts.push(FactRow {
                fact: facts.into_iter().next().expect("one fact"),
                provider: claim.provider.clone(),
                event_id: claim.event_id.clone(),
                created_at: now,
                updated_at: now,
                dirty: true,
            });
            state.row = Some(OrderRow {
                status: projection.status,
                currency: event.currency.clone(),
                last_event_at: Some(event.occurred_at_ms),
                last_event_id: Some(claim.event_id.clone()),
                totals: projection.totals,
                attention: attention_json(&projection)?,
            });
            let before = OrderBefore {
                status: OrderStatus::Pending,
                currency: None,
                last_event_at: None,
                totals: Totals::default(),
            };
            (before, Update::Applied, projection, entries)
        } else {
            let row = state.row.as_ref().expect("an existing order");
            let before = OrderBefore {
                status: row.status,
                currency: row.currency.clone(),
                last_event_at: row.last_event_at,
                totals: row.totals,
            };
            if let (Some(order), Some(theirs)) = (&before.currency, &event.currency) {
                if order != theirs {
                    // Nothing of it is written; its key stays free for a later event.
                    out.push(Output::Effect {
                        order_id: order_id.clone(),
                        outcome: EffectOutcome::Mismatch {
                            key: key.to_string(),
                            reason: format!(
                                "currency mismatch: order {order_id} is in {order}, the event in {theirs}"
                            ),
                        },
                    });
                    continue;
                }
            }
            let update = record_change(&mut state.facts, &change, claim, now);
            let facts: Vec<Fact> = state.facts.iter().map(|f| f.fact.clone()).collect();
            let projection = project(&facts);
            let entries = plan_entries(&facts, &state.ledger);
            (before, update, projection, entries)
        };
        owners.insert(key.as_str().to_string(), Owner::Batch(i));
        state.dirty = true;

        let ctx = Written {
            claim,
            event,
            order_id: &order_id,
            outbox,
            now,
            projection: &projection,
            currency: before.currency.as_deref().or(event.currency.as_deref()),
        };
        for entry in &entries {
            let (ledger, messages) = entry_rows(&ctx, entry);
            ledger_rows.push(ledger);
            outbox_rows.extend(messages);
        }
        state.ledger.extend(entries.iter().cloned());
        if !created {
            let row = state.row.as_mut().expect("an existing order");
            let newest = before
                .last_event_at
                .map_or(event.occurred_at_ms, |b| b.max(event.occurred_at_ms));
            row.status = projection.status;
            row.totals = projection.totals;
            row.attention = attention_json(&projection)?;
            row.last_event_at = Some(newest);
            if event.occurred_at_ms >= newest {
                row.last_event_id = Some(claim.event_id.clone());
            }
            if row.currency.is_none() {
                row.currency = event.currency.clone();
            }
        }
        if projection.status != before.status {
            outbox_rows.extend(status_rows(&ctx, &key, before.status));
        }
        let outcome = classify(
            update,
            &before,
            &projection,
            event,
            &entries,
            &key,
            ctx.currency,
        );
        let (status, reason) = match &outcome {
            EffectOutcome::Applied { .. } => (Filed::Applied, None),
            EffectOutcome::Stale { reason, .. } => (Filed::Stale, Some(reason.clone())),
            EffectOutcome::Refused { reason, .. } => (Filed::Refused, Some(reason.clone())),
            EffectOutcome::Duplicate { .. }
            | EffectOutcome::Mismatch { .. }
            | EffectOutcome::Fenced => unreachable!("classify never returns these"),
        };
        if let Some(reason) = &reason {
            let kind = if status == Filed::Refused {
                "refused"
            } else {
                "stale"
            };
            key_outcomes.insert(key.as_str().to_string(), kind);
            stale_rows.push(stale_row(&ctx, kind, reason));
        }
        for reference in sorted_refs(event) {
            let slot = (claim.provider.clone(), reference.clone());
            if !refs.contains_key(&slot) {
                refs.insert(slot.clone(), order_id.clone());
                new_refs.insert(slot, order_id.clone());
            }
        }
        filed.push((
            claim.id,
            claim.fence(),
            status,
            reason,
            Some(order_id.clone()),
            Some(key.as_str().to_string()),
        ));
        out.push(Output::Effect { order_id, outcome });
    }

    // 5. Write it all.
    // Keys taken in step 3 by an event that did not keep them (a currency mismatch)
    // go to the batch's next event with that key, or are freed.
    let mut freed: Vec<String> = Vec::new();
    let mut fixes: Vec<Vec<Val>> = Vec::new();
    for (key, &i) in &inserted {
        match owners.get(key) {
            Some(Owner::Batch(j)) => {
                let outcome = key_outcomes.get(key).copied().unwrap_or("applied");
                if *j != i || outcome != "applied" {
                    let claim = inputs[*j].claim();
                    fixes.push(vec![
                        key.as_str().into(),
                        claim.event_id.as_str().into(),
                        claim.provider.as_str().into(),
                        outcome.into(),
                    ]);
                }
            }
            _ => freed.push(key.clone()),
        }
    }
    if !fixes.is_empty() {
        for chunk in fixes.chunks(MAX_PARAMS / 4) {
            let sql = format!(
                "WITH v (vkey, vevent, vprovider, voutcome) AS (VALUES {}) \
                 UPDATE processed_effects SET event_id = v.vevent, provider = v.vprovider, \
                 outcome = v.voutcome FROM v WHERE effect_key = v.vkey",
                values_list(backend, chunk.len(), 4)
            );
            let mut q = sqlx::query(&sql);
            for row in chunk {
                for v in row {
                    q = match v {
                        Val::Text(t) => q.bind(t.clone()),
                        Val::Int(i) => q.bind(*i),
                    };
                }
            }
            q.execute(&mut **tx).await?;
        }
    }
    if !freed.is_empty() {
        freed.sort();
        for chunk in freed.chunks(MAX_PARAMS) {
            let sql = format!(
                "DELETE FROM processed_effects WHERE effect_key IN ({})",
                in_list(backend, 1, chunk.len())
            );
            let mut q = sqlx::query(&sql);
            for k in chunk {
                q = q.bind(k.clone());
            }
            q.execute(&mut **tx).await?;
        }
    }

    // The batch's writes below depend on nothing another of them writes: one statement for
    // all on PostgreSQL (`Writes`).
    let mut writes = Writes::default();
    // Facts: every fact the batch touched, with its final state.
    let mut fact_rows: Vec<Vec<Val>> = Vec::new();
    for (order_id, state) in &orders {
        for f in state.facts.iter().filter(|f| f.dirty) {
            let fact = &f.fact;
            fact_rows.push(vec![
                order_id.as_str().into(),
                fact.kind.as_str().into(),
                fact.resource_id.as_str().into(),
                fact.parent_ref.clone().into(),
                fact.state.as_str().into(),
                class(fact.state).into(),
                fact.stamp.at_ms.into(),
                fact.stamp.sequence.into(),
                fact.stamp.rank.into(),
                fact.amount.into(),
                i64::from(fact.money_seen).into(),
                fact.canceled_at.into(),
                f.provider.as_str().into(),
                f.event_id.as_str().into(),
                f.created_at.into(),
                f.updated_at.into(),
            ]);
        }
    }
    writes.push(
        "INSERT INTO order_facts (order_id, kind, resource_id, parent_ref, state, class, \
             at_ms, sequence, rank, amount, money_seen, canceled_at, provider, event_id, \
             created_at, updated_at) VALUES ",
        " ON CONFLICT (order_id, kind, resource_id) DO UPDATE SET \
             parent_ref = excluded.parent_ref, state = excluded.state, class = excluded.class, \
             at_ms = excluded.at_ms, sequence = excluded.sequence, rank = excluded.rank, \
             amount = excluded.amount, money_seen = excluded.money_seen, \
             canceled_at = excluded.canceled_at, event_id = excluded.event_id, \
             updated_at = excluded.updated_at",
        16,
        fact_rows,
    );

    // A refund oncehook asked for is confirmed once its money is counted, as the per-event
    // path's `write_entry` does.
    let refunds_counted: Vec<(String, String, String, i64)> = ledger_rows
        .iter()
        .filter(|r| r.entry == crate::domain::money::EntryKind::Refund.as_str())
        .map(|r| {
            (
                r.order_id.clone(),
                r.external_ref.clone(),
                r.event_id.clone(),
                r.recorded_at,
            )
        })
        .collect();
    writes.push(
        effects::LEDGER_INSERT,
        "",
        LedgerRow::COLUMNS,
        ledger_rows
            .into_iter()
            .map(LedgerRow::into_values)
            .collect(),
    );
    writes.push(
        effects::OUTBOX_INSERT,
        "",
        OutboxRow::COLUMNS,
        outbox_rows
            .into_iter()
            .map(OutboxRow::into_values)
            .collect(),
    );
    writes.push(
        effects::STALE_INSERT,
        "",
        StaleRow::COLUMNS,
        stale_rows.into_iter().map(StaleRow::into_values).collect(),
    );
    writes.push(
        "INSERT INTO payment_refs (provider, reference, order_id) VALUES ",
        " ON CONFLICT (provider, reference) DO NOTHING",
        3,
        new_refs
            .into_iter()
            .map(|((provider, reference), order)| {
                vec![provider.into(), reference.into(), order.into()]
            })
            .collect(),
    );

    // The orders' projections, computed above, in one statement.
    let mut order_rows: Vec<Vec<Val>> = Vec::new();
    let mut unused: Vec<String> = Vec::new();
    for (order_id, state) in &orders {
        match (&state.row, state.dirty) {
            (Some(row), true) => order_rows.push(vec![
                order_id.as_str().into(),
                row.status.as_str().into(),
                row.currency.clone().into(),
                row.totals.paid.into(),
                row.totals.refunded.into(),
                row.totals.disputed.into(),
                row.attention.clone().into(),
                row.last_event_at.into(),
                row.last_event_id.clone().into(),
                now.into(),
                now.into(),
            ]),
            _ if placeholders.contains(order_id) => unused.push(order_id.clone()),
            _ => {}
        }
    }
    writes.push(
        "INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, \
             amount_disputed, attention, last_event_at, last_event_id, created_at, updated_at) \
             VALUES ",
        " ON CONFLICT (order_id) DO UPDATE SET status = excluded.status, \
             currency = excluded.currency, amount_paid = excluded.amount_paid, \
             amount_refunded = excluded.amount_refunded, \
             amount_disputed = excluded.amount_disputed, attention = excluded.attention, \
             last_event_at = excluded.last_event_at, last_event_id = excluded.last_event_id, \
             updated_at = excluded.updated_at",
        11,
        order_rows,
    );
    // The inbox last, with the writes: a claim fenced off (another worker owns its row now)
    // undoes the whole batch.
    let done = write_and_file(tx, backend, writes, &filed, now).await?;
    let fenced: Vec<i64> = filed
        .iter()
        .map(|f| f.0)
        .filter(|id| !done.contains(id))
        .collect();
    if !fenced.is_empty() {
        return Err(BatchError::Fenced(fenced));
    }
    for (order_id, refund_id, event_id, now) in &refunds_counted {
        super::commands::confirm_in(tx, order_id, refund_id, event_id, *now).await?;
    }
    if !unused.is_empty() {
        let sql = format!(
            "DELETE FROM orders WHERE order_id IN ({})",
            in_list(backend, 1, unused.len())
        );
        let mut q = sqlx::query(&sql);
        for id in &unused {
            q = q.bind(id.clone());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Stamp;

    fn claim() -> Claimed {
        Claimed {
            id: 1,
            provider: "p".into(),
            event_id: "e".into(),
            raw_body: vec![],
            correlation_id: "c".into(),
            event_type: None,
            received_at: 0,
            attempt: 1,
            retries_base: 0,
            error_history: None,
            hold: crate::store::inbox::Hold::Lease,
        }
    }

    fn change(t: Transition, at: i64, amount: Option<i64>) -> Change {
        Change {
            transition: t,
            resource_id: "r".into(),
            parent_ref: None,
            stamp: Stamp {
                at_ms: at,
                sequence: None,
                rank: t.rank(),
            },
            amount,
        }
    }

    #[test]
    fn a_running_total_grows_only_with_a_larger_amount_as_the_sql_does() {
        let mut facts = Vec::new();
        let c = claim();
        assert_eq!(
            record_change(
                &mut facts,
                &change(Transition::RefundTotal, 1, Some(30)),
                &c,
                0
            ),
            Update::Applied
        );
        // A total without an amount grows nothing (SQL: `amount < NULL` is not true).
        assert!(matches!(
            record_change(&mut facts, &change(Transition::RefundTotal, 2, None), &c, 0),
            Update::Stale(_)
        ));
        assert!(matches!(
            record_change(
                &mut facts,
                &change(Transition::RefundTotal, 3, Some(30)),
                &c,
                0
            ),
            Update::Stale(_)
        ));
        assert_eq!(
            record_change(
                &mut facts,
                &change(Transition::RefundTotal, 0, Some(50)),
                &c,
                0
            ),
            Update::Applied
        );
        assert_eq!(facts[0].fact.amount, Some(50));
        assert_eq!(facts[0].fact.stamp.at_ms, 0);
    }

    #[test]
    fn an_older_update_keeps_the_state_but_records_money_seen() {
        let mut facts = Vec::new();
        let c = claim();
        record_change(
            &mut facts,
            &change(Transition::Authorize, 10, Some(100)),
            &c,
            0,
        );
        assert_eq!(
            record_change(&mut facts, &change(Transition::Pay, 5, Some(100)), &c, 0),
            Update::Applied,
            "holding money is a higher class whatever the stamp"
        );
        assert!(matches!(
            record_change(&mut facts, &change(Transition::Fail, 20, Some(100)), &c, 0),
            Update::Refused(_)
        ));
        assert_eq!(facts[0].fact.state, Transition::Pay);
        assert!(facts[0].fact.money_seen);
    }
}
