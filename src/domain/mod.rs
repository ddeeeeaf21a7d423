//! Domain rules as plain functions with no I/O: the order state machine, the ordering
//! guard and the effect key. Storage mirrors these rules in SQL; the tests compare both.

pub mod effect_key;
pub mod order;

pub use effect_key::EffectKey;
pub use order::{judge, OrderHead, OrderStatus, Stamp, Transition, Verdict};
