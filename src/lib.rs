//! oncehook: signed payment webhooks in, exactly one business effect out.
pub mod admin;
pub mod bench;
pub mod cli;
pub mod config;
pub mod domain;
pub mod ingest;
pub mod mapping;
pub mod processor;
pub mod retry;
pub mod server;
pub mod signature;
pub mod store;
pub mod web;
