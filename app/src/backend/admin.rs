//! The admin pages: audit log, users, settings and API tokens.

use serde::{Deserialize, Serialize};

use super::query::{clean_filter, percent_encode};

/// One audit-log row: who did what, to what, why, from where, when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub details: Option<String>,
    pub source: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
}

/// The audit log's filter and keyset cursor; they live in the URL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub actor: Option<String>,
    /// Only rows older than this audit id.
    pub before: Option<i64>,
}

impl AuditQuery {
    pub fn normalized(self) -> AuditQuery {
        AuditQuery {
            actor: clean_filter(self.actor),
            before: self.before,
        }
    }

    pub fn href(&self) -> String {
        let mut parts = vec![];
        if let Some(actor) = &self.actor {
            parts.push(format!("actor={}", percent_encode(actor)));
        }
        if let Some(before) = self.before {
            parts.push(format!("before={before}"));
        }
        if parts.is_empty() {
            "/admin/audit".into()
        } else {
            format!("/admin/audit?{}", parts.join("&"))
        }
    }
}

/// A page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntryView>,
    pub next_before: Option<i64>,
}

/// A dashboard user as admins see them (never the password hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub must_change_password: bool,
    pub last_sign_in_at: Option<String>,
    pub created_at: String,
}

/// The effective configuration as people read it: every key, secrets shown as
/// `<redacted>`, and each provider's event mapping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsView {
    pub sections: Vec<SettingsSection>,
    pub mappings: Vec<MappingView>,
}

/// One table of the configuration (`processor`, `providers: stripe`…): (key, value) pairs,
/// nested keys dotted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsSection {
    pub title: String,
    pub entries: Vec<(String, String)>,
}

/// How one provider's event types become business changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MappingView {
    pub provider: String,
    pub min_api_version: Option<String>,
    pub rules: Vec<MappingRuleView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MappingRuleView {
    pub event_type: String,
    /// `pay`, or `by /data/object/status: succeeded → refund, failed → refund_failed`.
    pub transition: String,
    /// JSON pointers, first present wins, joined with ` | `.
    pub order_id: String,
    pub external_ref: String,
    pub amount: String,
}

/// An API token as admins see it (never the token, only its first characters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokenView {
    pub name: String,
    pub prefix: String,
    pub role: String,
    /// live | expired | revoked
    pub state: String,
    pub created_by: String,
    pub created_at: String,
    pub expires_at: String,
    pub last_used_at: Option<String>,
}

/// A token just made, shown to the admin who made it on their next view of the token
/// page, and never again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevealedToken {
    pub name: String,
    pub role: String,
    pub expires_at: String,
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokensPage {
    pub tokens: Vec<ApiTokenView>,
    pub revealed: Option<RevealedToken>,
}
