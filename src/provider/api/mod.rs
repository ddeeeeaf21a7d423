//! The provider's API, as Stripe defines it: one client for Stripe itself and for
//! `oncehook simulate` (nothing here knows which). Lists are paged the Stripe way
//! (`limit`, `starting_after`, `has_more`); 429 (with `Retry-After`), 5xx, 408, 409 and
//! timeouts retry under the provider's `RetryPolicy`; requests are paced under its rate
//! limit. The API key travels only in the `Authorization` header: no error, log line or
//! `Debug` output shows it. Mercado Pago's calls (`GET /v1/payments/{id}`, its payment
//! search, its refunds) go through the same client and the same rules.

mod client;
mod error;
pub mod objects;

pub use client::{
    search_date, updated_ms, ApiClient, EventQuery, ForwardPager, Pager, PaymentPages,
    PaymentSearch, MAX_IDEMPOTENCY_KEY, SEARCH_PATH,
};
pub use error::ApiError;
pub use objects::{
    Charge, CreateRefund, Dispute, Event, EventData, Expandable, HasId, List, PaymentIntent, Refund,
};

/// Stripe's ceiling for `limit` on every list.
pub const MAX_PAGE: u32 = 100;

/// How long the provider remembers an idempotency key (Stripe: at least 24 hours): a
/// request sent again with the same key after this may be made again.
pub const IDEMPOTENCY_KEY_MEMORY_MS: i64 = 24 * 3_600_000;
