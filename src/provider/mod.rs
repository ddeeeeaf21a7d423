//! What oncehook knows of each payment provider: how its webhooks are signed
//! (`signature`), what its payloads mean (`mapping`), its API (`api`), and one signed event
//! in its own shape on demand (`trigger`).
pub mod api;
pub mod mapping;
pub mod settings;
pub mod signature;
pub mod trigger;
