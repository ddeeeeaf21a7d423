//! The consistency check (`oncehook verify`, and serve's periodic job in `job`): money is
//! stored as facts and status and totals as their projection (DESIGN invariant 5), so every
//! order's projection is rebuilt from its facts with the processor's own pure functions and
//! compared with what is stored (`check`); and every ledger entry must have its outbox
//! message (invariant 6: they are written in one transaction).
//!
//! Memory stays bounded at any number of orders: orders are read in keyset pages with their
//! facts (store::verify), and a report lists at most `list_limit` findings while it counts
//! them all.

pub mod check;
pub mod job;

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::domain::outbox::OutboxSettings;
use crate::domain::EntryKind;
use crate::store::read::rfc3339;
use crate::store::verify::{self as reads, RunRecord, SAMPLE};
use crate::store::{now_ms, Db};
use check::{check_order, OrderDrift};

/// Orders read per page (each with its facts, ledger and outbox keys).
pub const PAGE_SIZE: i64 = 500;
/// Findings a report lists by default; all are counted.
pub const LIST_LIMIT: usize = 1_000;

const DAY_MS: i64 = 86_400_000;

pub struct Options<'a> {
    /// Which sinks get a message for each topic: an entry whose topic goes nowhere needs none.
    pub outbox: &'a OutboxSettings,
    /// Entries recorded before this are not checked for their message: retention prunes
    /// delivered messages older than `retention.outbox_days`, and an entry's message is
    /// delivered no earlier than the entry was recorded.
    pub messages_since: i64,
    pub page_size: i64,
    pub list_limit: usize,
}

/// What the check needs of the configuration (`Settings::verify_scope` builds it): where
/// messages go, how long delivered ones are kept, how often `serve` checks.
#[derive(Clone, Debug)]
pub struct Scope {
    pub outbox: OutboxSettings,
    /// `retention.outbox_days`.
    pub outbox_days: i64,
    /// `verify.interval_minutes`.
    pub interval_minutes: u64,
}

impl<'a> Options<'a> {
    pub fn new(scope: &'a Scope, now: i64) -> Options<'a> {
        Options {
            outbox: &scope.outbox,
            messages_since: now - scope.outbox_days * DAY_MS,
            page_size: PAGE_SIZE,
            list_limit: LIST_LIMIT,
        }
    }
}

/// A ledger entry without its outbox message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingMessage {
    pub order_id: String,
    pub entry: &'static str,
    pub resource_id: String,
    /// The entry's key, which its messages carry as `effect_key`.
    pub effect_key: String,
    pub topic: &'static str,
}

/// What one run found. Its JSON (`oncehook verify --json`) is documented in docs/src/guides/on-call/verify.md.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub started_at: String,
    pub finished_at: String,
    pub elapsed_ms: u64,
    pub orders_checked: i64,
    /// Orders whose stored status, totals, attention or ledger differ from their facts.
    pub drifting_orders: i64,
    /// Ledger entries without their outbox message.
    pub missing_messages: i64,
    /// At most this many of each are listed below.
    pub list_limit: usize,
    /// More were found than listed.
    pub truncated: bool,
    pub orders: Vec<OrderDrift>,
    pub messages: Vec<MissingMessage>,
    #[serde(skip)]
    started_ms: i64,
    #[serde(skip)]
    finished_ms: i64,
}

impl Report {
    /// Nothing drifts and no message is missing.
    pub fn is_clean(&self) -> bool {
        self.drifting_orders == 0 && self.missing_messages == 0
    }

    /// The row the overview and `/metrics` read.
    pub fn record(&self, source: &str) -> RunRecord {
        RunRecord {
            source: source.into(),
            started_at: self.started_ms,
            finished_at: self.finished_ms,
            orders_checked: self.orders_checked,
            drifting_orders: self.drifting_orders,
            missing_messages: self.missing_messages,
            sample: self
                .orders
                .iter()
                .take(SAMPLE)
                .map(|o| o.order_id.clone())
                .collect(),
        }
    }
}

/// `oncehook verify` found drift: the binary exits with `EXIT_STATUS` (1 is an error, 2 a
/// usage error from clap), so a cron job can tell "inconsistent" from "could not check".
#[derive(Debug, thiserror::Error)]
#[error("drift found: {drifting_orders} orders, {missing_messages} ledger entries without their outbox message")]
pub struct DriftFound {
    pub drifting_orders: i64,
    pub missing_messages: i64,
}

impl DriftFound {
    pub const EXIT_STATUS: u8 = 3;
}

