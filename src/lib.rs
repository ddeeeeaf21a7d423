//! oncehook: signed payment webhooks in, exactly one business effect out.
//!
//! The folders are the layers (ARCHITECTURE.md draws them); a module imports only from
//! layers below its own (tests/layers.rs checks it):
//! `cli` → `simulator` → `server` → `config` → `http` → `reconcile` → `verify` →
//! `pipeline` → `provider` → `store` → `domain` → `ops`.
pub mod cli;
pub mod config;
pub mod domain;
pub mod http;
pub mod ops;
pub mod pipeline;
pub mod provider;
pub mod reconcile;
pub mod server;
pub mod simulator;
pub mod store;
pub mod support;
pub mod verify;
