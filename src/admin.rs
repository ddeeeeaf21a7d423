//! The dashboard's port implemented over the store.

use app::backend::{AdminBackend, InboxEventView, InboxPage};

use crate::store::read::{list_events, EventFilter};
use crate::store::Db;

/// What a page shows for a failure on our side: a generic sentence and a reference; the
/// details (driver errors, SQL, paths) go to the log under that reference.
pub fn internal_error(what: &str, error: &anyhow::Error) -> String {
    let reference = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    tracing::error!(correlation_id = %reference, error = %format!("{error:#}"), "{what}");
    format!("{what} (reference {reference}; the details are in the server log)")
}

pub struct StoreBackend {
    pub db: Db,
}

#[async_trait::async_trait]
impl AdminBackend for StoreBackend {
    async fn inbox_page(&self, before: Option<i64>, limit: u32) -> Result<InboxPage, String> {
        let limit = i64::from(limit.clamp(1, 200));
        let filter = EventFilter {
            before,
            // One extra row tells whether there is a next page.
            limit: limit + 1,
            ..Default::default()
        };
        let mut rows = list_events(&self.db, &filter)
            .await
            .map_err(|e| internal_error("could not read the inbox", &e))?;
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let next_before = if has_more {
            rows.last().map(|r| r.id)
        } else {
            None
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
        let err = StoreBackend { db }.inbox_page(None, 10).await.unwrap_err();
        assert!(err.contains("could not read the inbox"), "{err}");
        assert!(err.contains("reference "), "{err}");
        assert!(
            !err.contains("inbox_events") && !err.to_lowercase().contains("sqlite"),
            "no driver detail on the page: {err}"
        );
    }
}
