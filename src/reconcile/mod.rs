//! Reconciliation: the provider's truth against ours. A run, for one provider with an API
//! key, holds that provider's lease (one run at a time across instances) and makes two
//! passes:
//!
//! - the **events pass** (`events`) pages `GET /v1/events` newest first, from the newest
//!   event down to the checkpoint minus a safety overlap, and compares each with the inbox;
//!   where it stands is saved after every page, so a run that dies resumes there;
//! - the **objects pass** (`objects`) fetches, for each order changed in the window or not
//!   in a final state (and each payment the events named that we know no order for), the
//!   payment intent with its latest charge, refunds and disputes, and compares them with
//!   the order's facts (`compare`).
//!
//! A Mercado Pago provider lists no events: its one pass (`mercadopago`) pages the payment
//! search over the window and compares each payment's facts with its order's.
//!
//! Each mismatch is a `reconciliation_diffs` row, once. Fixes never double an effect: a
//! missing event is ingested as the API returned it, a missing fact as an event built from
//! the objects with the webhook's own keys, an unprocessed event is redriven; each goes
//! through the inbox and the processor like any webhook.

pub mod compare;
mod events;
pub mod job;
mod mercadopago;
mod objects;
mod settings;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use settings::{Interval, ReconcileSettings};

use crate::pipeline::alerts::{Alerter, DeadLetterAlert};
use crate::provider::api::{ApiClient, ApiError};
use crate::provider::settings::Providers;
pub use crate::store::reconcile::DiffRow;
use crate::store::reconcile::{self as store, Counts, NewDiff};
use crate::store::{now_ms, Db};

/// The kinds of mismatch, as the JSON, the API and the page name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// At the provider, not in the inbox.
    MissingEvent,
    /// In the inbox, not applied (dead-lettered).
    Unprocessed,
    /// The provider's objects show a payment, refund or dispute (or a state of one) that
    /// our facts do not.
    MissingFact,
    /// The provider's state contradicts ours in a way our facts never go back from.
    StatusMismatch,
    /// Amount or currency differs for the same resource.
    AmountMismatch,
    /// A provider payment whose order we cannot name.
    UnknownOrder,
    /// The checkpoint is older than the provider keeps events.
    WindowExceeded,
}

impl DiffKind {
    pub const ALL: [DiffKind; 7] = [
        DiffKind::MissingEvent,
        DiffKind::Unprocessed,
        DiffKind::MissingFact,
        DiffKind::StatusMismatch,
        DiffKind::AmountMismatch,
        DiffKind::UnknownOrder,
        DiffKind::WindowExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiffKind::MissingEvent => "missing_event",
            DiffKind::Unprocessed => "unprocessed",
            DiffKind::MissingFact => "missing_fact",
            DiffKind::StatusMismatch => "status_mismatch",
            DiffKind::AmountMismatch => "amount_mismatch",
            DiffKind::UnknownOrder => "unknown_order",
            DiffKind::WindowExceeded => "window_exceeded",
        }
    }

    pub fn parse(s: &str) -> Option<DiffKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The kinds `reconcile.auto_fix` fixes: their fix can never double an effect.
    pub fn auto_fixable(self) -> bool {
        matches!(
            self,
            DiffKind::MissingEvent | DiffKind::Unprocessed | DiffKind::MissingFact
        )
    }
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub provider: String,
    /// Compare events created at or after this (Unix seconds) instead of the checkpoint's
    /// window; the checkpoint still moves forward.
    pub since: Option<i64>,
    /// Find and report, change nothing (no diff, no fix, no checkpoint).
    pub dry_run: bool,
    /// serve | cli | dashboard | fix
    pub source: &'static str,
    /// A person's one-click fix of this open diff: the run compares only the diff's event
    /// (or its order's objects) again and fixes what it finds, `auto_fix` or not.
    pub fix: Option<i64>,
    /// Who asked: the `closed_by` of what the run fixes (`reconciler` when nobody).
    pub actor: Option<String>,
}

/// The `source` of a one-click fix's run: not a full comparison, so neither the periodic
/// job's timer nor "the last successful run" counts it.
pub const FIX_SOURCE: &str = "fix";

