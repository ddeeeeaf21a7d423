//! Who is asking: roles, the signed-in principal, and the capabilities a role check makes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a person may do. Ordered: each role can do everything the ones before it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub enum Role {
    /// Support staff and managers: read everything.
    Viewer,
    /// On-call engineers: also redrive, resolve and discard dead letters.
    Operator,
    /// Also manage users and API tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The signed-in person making a request. The server's session middleware puts it in the
/// request's extensions; server functions read it from there and pass it to the backend,
/// which checks the role before it changes anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub user_id: i64,
    pub name: String,
    pub role: Role,
    /// Signed in with a one-time or reset password: every page leads to the password form.
    pub must_change_password: bool,
    /// The client address the request came from, for the audit log.
    pub source: Option<String>,
}

impl Principal {
    pub fn can(&self, needed: Role) -> bool {
        self.role >= needed
    }
}

/// The capabilities: values only [`authorize`] makes, after checking the role and auditing
/// a refusal. A backend method that needs a role takes the capability, so a caller that
/// forgot the check does not compile. Each derefs to the principal it was made for.
/// Server only: the browser never holds one.
///
/// Outside this module nobody can make one but through [`authorize`]:
///
/// ```compile_fail,E0423
/// # use app::backend::{Principal, Viewer};
/// # fn forge(principal: Principal) -> Viewer {
/// Viewer(principal)
/// # }
/// ```
///
/// and a method that needs one does not take a bare principal:
///
/// ```compile_fail,E0308
/// # use app::backend::{AdminBackend, InboxQuery, Principal};
/// # async fn read(backend: &dyn AdminBackend, who: &Principal) {
/// backend.inbox(who, InboxQuery::default(), 10).await;
/// # }
/// ```
#[cfg(feature = "ssr")]
mod capability {
    use super::{Principal, Role};

    /// Implemented by the three capabilities; sealed, so only this module makes them.
    pub trait Capability: Sized + sealed::Sealed {
        /// The least role this capability needs.
        const ROLE: Role;
    }

    pub(super) mod sealed {
        pub trait Sealed {
            fn grant(principal: super::Principal) -> Self;
        }
    }

    macro_rules! capability {
        ($(#[$doc:meta])* $name:ident, $role:expr) => {
            $(#[$doc])*
            #[derive(Clone, Debug)]
            pub struct $name(Principal);

            impl Capability for $name {
                const ROLE: Role = $role;
            }

            impl sealed::Sealed for $name {
                fn grant(principal: Principal) -> Self {
                    $name(principal)
                }
            }

            impl std::ops::Deref for $name {
                type Target = Principal;

                fn deref(&self) -> &Principal {
                    &self.0
                }
            }
        };
    }

    capability!(
        /// Anyone signed in: reads.
        Viewer,
        Role::Viewer
    );
    capability!(
        /// Redrive, resolve and discard dead letters.
        Operator,
        Role::Operator
    );
    capability!(
        /// Users, API tokens and the audit log.
        Admin,
        Role::Admin
    );

    /// The capability `C` for `principal`, when its role allows it.
    pub(super) fn grant<C: Capability>(principal: Principal) -> Result<C, Principal> {
        if principal.can(C::ROLE) {
            Ok(<C as sealed::Sealed>::grant(principal))
        } else {
            Err(principal)
        }
    }
}

#[cfg(feature = "ssr")]
pub use capability::{Admin, Capability, Operator, Viewer};

/// What a refused request wanted: recorded in the audit log as `{action}.refused`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub principal: Principal,
    pub needed: Role,
    pub action: String,
    pub target: String,
}

impl Refusal {
    /// The sentence the person reads.
    pub fn message(&self) -> String {
        format!(
            "{} needs the {} role; you are {}",
            self.action, self.needed, self.principal.role
        )
    }
}

/// The one way to a capability: `principal` gets `C` when its role allows it; a refusal is
/// written to the audit log through `backend` (who, what, on what, from where) and answered
/// as `Forbidden`.
#[cfg(feature = "ssr")]
pub async fn authorize<C: Capability>(
    backend: &dyn super::AdminBackend,
    principal: Principal,
    action: &str,
    target: &str,
) -> Result<C, crate::error::AppError> {
    match capability::grant::<C>(principal) {
        Ok(capability) => Ok(capability),
        Err(principal) => {
            let refusal = Refusal {
                principal,
                needed: C::ROLE,
                action: action.to_string(),
                target: target.to_string(),
            };
            backend.record_refusal(&refusal).await?;
            Err(crate::error::AppError::Forbidden(refusal.message()))
        }
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    fn principal(role: Role) -> Principal {
        Principal {
            user_id: 1,
            name: "ana".into(),
            role,
            must_change_password: false,
            source: None,
        }
    }

    #[test]
    fn each_capability_needs_its_role() {
        for role in Role::ALL {
            assert!(capability::grant::<Viewer>(principal(role)).is_ok());
            assert_eq!(
                capability::grant::<Operator>(principal(role)).is_ok(),
                role >= Role::Operator
            );
            assert_eq!(
                capability::grant::<Admin>(principal(role)).is_ok(),
                role == Role::Admin
            );
        }
        let operator = capability::grant::<Operator>(principal(Role::Admin)).unwrap();
        assert_eq!(operator.name, "ana");
    }
}
