//! The transactional path of a webhook: received and stored (`ingest`), applied exactly
//! once (`processor`, run by `worker`), its outbox delivered (`relay`), failures put back
//! (`redrive`), old rows pruned (`retention`) and people told (`alerts`).
pub mod alerts;
pub mod ingest;
pub mod processor;
pub mod redrive;
pub mod relay;
pub mod retention;
pub mod settings;
pub mod worker;