/// A run as `oncehook reconcile --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub run_id: Option<i64>,
    pub provider: String,
    /// succeeded | failed | interrupted (the server shut down during the run)
    pub status: String,
    pub dry_run: bool,
    pub since: i64,
    pub resumed: bool,
    #[serde(flatten)]
    pub counts: Counts,
    pub error: Option<String>,
    pub started_at: i64,
    pub finished_at: i64,
    /// The diffs this run found (first `LISTED`; all are counted).
    pub diffs: Vec<DiffView>,
}

/// Diffs a report lists; the rest are counted and in the database.
pub const LISTED: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffView {
    pub id: Option<i64>,
    pub kind: String,
    pub order_id: Option<String>,
    pub provider_event_id: Option<String>,
    pub object_id: Option<String>,
    /// open | fixed | resolved
    pub state: String,
    pub detail: String,
    pub resolution: Option<String>,
}

impl From<DiffRow> for DiffView {
    fn from(d: DiffRow) -> Self {
        DiffView {
            id: Some(d.id),
            kind: d.kind,
            order_id: d.order_id,
            provider_event_id: d.provider_event_id,
            object_id: d.object_id,
            state: d.state,
            detail: d.detail,
            resolution: d.resolution,
        }
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum NotStarted {
    #[error("provider {0} is not configured")]
    UnknownProvider(String),
    #[error("provider {0} has no api_key: reconciliation needs the provider's API")]
    NoApiKey(String),
    #[error("another reconciliation of {provider} is running{}", run.map(|r| format!(" (run {r})")).unwrap_or_default())]
    Busy { provider: String, run: Option<i64> },
}

/// Why a run failed: the provider answered badly, or the database did.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("provider API: {0}")]
    Api(#[from] ApiError),
    /// An answer that parsed but cannot be trusted (a page larger than asked, an event
    /// without what its mapping needs).
    #[error("provider API: {0}")]
    BadAnswer(String),
    #[error("lost the reconciliation lease to another instance")]
    LeaseLost,
    #[error("stopped: the server is shutting down")]
    Stopped,
    #[error("{0:#}")]
    Store(#[from] anyhow::Error),
}

/// What reconciliation needs of the configuration (`Settings::reconcile_scope` builds it):
/// its own settings and the providers as configured (their API keys and bases).
#[derive(Clone, Debug)]
pub struct Scope {
    pub reconcile: ReconcileSettings,
    pub providers: Vec<crate::provider::settings::ProviderSettings>,
}

/// Everything a run needs.
#[derive(Clone)]
pub struct Reconciler {
    pub db: Db,
    pub settings: Arc<Scope>,
    pub providers: Arc<Providers>,
    pub alerter: Alerter,
}

/// The state one run shares between its passes.
pub(crate) struct Run<'a> {
    pub r: &'a Reconciler,
    pub provider: &'a crate::provider::settings::Provider,
    pub api: Api,
    pub options: &'a Options,
    pub id: i64,
    pub counts: Counts,
    /// Where diffs of this run are listed for the report.
    pub listed: Vec<DiffView>,
    pub lease_lost: Arc<AtomicBool>,
    pub stop: tokio_util::sync::CancellationToken,
    /// Correlation id of every event this run ingests ("reconciliation:run-N").
    pub correlation_id: String,
    /// API version stamped on events built from objects: the newest event's, if seen.
    pub api_version: Option<String>,
    pub now_s: i64,
    /// Whether a one-click fix's run found its diff again (else the mismatch is gone).
    pub target_found: bool,
}

/// The provider's client, counting calls.
pub(crate) struct Api {
    pub client: ApiClient,
    pub calls: AtomicI64,
}

impl Api {
    pub fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Run<'_> {
    pub fn settings(&self) -> &ReconcileSettings {
        &self.r.settings.reconcile
    }

    pub fn auto_fix(&self) -> bool {
        (self.settings().auto_fix || self.options.fix.is_some()) && !self.options.dry_run
    }

    /// Stops between steps when the lease was lost or the server stops.
    pub fn check(&self) -> Result<(), RunError> {
        if self.lease_lost.load(Ordering::Relaxed) {
            return Err(RunError::LeaseLost);
        }
        if self.stop.is_cancelled() {
            return Err(RunError::Stopped);
        }
        Ok(())
    }

    pub async fn save_counts(&mut self) -> Result<(), RunError> {
        self.counts.api_calls = self.api.calls.load(Ordering::Relaxed);
        if !self.options.dry_run {
            store::update_run(&self.r.db, self.id, &self.counts, None, now_ms()).await?;
        }
        Ok(())
    }

    /// Records a finding once (dry runs only list it). Returns the diff's id and whether
    /// it is open (still to fix), or `None` in a dry run.
    pub async fn found(&mut self, d: NewDiff) -> Result<Option<(i64, bool)>, RunError> {
        if self.options.dry_run {
            self.counts.diffs_found += 1;
            self.list(DiffView {
                id: None,
                kind: d.kind,
                order_id: d.order_id,
                provider_event_id: d.provider_event_id,
                object_id: d.object_id,
                state: "open".into(),
                detail: d.detail,
                resolution: None,
            });
            return Ok(None);
        }
        let (id, state, created) = store::upsert_diff(&self.r.db, &d, self.id, now_ms()).await?;
        if self.options.fix == Some(id) {
            self.target_found = true;
        }
        if created {
            self.counts.diffs_found += 1;
            crate::ops::metrics::reconciliation_diff(&d.kind);
            self.list(DiffView {
                id: Some(id),
                kind: d.kind,
                order_id: d.order_id,
                provider_event_id: d.provider_event_id,
                object_id: d.object_id,
                state: state.clone(),
                detail: d.detail,
                resolution: None,
            });
        }
        Ok(Some((id, state == "open")))
    }

    /// Notes a fix on the diff (and in the report's listing).
    pub async fn fixed(
        &mut self,
        id: i64,
        resolution: &str,
        fix_event_id: Option<&str>,
    ) -> Result<(), RunError> {
        let by = self.options.actor.as_deref().unwrap_or("reconciler");
        if store::mark_fixed(&self.r.db, id, resolution, fix_event_id, by, now_ms()).await? {
            self.counts.fixed += 1;
            if let Some(v) = self.listed.iter_mut().find(|v| v.id == Some(id)) {
                v.state = "fixed".into();
                v.resolution = Some(resolution.into());
            }
        }
        Ok(())
    }

    fn list(&mut self, v: DiffView) {
        if self.listed.len() < LISTED {
            self.listed.push(v);
        }
    }
}

impl Reconciler {
    /// Providers a periodic run covers: those with an API key.
    pub fn providers_with_api(&self) -> Vec<String> {
        self.settings
            .providers
            .iter()
            .filter(|p| p.api.key.as_deref().is_some_and(|k| !k.is_empty()))
            .map(|p| p.name.clone())
            .collect()
    }

    /// One run. `progress(events, objects)` after each page and order. A provider that
    /// answers badly ends the run `failed` (recorded, alerted): that is a report, not an
    /// error; errors are for runs that could not start.
    pub async fn run(
        &self,
        options: &Options,
        stop: tokio_util::sync::CancellationToken,
        progress: &(dyn Fn(&Counts) + Send + Sync),
    ) -> anyhow::Result<Report> {
        self.run_notifying(options, stop, progress, None).await
    }

    /// Starts a run in the background and answers with its id once it holds the lease and
    /// its row exists (or with why it could not start). Its end is logged; the runs list
    /// shows its progress meanwhile.
    pub async fn start(
        &self,
        options: Options,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<i64> {
        let (started, id) = tokio::sync::oneshot::channel();
        let r = self.clone();
        let task = tokio::spawn(async move {
            let outcome = r
                .run_notifying(&options, stop, &|_| {}, Some(started))
                .await;
            match &outcome {
                Ok(report) => tracing::info!(
                    provider = %report.provider,
                    run_id = report.run_id,
                    status = %report.status,
                    diffs = report.counts.diffs_found,
                    fixed = report.counts.fixed,
                    "reconciliation run finished"
                ),
                Err(e) => tracing::debug!(error = %e, "reconciliation not started"),
            }
            outcome
        });
        match id.await {
            Ok(id) => Ok(id),
            // The run ended before it began: its error says why.
            Err(_) => match task.await? {
                Err(e) => Err(e),
                Ok(report) => Ok(report.run_id.unwrap_or_default()),
            },
        }
    }

    /// A person's one-click fix of an open diff whose kind has an automatic fix: a run
    /// (source `fix`) that compares the diff's event or order again and fixes what it finds.
    /// Answers with the diff as it is afterwards; refused (`store::Refused`) before any
    /// call when the diff is not open or has no automatic fix.
    pub async fn fix(
        &self,
        diff_id: i64,
        actor: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<(Report, DiffRow)> {
        use crate::store::Refused;
        let diff = store::diff(&self.db, diff_id)
            .await?
            .ok_or_else(|| Refused(format!("no reconciliation diff {diff_id}")))?;
        if diff.state != "open" {
            return Err(Refused(format!("diff {diff_id} is {} already", diff.state)).into());
        }
        if !DiffKind::parse(&diff.kind).is_some_and(DiffKind::auto_fixable) {
            return Err(Refused(format!(
                "a {} diff has no automatic fix: resolve it with a reason",
                diff.kind
            ))
            .into());
        }
        let options = Options {
            provider: diff.provider.clone(),
            source: FIX_SOURCE,
            fix: Some(diff_id),
            actor: Some(actor.to_string()),
            ..Default::default()
        };
        let report = self.run(&options, stop, &|_| {}).await?;
        let after = store::diff(&self.db, diff_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("diff {diff_id} vanished"))?;
        Ok((report, after))
    }

    async fn run_notifying(
        &self,
        options: &Options,
        stop: tokio_util::sync::CancellationToken,
        progress: &(dyn Fn(&Counts) + Send + Sync),
        started: Option<tokio::sync::oneshot::Sender<i64>>,
    ) -> anyhow::Result<Report> {
        let provider = self
            .providers
            .get(&options.provider)
            .ok_or_else(|| NotStarted::UnknownProvider(options.provider.clone()))?;
        let provider_settings = self
            .settings
            .providers
            .iter()
            .find(|p| p.name == options.provider)
            .ok_or_else(|| NotStarted::UnknownProvider(options.provider.clone()))?;
        if provider_settings
            .api
            .key
            .as_deref()
            .is_none_or(str::is_empty)
        {
            return Err(NotStarted::NoApiKey(options.provider.clone()).into());
        }
        // Mercado Pago's client (its base, its refunds) is the receiver's.
        let client = match &provider.fetch {
            Some(mp) => mp.clone().for_mercadopago(),
            None => ApiClient::new(&provider_settings.api)?,
        };
        let settings = &self.settings.reconcile;
        let started_at = now_ms();
        let holder = format!(
            "{}:{}",
            self.db.instance_id(),
            uuid::Uuid::new_v4().simple()
        );
        let lease_ms = settings.lease_secs * 1000;
        // A dry run changes nothing, so it needs no lease and leaves no run behind.
        if !options.dry_run
            && !store::acquire_lease(
                &self.db,
                &options.provider,
                &holder,
                started_at + lease_ms,
                started_at,
            )
            .await?
        {
            let run = store::lease_holder_run(&self.db, &options.provider, started_at).await?;
            return Err(NotStarted::Busy {
                provider: options.provider.clone(),
                run,
            }
            .into());
        }
        let id = if options.dry_run {
            0
        } else {
            let since = options.since.unwrap_or(0);
            let id = store::start_run(
                &self.db,
                &options.provider,
                options.source,
                false,
                since,
                started_at,
            )
            .await?;
            store::renew_lease(
                &self.db,
                &options.provider,
                &holder,
                Some(id),
                started_at + lease_ms,
            )
            .await?;
            id
        };
        if let Some(started) = started {
            let _ = started.send(id);
        }
        let lease_lost = Arc::new(AtomicBool::new(false));
        let heartbeat = (!options.dry_run).then(|| {
            spawn_heartbeat(
                self.db.clone(),
                options.provider.clone(),
                holder.clone(),
                lease_ms,
                lease_lost.clone(),
            )
        });
        let mut run = Run {
            r: self,
            provider,
            api: Api {
                client,
                calls: AtomicI64::new(0),
            },
            options,
            id,
            counts: Counts::default(),
            listed: Vec::new(),
            lease_lost,
            stop,
            correlation_id: format!("reconciliation:run-{id}"),
            api_version: None,
            now_s: started_at / 1000,
            target_found: false,
        };
        let outcome = run_passes(&mut run, progress).await;
        if let Some(h) = heartbeat {
            h.abort();
        }
        run.counts.api_calls = run.api.calls.load(Ordering::Relaxed);
        let finished_at = now_ms();
        let (status, error, resumed, since) = match outcome {
            Ok((resumed, since)) => ("succeeded", None, resumed, since),
            Err(e) => {
                let reason = format!(
                    "{e}; compared {} events and {} objects by then",
                    run.counts.events_compared, run.counts.objects_compared
                );
                let status = if matches!(e, RunError::Stopped) {
                    // A shutdown is no failure: nothing to alert anyone about, and the next
                    // run (soon: `reconcile.retry_secs`) resumes from the checkpoint.
                    tracing::info!(provider = %options.provider, run_id = id, reason = %reason, "reconciliation run interrupted");
                    "interrupted"
                } else {
                    tracing::warn!(provider = %options.provider, run_id = id, error = %reason, "reconciliation run failed");
                    self.alerter.dead_lettered(DeadLetterAlert {
                        dead_letter_id: id,
                        stage: "reconciliation".into(),
                        class: "run failed".into(),
                        error: reason.clone(),
                        event_id: None,
                        order_id: None,
                    });
                    "failed"
                };
                (status, Some(reason), false, options.since.unwrap_or(0))
            }
        };
        crate::ops::metrics::reconciliation_run(status);
        if !options.dry_run {
            if let Err(e) = store::finish_run(
                &self.db,
                id,
                status,
                &run.counts,
                error.as_deref(),
                finished_at,
            )
            .await
            {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "could not record the end of a reconciliation run"
                );
            }
            let _ = store::drop_pending_objects(&self.db, id).await;
            let _ = store::release_lease(&self.db, &options.provider, &holder).await;
        }
        Ok(Report {
            run_id: (!options.dry_run).then_some(id),
            provider: options.provider.clone(),
            status: status.into(),
            dry_run: options.dry_run,
            since,
            resumed,
            counts: run.counts,
            error,
            started_at,
            finished_at,
            diffs: run.listed,
        })
    }
}

/// Both passes; (whether the events pass resumed a pass that died, its lower bound).
async fn run_passes(
    run: &mut Run<'_>,
    progress: &(dyn Fn(&Counts) + Send + Sync),
) -> Result<(bool, i64), RunError> {
    if let Some(diff_id) = run.options.fix {
        fix_one(run, diff_id).await?;
        return Ok((false, run.options.since.unwrap_or(0)));
    }
    if run.api.client.is_mercadopago() {
        let since = mercadopago::pass(run, progress).await?;
        objects::settle(run).await?;
        if objects::redrive_own(run).await? > 0 {
            objects::settle(run).await?;
        }
        run.save_counts().await?;
        return Ok((false, since));
    }
    let (resumed, since) = events::pass(run, progress).await?;
    if !run.options.dry_run {
        store::update_run(&run.r.db, run.id, &run.counts, Some(since), now_ms()).await?;
    }
    objects::settle(run).await?;
    if objects::redrive_own(run).await? > 0 {
        objects::settle(run).await?;
    }
    objects::pass(run, since, progress).await?;
    run.save_counts().await?;
    Ok((resumed, since))
}

/// A one-click fix: the diff's event fetched again and compared with the inbox (a missing
/// or dead-lettered event), or its order's objects (a missing fact), with fixes on. A diff
/// the comparison no longer finds is closed as such: the webhook arrived meanwhile.
async fn fix_one(run: &mut Run<'_>, diff_id: i64) -> Result<(), RunError> {
    let diff = store::diff(&run.r.db, diff_id)
        .await?
        .ok_or_else(|| RunError::BadAnswer(format!("diff {diff_id} vanished")))?;
    let kind = DiffKind::parse(&diff.kind);
    match (kind, &diff.provider_event_id, &diff.order_id) {
        (Some(DiffKind::MissingEvent | DiffKind::Unprocessed), Some(event_id), _) => {
            run.api.count();
            let event = run.api.client.event(event_id).await?;
            if event.id != *event_id {
                return Err(RunError::BadAnswer(format!(
                    "asked for event {event_id}, got {}",
                    event.id
                )));
            }
            events::compare_page(run, std::slice::from_ref(&event)).await?;
            run.counts.events_compared += 1;
        }
        (Some(DiffKind::MissingFact), _, Some(order_id)) if run.api.client.is_mercadopago() => {
            mercadopago::compare_order_again(run, order_id).await?;
        }
        (Some(DiffKind::MissingFact), _, Some(order_id)) => {
            objects::compare_order(run, order_id, None).await?;
        }
        _ => {
            return Err(RunError::BadAnswer(format!(
                "diff {diff_id} ({}) names nothing to compare again",
                diff.kind
            )))
        }
    }
    if !run.target_found {
        run.fixed(
            diff_id,
            "compared again: the provider and oncehook agree now (the webhook arrived meanwhile)",
            None,
        )
        .await?;
    }
    objects::settle(run).await?;
    if objects::redrive_own(run).await? > 0 {
        objects::settle(run).await?;
    }
    run.save_counts().await
}

fn spawn_heartbeat(
    db: Db,
    provider: String,
    holder: String,
    lease_ms: i64,
    lost: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = Duration::from_millis((lease_ms / 3).max(200) as u64);
        loop {
            tokio::time::sleep(every).await;
            match store::renew_lease(&db, &provider, &holder, None, now_ms() + lease_ms).await {
                Ok(true) => {}
                Ok(false) => {
                    lost.store(true, Ordering::Relaxed);
                    return;
                }
                // The database may be back before the lease runs out.
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "reconciliation lease not renewed")
                }
            }
        }
    })
}

