//! The dashboard's port implemented over the store.

pub mod commands;
mod inbox_filters;
pub mod jobs;
mod order;
mod overview;
pub mod read_limits;
mod reconcile;
pub mod tokens;

use std::collections::BTreeMap;
use std::sync::Arc;

use app::backend::{
    Admin, AdminBackend, AuditEntryView, AuditPage, AuditQuery, DeadLetterGroup, DeadLetterHistory,
    DeadLetterView, DeliveryView, DlqPage, DlqQuery, EventDetail, InboxEventView, InboxPage,
    InboxQuery, Operator, OrderDetail, Overview, Range, RedriveOutcome, RedrivePreview,
    RedriveRecordView, RedriveView, Refusal, Role, SearchHit, UserView, Viewer,
};
use app::backend::{ApiTokensPage, RevealedToken, SettingsView};
use app::error::AppError;

use crate::pipeline::redrive;
use crate::provider::settings::Providers;
use crate::store::dead_letters::{self, Actor, DeadLetterFilter};
use crate::store::read::{list_events, EventFilter};
use crate::store::users::{self, AuditEntry};
use crate::store::{event_detail, now_ms, redrive_jobs, triage, Db};

/// Dead letters the triage page groups (the newest matching); bulk actions cover all.
const DLQ_PAGE_ITEMS: i64 = 1_000;
/// Predictions a dry-run preview lists (it counts every matching item).
const PREVIEW_ITEMS: usize = 200;

/// What a page shows for a failure on our side: a generic sentence and a reference; the
/// details (driver errors, SQL, paths) go to the log under that reference.
pub fn internal_error(what: &str, error: &anyhow::Error) -> String {
    let reference = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    tracing::error!(correlation_id = %reference, error = %format!("{error:#}"), "{what}");
    format!("{what} (reference {reference}; the details are in the server log)")
}

pub struct StoreBackend {
    pub db: Db,
    /// For dry-run predictions (how each event would map now).
    pub providers: Arc<Providers>,
    /// The Settings page (built once at start: the configuration does not change while
    /// the process runs).
    pub settings: Arc<SettingsView>,
    revealed: tokens::RevealedTokens,
    /// Expensive reads running per principal.
    reads: read_limits::ReadLimits,
    /// Runs and one-click fixes from the page; `None` where the process reconciles nothing
    /// (previews, tests of the reads).
    reconciler: Option<(
        crate::reconcile::Reconciler,
        tokio_util::sync::CancellationToken,
    )>,
    /// `commands.confirm_within_secs`, ms: older `sent` commands are flagged on the overview.
    confirm_within_ms: i64,
}

fn backend_error(context: &str) -> impl Fn(anyhow::Error) -> AppError + '_ {
    // The page gets a generic message with a reference; the details go to the log.
    move |e| AppError::Backend(internal_error(context, &e))
}

/// A refusal the person can act on shows its text; any other failure is ours and shows
/// only a reference (the details, driver text included, go to the log).
fn refused_or_backend_error(context: &str) -> impl Fn(anyhow::Error) -> AppError + '_ {
    move |e| {
        if let Some(refused) = e.downcast_ref::<crate::store::Refused>() {
            AppError::Invalid(refused.0.clone())
        } else if let Some(conflict) = e.downcast_ref::<crate::store::Conflict>() {
            AppError::Conflict(conflict.0.clone())
        } else {
            AppError::Backend(internal_error(context, &e))
        }
    }
}

fn filter_of(query: &DlqQuery) -> DeadLetterFilter {
    DeadLetterFilter {
        ids: query.id.into_iter().collect(),
        status: query.status.clone(),
        class: query.class.clone(),
        stage: query.stage.clone(),
        provider: query.provider.clone(),
        error_contains: query.error.clone(),
        ..Default::default()
    }
}

