//! Domain rules as plain functions with no I/O: statuses and transitions, the per-resource
//! ordering guard, the money projection and ledger plan, and the effect key. Storage mirrors
//! the guard in SQL; the tests compare both.

pub mod commands;
pub mod effect_key;
pub mod event;
pub mod failure;
pub mod money;
pub mod order;
pub mod outbox;
pub mod retry;

pub use effect_key::EffectKey;
pub use money::{project, Change, Entry, EntryKind, Fact, Facts, Projection, Totals, Update};
pub use order::{OrderStatus, ResourceKind, Stamp, Transition};
