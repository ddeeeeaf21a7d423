pub mod access;
pub mod dlq;
pub mod event;
pub mod inbox;
pub mod not_found;
pub mod order;
pub mod overview;
pub mod search;
