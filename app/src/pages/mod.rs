pub mod access;
pub mod dlq;
pub mod inbox;
pub mod not_found;