/// An error history (JSON array of `{at, class, error}`) as lines a person reads:
/// "time · class · error", oldest first.
fn error_lines(history: Option<&str>) -> Vec<String> {
    history
        .and_then(|h| serde_json::from_str::<Vec<serde_json::Value>>(h).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let at = e["at"].as_i64().map(crate::store::read::rfc3339);
            format!(
                "{} · {} · {}",
                at.unwrap_or_default(),
                e["class"].as_str().unwrap_or("?"),
                e["error"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

impl StoreBackend {
    pub fn new(db: Db, providers: Arc<Providers>) -> StoreBackend {
        StoreBackend {
            db,
            providers,
            settings: Arc::new(SettingsView::default()),
            revealed: tokens::RevealedTokens::default(),
            reads: read_limits::ReadLimits::default(),
            reconciler: None,
            confirm_within_ms: 3_600_000,
        }
    }

    /// With runs and fixes from the dashboard, stopped with `shutdown`.
    pub fn with_reconciler(
        mut self,
        reconciler: crate::reconcile::Reconciler,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Self {
        self.reconciler = Some((reconciler, shutdown));
        self
    }

    fn reconciler(
        &self,
    ) -> Result<
        &(
            crate::reconcile::Reconciler,
            tokio_util::sync::CancellationToken,
        ),
        AppError,
    > {
        self.reconciler.as_ref().ok_or_else(|| {
            AppError::Invalid("this process does not reconcile (no provider API configured)".into())
        })
    }

    /// With the Settings page's view of the configuration (`config::view` builds it) and
    /// `commands.confirm_within_secs` in ms.
    pub fn with_settings(mut self, view: SettingsView, confirm_within_ms: i64) -> Self {
        self.settings = Arc::new(view);
        self.confirm_within_ms = confirm_within_ms;
        self
    }
}

#[async_trait::async_trait]
impl AdminBackend for StoreBackend {
    /// Refused attempts are audited with who, what and from where (then answered 403).
    async fn record_refusal(&self, refusal: &Refusal) -> Result<(), AppError> {
        let who = &refusal.principal;
        let entry = AuditEntry {
            actor: &who.name,
            action: &format!("{}.refused", refusal.action),
            target: &refusal.target,
            reason: Some(&format!("role {} needs {}", who.role, refusal.needed)),
            details: None,
            source: who.source.as_deref(),
            now: now_ms(),
        };
        users::audit(&self.db, &entry)
            .await
            .map_err(backend_error("writing the audit log"))
    }

    async fn inbox(
        &self,
        who: &Viewer,
        query: InboxQuery,
        limit: u32,
    ) -> Result<InboxPage, AppError> {
        let query = query.normalized();
        let limit = i64::from(limit.clamp(1, 200));
        let payload = query
            .payload
            .as_deref()
            .map(inbox_filters::payload_condition)
            .transpose()
            .map_err(AppError::Invalid)?;
        let filter = EventFilter {
            since: inbox_filters::utc_instant("From", query.since.as_deref())
                .map_err(AppError::Invalid)?,
            until: inbox_filters::utc_instant("To", query.until.as_deref())
                .map_err(AppError::Invalid)?,
            provider: query.provider,
            status: query.status,
            event_type: query.event_type,
            order_id: query.order_id,
            event_id: query.event_id,
            correlation_id: query.correlation_id,
            before: query.before,
            // One extra row tells whether there is a next page.
            limit: limit + 1,
        };
        let (rows, next_before) = match payload {
            None => {
                let mut rows = list_events(&self.db, &filter)
                    .await
                    .map_err(backend_error("could not read the inbox"))?;
                let has_more = rows.len() as i64 > limit;
                rows.truncate(limit as usize);
                let next = if has_more {
                    rows.last().map(|r| r.id)
                } else {
                    None
                };
                (rows, next)
            }
            Some(condition) => {
                let _slot = self
                    .reads
                    .acquire(&who.name)
                    .await
                    .map_err(AppError::Busy)?;
                inbox_filters::scan_payloads(&self.db, filter, &condition, limit)
                    .await
                    .map_err(backend_error("could not read the inbox"))?
            }
        };
        Ok(InboxPage {
            events: rows
                .into_iter()
                .map(|r| InboxEventView {
                    id: r.id,
                    provider: r.provider,
                    event_id: r.event_id,
                    event_type: r.event_type,
                    status: r.status,
                    reason: r.reason,
                    order_id: r.order_id,
                    deliveries: r.deliveries,
                    received_at: r.received_at,
                })
                .collect(),
            next_before,
        })
    }

    async fn event_detail(&self, _who: &Viewer, id: i64) -> Result<EventDetail, AppError> {
        let row = event_detail::event(&self.db, id)
            .await
            .map_err(backend_error("reading the event"))?
            .ok_or(AppError::NotFound)?;
        let collapsed_onto = row
            .effect
            .as_ref()
            .map(|(_, winner, _, _)| winner.clone())
            .filter(|winner| *winner != row.event.event_id);
        let open_dead_letter = row.dead_letters.iter().any(|(_, s)| s == "open");
        let outcome = match (row.event.status.as_str(), &collapsed_onto) {
            (_, _) if open_dead_letter => {
                "dead-lettered: waiting for an operator (see the dead letter)".to_string()
            }
            ("duplicate", Some(winner)) => {
                format!("collapsed onto {winner}: the same change was already applied")
            }
            ("applied", _) => match &row.effect {
                Some((transition, _, _, at)) => format!("applied: {transition} at {at}"),
                None => "applied".to_string(),
            },
            ("stale", _) => format!(
                "stale: newer news had arrived{}",
                row.event
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
            ("pending" | "processing", _) => "waiting to be processed".to_string(),
            (status, _) => match &row.event.reason {
                Some(reason) => format!("{status}: {reason}"),
                None => status.to_string(),
            },
        };
        let payload_pretty = serde_json::from_slice::<serde_json::Value>(&row.raw_body)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| String::from_utf8_lossy(&row.raw_body).into_owned());
        let errors = error_lines(row.error_history.as_deref());
        Ok(EventDetail {
            id: row.event.id,
            provider: row.event.provider,
            event_id: row.event.event_id,
            event_type: row.event.event_type,
            api_version: row.event.api_version,
            status: row.event.status,
            reason: row.event.reason,
            order_id: row.event.order_id,
            effect_key: row.event.effect_key,
            outcome,
            collapsed_onto,
            attempts: row.event.attempts,
            correlation_id: row.event.correlation_id,
            received_at: row.event.received_at,
            processed_at: row.event.processed_at,
            raw_size: row.raw_body.len(),
            payload_pretty,
            deliveries: row
                .deliveries
                .into_iter()
                .map(|(received_at, duplicate, correlation_id)| DeliveryView {
                    received_at,
                    duplicate,
                    correlation_id,
                })
                .collect(),
            errors,
            dead_letters: row.dead_letters,
        })
    }

    async fn audit_log(&self, _who: &Admin, query: AuditQuery) -> Result<AuditPage, AppError> {
        let query = query.normalized();
        let limit = i64::from(app::api::AUDIT_PAGE_SIZE);
        // One extra row tells whether there is an older page.
        let mut rows = users::audit_page(&self.db, query.actor.as_deref(), query.before, limit + 1)
            .await
            .map_err(backend_error("reading the audit log"))?;
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        Ok(AuditPage {
            next_before: if has_more {
                rows.last().map(|r| r.id)
            } else {
                None
            },
            entries: rows
                .into_iter()
                .map(|r| AuditEntryView {
                    id: r.id,
                    actor: r.actor,
                    action: r.action,
                    target: r.target,
                    reason: r.reason,
                    details: r.details,
                    source: r.source,
                    at: r.at,
                })
                .collect(),
        })
    }

    async fn users(&self, _who: &Admin) -> Result<Vec<UserView>, AppError> {
        Ok(users::list(&self.db)
            .await
            .map_err(backend_error("reading users"))?
            .into_iter()
            .map(|u| UserView {
                name: u.username,
                role: u.role,
                disabled: u.disabled,
                must_change_password: u.must_change_password,
                last_sign_in_at: u.last_sign_in_at,
                created_at: u.created_at,
            })
            .collect())
    }

    async fn overview(&self, _who: &Viewer, range: Range) -> Result<Overview, AppError> {
        overview::overview(&self.db, range, self.confirm_within_ms)
            .await
            .map_err(backend_error("reading the overview"))
    }

    async fn order_detail(&self, _who: &Viewer, order_id: &str) -> Result<OrderDetail, AppError> {
        // No order id holds a control character (PostgreSQL text cannot even hold U+0000,
        // and sending one would fail the query, a 503 instead of a 404).
        if order_id.is_empty() || order_id.len() > 255 || order_id.chars().any(char::is_control) {
            return Err(AppError::NotFound);
        }
        // The page's language, as web::dashboard provided it for this request (English
        // outside a request: the CLI, tests calling the backend directly).
        let loc = leptos::prelude::use_context::<app::locale::RequestLocale>()
            .map_or(app::locale::Locale::en, |l| l.0);
        order::order_detail_in(&self.db, order_id, loc)
            .await
            .map_err(backend_error("reading the order"))?
            .ok_or(AppError::NotFound)
    }

    async fn search(&self, _who: &Viewer, text: &str) -> Result<SearchHit, AppError> {
        // An id is one token; anything longer than any id is not one.
        let text: String = text.chars().filter(|c| !c.is_control()).collect();
        let text = text.trim();
        if text.is_empty() || text.len() > 255 {
            return Ok(SearchHit::Nothing);
        }
        order::search(&self.db, &self.providers.names(), text)
            .await
            .map_err(backend_error("searching"))
    }

    async fn raw_body(
        &self,
        _who: &Viewer,
        id: i64,
    ) -> Result<(String, String, Vec<u8>), AppError> {
        let row = event_detail::event(&self.db, id)
            .await
            .map_err(backend_error("reading the event"))?
            .ok_or(AppError::NotFound)?;
        Ok((row.event.provider, row.event.event_id, row.raw_body))
    }

    async fn dead_letters(&self, who: &Viewer, query: DlqQuery) -> Result<DlqPage, AppError> {
        let query = query.normalized();
        let now = now_ms();
        let mut filter = filter_of(&query);
        filter.status = filter.status.or(Some("open".into()));
        filter.limit = DLQ_PAGE_ITEMS + 1;
        let mut items = dead_letters::list(&self.db, &filter, now)
            .await
            .map_err(backend_error("reading dead letters"))?;
        let truncated = items.len() as i64 > DLQ_PAGE_ITEMS;
        items.truncate(DLQ_PAGE_ITEMS as usize);
        // Oldest first, grouped by class and message; groups ordered by their oldest item.
        items.reverse();
        let mut groups: BTreeMap<(String, String), Vec<DeadLetterView>> = BTreeMap::new();
        let mut order: Vec<(String, String)> = vec![];
        for dl in items {
            let key = (dl.error_class.clone(), dl.last_error.clone());
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push(DeadLetterView {
                id: dl.id,
                stage: dl.stage,
                sink: dl.sink,
                provider: dl.provider,
                event_id: dl.event_id,
                event_type: dl.event_type,
                order_id: dl.order_id,
                class: dl.error_class,
                error: dl.last_error,
                attempts: dl.attempts,
                status: dl.status,
                age_secs: dl.age_secs,
                first_attempt_at: dl.first_attempt_at,
                resolve_by: dl.resolve_by,
            });
        }
        let groups = order
            .into_iter()
            .map(|key| {
                let items = groups.remove(&key).unwrap_or_default();
                DeadLetterGroup {
                    oldest_age_secs: items.first().map_or(0, |i| i.age_secs),
                    class: key.0,
                    error: key.1,
                    items,
                }
            })
            .collect();
        let (open, oldest) = triage::open_stats(&self.db)
            .await
            .map_err(backend_error("counting dead letters"))?;
        let recent_redrives = triage::recent_redrives(&self.db, 10)
            .await
            .map_err(backend_error("reading redrives"))?
            .into_iter()
            .map(|r| RedriveView {
                dead_letter_id: r.dead_letter_id,
                event_id: r.event_id,
                actor: r.actor,
                reason: r.reason,
                outcome: r.outcome,
                at: r.at,
                current_status: r.current_status,
            })
            .collect();
        let due_within_24h = triage::open_due_before(&self.db, now + 24 * 3_600_000)
            .await
            .map_err(backend_error("counting dead letters"))?;
        let history = match query.id {
            None => None,
            Some(id) => triage::history(&self.db, id)
                .await
                .map_err(backend_error("reading a dead letter's history"))?
                .map(|(errors, redrives)| DeadLetterHistory {
                    id,
                    attempts: error_lines(Some(&errors)),
                    redrives: redrives
                        .into_iter()
                        .map(|r| RedriveRecordView {
                            actor: r.actor,
                            reason: r.reason,
                            outcome: r.outcome,
                            at: r.at,
                        })
                        .collect(),
                }),
        };
        Ok(DlqPage {
            open,
            oldest_open_age_secs: oldest.map(|t| (now - t).max(0) / 1000),
            groups,
            truncated,
            recent_redrives,
            can_operate: who.can(Role::Operator),
            due_within_24h,
            history,
            jobs: self.redrive_jobs(who).await?,
        })
    }

    async fn preview_redrive(
        &self,
        who: &Viewer,
        query: DlqQuery,
    ) -> Result<RedrivePreview, AppError> {
        let query = query.normalized();
        let _slot = self
            .reads
            .acquire(&who.name)
            .await
            .map_err(AppError::Busy)?;
        let (matching, predicted) =
            redrive::preview(&self.db, &self.providers, &filter_of(&query), PREVIEW_ITEMS)
                .await
                .map_err(backend_error("predicting a redrive"))?;
        Ok(RedrivePreview {
            matching,
            outcomes: predicted
                .into_iter()
                .map(|r| RedriveOutcome {
                    dead_letter_id: r.dead_letter_id,
                    event_id: r.event_id,
                    outcome: r.outcome,
                })
                .collect(),
        })
    }

    async fn redrive(
        &self,
        who: &Operator,
        query: DlqQuery,
        reason: Option<String>,
    ) -> Result<Vec<RedriveOutcome>, AppError> {
        let query = query.normalized();
        let reason = reason
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty());
        // A bulk redrive shows its progress on the page while it runs; one item is instant.
        // A bulk redrive records a job the page shows while it runs; one item is instant.
        let job_query = query.id.is_none().then(|| query.to_query_string());
        // Its own task: a request that ends early (client gone, request timeout) does not
        // stop it halfway, and the job always gets its summary.
        let (db, providers, name) = (self.db.clone(), self.providers.clone(), who.name.clone());
        let source = who.source.clone();
        let filter = filter_of(&query);
        // Spawned before any await: a request dropped at once still redrives everything.
        let results = tokio::spawn(async move {
            let job = match job_query {
                Some(q) => Some(redrive_jobs::start(&db, &name, &q, now_ms()).await?),
                None => None,
            };
            let actor = Actor {
                name: &name,
                reason: reason.as_deref(),
                source: source.as_deref(),
            };
            let progress = Arc::new(jobs::Progress::default());
            let work = redrive::redrive(&db, &providers, &filter, false, &actor, |done, total| {
                progress.set(done, total)
            });
            match job {
                Some(id) => jobs::report_while(&db, id, progress.clone(), work).await,
                None => work.await,
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("the redrive task ended: {e}"))
        .and_then(|r| r);
        let results = results.map_err(backend_error("redriving"))?;
        Ok(results
            .into_iter()
            .map(|r| RedriveOutcome {
                dead_letter_id: r.dead_letter_id,
                event_id: r.event_id,
                outcome: r.outcome,
            })
            .collect())
    }

    async fn close_dead_letter(
        &self,
        who: &Operator,
        id: i64,
        resolve: bool,
        reason: String,
    ) -> Result<(), AppError> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(AppError::Invalid("say why (a reason is required)".into()));
        }
        let actor = Actor {
            name: &who.name,
            reason: Some(reason),
            source: who.source.as_deref(),
        };
        let status = if resolve { "resolved" } else { "discarded" };
        dead_letters::close(&self.db, id, status, &actor, now_ms())
            .await
            .map_err(refused_or_backend_error("closing a dead letter"))
    }

    async fn request_refund(
        &self,
        who: &Operator,
        order_id: &str,
        request: app::backend::RefundRequest,
    ) -> Result<app::backend::CommandView, AppError> {
        commands::request_refund(&self.db, who, order_id, request).await
    }

    async fn cancel_command(
        &self,
        who: &Operator,
        order_id: &str,
        id: i64,
    ) -> Result<app::backend::CommandView, AppError> {
        commands::cancel(&self.db, who, order_id, id).await
    }

    async fn request_refund_once(
        &self,
        who: &Operator,
        order_id: &str,
        request: app::backend::RefundRequest,
        page_key: String,
    ) -> Result<app::backend::CommandView, AppError> {
        commands::request_refund_once(&self.db, who, order_id, request, &page_key).await
    }

    async fn redrive_jobs(
        &self,
        _who: &Viewer,
    ) -> Result<Vec<app::backend::RedriveJobView>, AppError> {
        let now = now_ms();
        let jobs = redrive_jobs::recent(&self.db)
            .await
            .map_err(backend_error("reading bulk redrives"))?;
        Ok(jobs.into_iter().map(|job| jobs::view(job, now)).collect())
    }

    async fn settings(&self, _who: &Viewer) -> Result<SettingsView, AppError> {
        Ok((*self.settings).clone())
    }

    async fn api_tokens(&self, who: &Admin) -> Result<ApiTokensPage, AppError> {
        let now = now_ms();
        let rows = crate::store::tokens::list(&self.db)
            .await
            .map_err(backend_error("reading API tokens"))?;
        Ok(ApiTokensPage {
            tokens: rows.into_iter().map(|r| tokens::view(r, now)).collect(),
            revealed: self.revealed.take(who.user_id),
        })
    }

    async fn create_api_token(
        &self,
        who: &Admin,
        name: String,
        role: String,
        expires_in_days: u32,
    ) -> Result<(), AppError> {
        let name = name.trim().to_string();
        let role = Role::parse(role.trim())
            .ok_or_else(|| AppError::Invalid("the role is viewer, operator or admin".into()))?;
        if !(1..=3650).contains(&expires_in_days) {
            return Err(AppError::Invalid(
                "a token expires after 1 to 3,650 days".into(),
            ));
        }
        let now = now_ms();
        let (row, token) = crate::store::tokens::create(
            &self.db,
            &crate::store::tokens::NewToken {
                name: &name,
                role: role.as_str(),
                created_by: &who.name,
                maker: crate::store::tokens::Maker::User(who.user_id),
                now,
                expires_at: now + i64::from(expires_in_days) * 86_400_000,
            },
            who.source.as_deref(),
        )
        .await
        .map_err(refused_or_backend_error("making an API token"))?;
        self.revealed.keep(
            who.user_id,
            RevealedToken {
                name: row.name,
                role: row.role,
                expires_at: row.expires_at,
                token,
            },
        );
        Ok(())
    }

    async fn revoke_api_token(&self, who: &Admin, name: String) -> Result<(), AppError> {
        crate::store::tokens::revoke(
            &self.db,
            name.trim(),
            &who.name,
            who.source.as_deref(),
            now_ms(),
        )
        .await
        .map(|_| ())
        .map_err(refused_or_backend_error("revoking an API token"))
    }

    async fn reconciliation_runs(
        &self,
        _who: &Viewer,
        before: Option<i64>,
        limit: u32,
    ) -> Result<app::backend::RunsPage, AppError> {
        reconcile::runs(&self.db, before, limit)
            .await
            .map_err(backend_error("reading reconciliation runs"))
    }

    async fn reconciliation_diffs(
        &self,
        _who: &Viewer,
        query: app::backend::DiffQuery,
    ) -> Result<app::backend::DiffPage, AppError> {
        reconcile::diffs(&self.db, query)
            .await
            .map_err(backend_error("reading reconciliation diffs"))
    }

    async fn resolve_diff(&self, who: &Operator, id: i64, reason: String) -> Result<(), AppError> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(AppError::Invalid("say why (a reason is required)".into()));
        }
        let actor = Actor {
            name: &who.name,
            reason: Some(reason),
            source: who.source.as_deref(),
        };
        crate::store::reconcile::resolve(&self.db, id, &actor, now_ms())
            .await
            .map_err(refused_or_backend_error("resolving a reconciliation diff"))
    }

    async fn reconciliation_page(
        &self,
        who: &Viewer,
        query: app::backend::DiffQuery,
        runs_before: Option<i64>,
    ) -> Result<app::backend::ReconciliationPage, AppError> {
        let (runs, groups, list) = reconcile::page(&self.db, query, runs_before)
            .await
            .map_err(backend_error("reading reconciliation"))?;
        let providers = self
            .reconciler
            .as_ref()
            .map(|(r, _)| r.providers_with_api())
            .unwrap_or_default();
        Ok(app::backend::ReconciliationPage {
            runs,
            groups,
            list,
            providers,
            can_operate: who.can(Role::Operator),
            now: now_ms(),
        })
    }

    async fn start_reconciliation(
        &self,
        who: &Operator,
        provider: String,
    ) -> Result<Vec<i64>, AppError> {
        let (r, shutdown) = self.reconciler()?;
        let provider = provider.trim();
        let providers = if provider.is_empty() {
            r.providers_with_api()
        } else {
            vec![provider.to_string()]
        };
        if providers.is_empty() {
            return Err(AppError::Invalid(
                "no provider has an api_key: reconciliation needs the provider's API".into(),
            ));
        }
        let mut ids = Vec::new();
        for p in providers {
            let options = crate::reconcile::Options {
                provider: p.clone(),
                source: "dashboard",
                actor: Some(who.name.clone()),
                ..Default::default()
            };
            let id = r
                .start(options, shutdown.child_token())
                .await
                .map_err(|e| match e.downcast_ref::<crate::reconcile::NotStarted>() {
                    Some(not) => AppError::Invalid(not.to_string()),
                    None => AppError::Backend(internal_error("starting a reconciliation run", &e)),
                })?;
            let entry = AuditEntry {
                actor: &who.name,
                action: "reconciliation.run",
                target: &format!("reconciliation:{p}"),
                reason: None,
                details: Some(&format!("run {id}")),
                source: who.source.as_deref(),
                now: now_ms(),
            };
            users::audit(&self.db, &entry)
                .await
                .map_err(backend_error("writing the audit log"))?;
            ids.push(id);
        }
        Ok(ids)
    }

    async fn fix_diff(&self, who: &Operator, id: i64) -> Result<app::backend::DiffView, AppError> {
        let (r, shutdown) = self.reconciler()?;
        let (report, diff) =
            r.fix(id, &who.name, shutdown.child_token())
                .await
                .map_err(|e| match e.downcast_ref::<crate::reconcile::NotStarted>() {
                    Some(not) => AppError::Invalid(not.to_string()),
                    None => refused_or_backend_error("fixing a reconciliation diff")(e),
                })?;
        let entry = AuditEntry {
            actor: &who.name,
            action: "reconciliation.fix",
            target: &format!("reconciliation_diff:{id}"),
            reason: diff.resolution.as_deref(),
            details: Some(&format!(
                "run {}: {}",
                report.run_id.unwrap_or_default(),
                report.status
            )),
            source: who.source.as_deref(),
            now: now_ms(),
        };
        users::audit(&self.db, &entry)
            .await
            .map_err(backend_error("writing the audit log"))?;
        if report.status != "succeeded" {
            return Err(AppError::Invalid(format!(
                "the provider could not be asked: {}",
                report.error.unwrap_or_default()
            )));
        }
        if diff.state == "open" {
            return Err(AppError::Invalid(format!(
                "diff {id} could not be fixed automatically: {}; resolve it with a reason",
                diff.detail
            )));
        }
        Ok(reconcile::diff_view(diff))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_read_shows_a_generic_message_with_a_reference() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::connect(&format!("sqlite://{}", dir.path().join("x.db").display()))
            .await
            .unwrap();
        // No migration: the inbox table does not exist, so the read fails in the driver.
        let backend = StoreBackend::new(db, Arc::new(Providers::build(&[]).unwrap()));
        let viewer: Viewer = app::backend::authorize(
            &backend,
            app::backend::Principal {
                user_id: 1,
                name: "vera".into(),
                role: Role::Viewer,
                must_change_password: false,
                source: None,
            },
            "inbox.read",
            "inbox",
        )
        .await
        .unwrap();
        let err = backend
            .inbox(&viewer, InboxQuery::default(), 10)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("could not read the inbox"), "{err}");
        assert!(err.contains("reference "), "{err}");
        assert!(
            !err.contains("inbox_events") && !err.to_lowercase().contains("sqlite"),
            "no driver detail on the page: {err}"
        );
    }
}