/// Checks every order, page by page.
pub async fn run(db: &Db, opts: &Options<'_>) -> anyhow::Result<Report> {
    let started_ms = now_ms();
    let clock = Instant::now();
    // Entry kinds whose topic is routed to at least one sink.
    let announced: HashMap<EntryKind, bool> = EntryKind::ALL
        .into_iter()
        .map(|k| (k, !opts.outbox.sinks_for(k.topic()).is_empty()))
        .collect();
    let mut report = Report {
        started_at: rfc3339(started_ms),
        finished_at: String::new(),
        elapsed_ms: 0,
        orders_checked: 0,
        drifting_orders: 0,
        missing_messages: 0,
        list_limit: opts.list_limit,
        truncated: false,
        orders: Vec::new(),
        messages: Vec::new(),
        started_ms,
        finished_ms: 0,
    };
    let mut after: Option<String> = None;
    loop {
        let page = reads::page(db, after.as_deref(), opts.page_size.max(1)).await?;
        let Some(last) = page.orders.last() else {
            break;
        };
        after = Some(last.order_id.clone());
        for order in &page.orders {
            report.orders_checked += 1;
            let entries: Vec<_> = order.ledger.iter().map(|l| l.entry.clone()).collect();
            if let Some(drift) = check_order(&order.order_id, &order.stored, &order.facts, &entries)
            {
                report.drifting_orders += 1;
                if report.orders.len() < opts.list_limit {
                    report.orders.push(drift);
                } else {
                    report.truncated = true;
                }
            }
            for l in &order.ledger {
                let expected = announced.get(&l.entry.kind).copied().unwrap_or(true)
                    && l.recorded_at >= opts.messages_since;
                if !expected || page.message_keys.contains(&l.effect_key) {
                    continue;
                }
                report.missing_messages += 1;
                if report.messages.len() < opts.list_limit {
                    report.messages.push(MissingMessage {
                        order_id: order.order_id.clone(),
                        entry: l.entry.kind.as_str(),
                        resource_id: l.entry.resource_id.clone(),
                        effect_key: l.effect_key.clone(),
                        topic: l.entry.kind.topic(),
                    });
                } else {
                    report.truncated = true;
                }
            }
        }
    }
    report.finished_ms = now_ms();
    report.finished_at = rfc3339(report.finished_ms);
    report.elapsed_ms = clock.elapsed().as_millis() as u64;
    Ok(report)
}

/// The report as a person reads it: each drifting order with what is stored and what its
/// facts give, each missing message, then a summary line.
pub fn render_text(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for d in &report.orders {
        let _ = writeln!(out, "order {}: {} differ", d.order_id, d.differs.join(", "));
        let s = &d.stored;
        let f = &d.facts;
        let _ = writeln!(
            out,
            "  stored: {} paid {} refunded {} disputed {}{}",
            s.status,
            s.paid,
            s.refunded,
            s.disputed,
            attention_note(&s.attention)
        );
        let _ = writeln!(
            out,
            "  facts:  {} paid {} refunded {} disputed {}{}",
            f.status,
            f.paid,
            f.refunded,
            f.disputed,
            attention_note(&f.attention)
        );
        let l = &d.ledger;
        let _ = writeln!(
            out,
            "  ledger: paid {} refunded {} disputed {}",
            l.paid, l.refunded, l.disputed
        );
        for m in &l.missing_entries {
            let _ = writeln!(
                out,
                "  ledger lacks {} {} (counted {:+})",
                m.entry, m.resource_id, m.counted
            );
        }
    }
    for m in &report.messages {
        let _ = writeln!(
            out,
            "order {}: ledger entry {} {} has no outbox message ({}, effect key {})",
            m.order_id, m.entry, m.resource_id, m.topic, m.effect_key
        );
    }
    if report.truncated {
        let _ = writeln!(
            out,
            "(only the first {} of each are listed)",
            report.list_limit
        );
    }
    let _ = writeln!(
        out,
        "checked {} orders in {:.1} s: {} drifting, {} ledger entries without their outbox message",
        report.orders_checked,
        report.elapsed_ms as f64 / 1000.0,
        report.drifting_orders,
        report.missing_messages
    );
    out
}

fn attention_note(attention: &[String]) -> String {
    if attention.is_empty() {
        String::new()
    } else {
        format!("; attention: {}", attention.join("; "))
    }
}
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifySettings {
    /// `serve` runs the check of `oncehook verify` this often, in minutes, and keeps the
    /// result for the overview and `/metrics`; 0 turns it off. With several instances on
    /// one database the newest recorded run counts for all of them.
    pub interval_minutes: u64,
}