/// The text `oncehook reconcile` prints.
pub fn render_text(r: &Report) -> String {
    let mut out = format!(
        "reconciliation {}{} of {}: {}{}\n  {} events and {} objects compared, {} API calls, {} diffs found, {} fixed\n",
        r.run_id.map(|i| format!("run {i}")).unwrap_or_else(|| "dry run".into()),
        if r.resumed { " (resumed from the checkpoint)" } else { "" },
        r.provider,
        r.status,
        r.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default(),
        r.counts.events_compared,
        r.counts.objects_compared,
        r.counts.api_calls,
        r.counts.diffs_found,
        r.counts.fixed,
    );
    for d in &r.diffs {
        out.push_str(&format!(
            "  {:<16} {:<7} {}{}{}\n",
            d.kind,
            d.state,
            d.order_id
                .as_deref()
                .map(|o| format!("order {o}: "))
                .unwrap_or_default(),
            d.detail,
            d.resolution
                .as_deref()
                .map(|x| format!(" → {x}"))
                .unwrap_or_default(),
        ));
    }
    out
}

/// The `/metrics` gauges, read from the database at scrape time (right for runs other
/// instances made): open diffs by kind, the oldest open diff's age, the last successful
/// run's age (absent until one succeeded).
pub async fn gauges(db: &Db, now: i64) -> anyhow::Result<()> {
    use metrics::gauge;
    let open = store::open_by_kind(db).await?;
    let mut oldest: Option<i64> = None;
    for kind in DiffKind::ALL {
        let (count, first) = open
            .iter()
            .find(|(k, _, _)| k == kind.as_str())
            .map_or((0, None), |(_, c, f)| (*c, Some(*f)));
        gauge!("oncehook_reconciliation_open_diffs", "kind" => kind.as_str()).set(count as f64);
        if let Some(f) = first {
            oldest = Some(oldest.map_or(f, |o: i64| o.min(f)));
        }
    }
    gauge!("oncehook_reconciliation_oldest_open_diff_age_seconds")
        .set(oldest.map_or(0.0, |o| ((now - o).max(0) as f64) / 1000.0));
    if let Some(run) = store::last_succeeded(db, None).await? {
        let at = run.finished_at.unwrap_or(run.updated_at);
        gauge!("oncehook_reconciliation_last_success_age_seconds")
            .set(((now - at).max(0) as f64) / 1000.0);
    }
    Ok(())
}
