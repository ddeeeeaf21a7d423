//! A backend over a fixed list of inbox events and nothing else, for previews of the
//! dashboard without a database (`examples/dashboard_preview.rs`) and for tests of the
//! rendering. It implements every method: the inbox from its list, every other read as
//! `NotFound`, every change refused; with `fail` set, every call fails with that text.

use super::*;
use crate::error::AppError;

pub struct FixedInbox {
    /// Newest first, as the real store returns them.
    pub events: Vec<InboxEventView>,
    /// When set, every call fails as the store does when the database does not answer.
    pub fail: Option<String>,
}

impl FixedInbox {
    fn ok(&self) -> Result<(), AppError> {
        match &self.fail {
            Some(text) => Err(AppError::Backend(text.clone())),
            None => Ok(()),
        }
    }

    fn not_found<T>(&self) -> Result<T, AppError> {
        self.ok()?;
        Err(AppError::NotFound)
    }

    fn refused<T>(&self) -> Result<T, AppError> {
        self.ok()?;
        Err(AppError::Invalid("this preview changes nothing".into()))
    }
}

#[async_trait::async_trait]
impl AdminBackend for FixedInbox {
    async fn record_refusal(&self, _: &Refusal) -> Result<(), AppError> {
        self.ok()
    }

    async fn inbox(
        &self,
        _: &Viewer,
        query: InboxQuery,
        limit: u32,
    ) -> Result<InboxPage, AppError> {
        self.ok()?;
        let older: Vec<_> = self
            .events
            .iter()
            .filter(|e| query.before.is_none_or(|b| e.id < b))
            .collect();
        let events: Vec<_> = older
            .iter()
            .take(limit as usize)
            .map(|e| (*e).clone())
            .collect();
        let next_before = (older.len() > events.len())
            .then(|| events.last().map(|e| e.id))
            .flatten();
        Ok(InboxPage {
            events,
            next_before,
        })
    }

    async fn event_detail(&self, _: &Viewer, _: i64) -> Result<EventDetail, AppError> {
        self.not_found()
    }

    async fn raw_body(&self, _: &Viewer, _: i64) -> Result<(String, String, Vec<u8>), AppError> {
        self.not_found()
    }

    async fn overview(&self, _: &Viewer, _: Range) -> Result<Overview, AppError> {
        self.not_found()
    }

    async fn order_detail(&self, _: &Viewer, _: &str) -> Result<OrderDetail, AppError> {
        self.not_found()
    }

    async fn search(&self, _: &Viewer, _: &str) -> Result<SearchHit, AppError> {
        self.ok()?;
        Ok(SearchHit::Nothing)
    }

    async fn dead_letters(&self, _: &Viewer, _: DlqQuery) -> Result<DlqPage, AppError> {
        self.not_found()
    }

    async fn preview_redrive(&self, _: &Viewer, _: DlqQuery) -> Result<RedrivePreview, AppError> {
        self.not_found()
    }

    async fn redrive_jobs(&self, _: &Viewer) -> Result<Vec<RedriveJobView>, AppError> {
        self.ok()?;
        Ok(vec![])
    }

    async fn redrive(
        &self,
        _: &Operator,
        _: DlqQuery,
        _: Option<String>,
    ) -> Result<Vec<RedriveOutcome>, AppError> {
        self.refused()
    }

    async fn close_dead_letter(
        &self,
        _: &Operator,
        _: i64,
        _: bool,
        _: String,
    ) -> Result<(), AppError> {
        self.refused()
    }

    async fn request_refund(
        &self,
        _: &Operator,
        _: &str,
        _: RefundRequest,
    ) -> Result<CommandView, AppError> {
        self.refused()
    }

    async fn request_refund_once(
        &self,
        _: &Operator,
        _: &str,
        _: RefundRequest,
        _: String,
    ) -> Result<CommandView, AppError> {
        self.refused()
    }

    async fn cancel_command(&self, _: &Operator, _: &str, _: i64) -> Result<CommandView, AppError> {
        self.refused()
    }

    async fn settings(&self, _: &Viewer) -> Result<SettingsView, AppError> {
        self.not_found()
    }

    async fn audit_log(&self, _: &Admin, _: AuditQuery) -> Result<AuditPage, AppError> {
        self.not_found()
    }

    async fn users(&self, _: &Admin) -> Result<Vec<UserView>, AppError> {
        self.not_found()
    }

    async fn api_tokens(&self, _: &Admin) -> Result<ApiTokensPage, AppError> {
        self.not_found()
    }

    async fn create_api_token(
        &self,
        _: &Admin,
        _: String,
        _: String,
        _: u32,
    ) -> Result<(), AppError> {
        self.refused()
    }

    async fn revoke_api_token(&self, _: &Admin, _: String) -> Result<(), AppError> {
        self.refused()
    }

    async fn reconciliation_runs(
        &self,
        _: &Viewer,
        _: Option<i64>,
        _: u32,
    ) -> Result<RunsPage, AppError> {
        self.ok()?;
        Ok(RunsPage {
            runs: vec![],
            open: vec![],
            last_success_at: None,
            next_before: None,
        })
    }

    async fn reconciliation_diffs(&self, _: &Viewer, _: DiffQuery) -> Result<DiffPage, AppError> {
        self.ok()?;
        Ok(DiffPage {
            diffs: vec![],
            next_before: None,
        })
    }

    async fn resolve_diff(&self, _: &Operator, _: i64, _: String) -> Result<(), AppError> {
        self.refused()
    }

    async fn reconciliation_page(
        &self,
        who: &Viewer,
        query: DiffQuery,
        runs_before: Option<i64>,
    ) -> Result<ReconciliationPage, AppError> {
        let grouped = query.grouped();
        Ok(ReconciliationPage {
            runs: self.reconciliation_runs(who, runs_before, 10).await?,
            groups: vec![],
            list: (!grouped).then_some(self.reconciliation_diffs(who, query).await?),
            providers: vec![],
            can_operate: false,
            now: 0,
        })
    }

    async fn start_reconciliation(&self, _: &Operator, _: String) -> Result<Vec<i64>, AppError> {
        self.refused()
    }

    async fn fix_diff(&self, _: &Operator, _: i64) -> Result<DiffView, AppError> {
        self.refused()
    }
}
