//! The dashboard's port implemented over the store.

use app::backend::{AdminBackend, InboxEventView, InboxPage};

use crate::store::read::{list_events, EventFilter};
use crate::store::Db;

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
            .map_err(|e| format!("could not read the inbox: {e:#}"))?;
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
