//! The process itself: its metrics and its allocator.
pub mod allocator;
pub mod metrics;
