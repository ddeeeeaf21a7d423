//! Small helpers every layer may use: private files, and secrets kept out of what is shown.
pub mod files;
pub mod redact;
