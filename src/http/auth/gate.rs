//! The sign-in gate: which requests reach the dashboard without a session.
//!
//! The gate decides on the path the router will serve, never on a prefix of the path as
//! written: `/pkg/../events` starts with `/pkg/` but the dashboard's router normalises it
//! to `/events`. So a path that reads differently once normalised or decoded (a dot
//! segment, written or encoded; an encoded slash or backslash; an empty segment) is
//! refused with 400
//! before any router sees it, and the public set is exact: the sign-in page and form, and
//! the bundle's files that exist.

use std::path::PathBuf;

use app::backend::Principal;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

/// Whether `path` (as written, before percent-decoding) could name another path once a
/// router normalises or decodes it.
pub fn is_ambiguous(path: &str) -> bool {
    if path.contains('\\') {
        return true;
    }
    // An encoded '/' or '\' splits a segment in two once decoded.
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return true;
    }
    if path == "/" {
        return false;
    }
    match lower.strip_prefix('/') {
        None => true,
        // A dot segment, written or encoded (`..`, `.%2e`, `%2e%2e`), or an empty one.
        Some(rest) => rest
            .split('/')
            .map(|segment| segment.replace("%2e", "."))
            .any(|segment| matches!(segment.as_str(), "" | "." | "..")),
    }
}

/// 400 for an ambiguous path (see [`is_ambiguous`]), before any route or fallback runs;
/// under `/api/` in the API's JSON error body (`{"error": "…"}`), as its document says.
pub async fn refuse_ambiguous_paths(req: Request, next: Next) -> Response {
    const REFUSAL: &str = "the path has a dot segment, an empty segment or an encoded '/' or '\\'";
    if is_ambiguous(req.uri().path()) {
        if req.uri().path().starts_with("/api/") {
            let body = axum::Json(serde_json::json!({ "error": REFUSAL }));
            return (StatusCode::BAD_REQUEST, body).into_response();
        }
        return (StatusCode::BAD_REQUEST, REFUSAL).into_response();
    }
    next.run(req).await
}

/// The requests anyone may make: the sign-in page, its form, and the static bundle's files
/// that exist under `site_root/pkg` (the stylesheet always exists: it is compiled in).
#[derive(Clone, Debug)]
pub struct PublicPaths {
    pkg_dir: PathBuf,
    stylesheet: String,
}

impl PublicPaths {
    pub fn new(site_root: &std::path::Path, pkg_dir: &str, stylesheet: &str) -> PublicPaths {
        PublicPaths {
            pkg_dir: site_root.join(pkg_dir),
            stylesheet: format!("/{pkg_dir}/{stylesheet}"),
        }
    }

    /// Whether `method path` needs no session. Assumes a path [`is_ambiguous`] refused
    /// (the check here is exact anyway: one file name, no dot segment).
    pub fn allows(&self, method: &Method, path: &str) -> bool {
        let read = *method == Method::GET || *method == Method::HEAD;
        match path {
            "/sign-in" => read,
            "/auth/sign-in" => *method == Method::POST,
            _ if read && path == self.stylesheet => true,
            _ if read => path
                .strip_prefix("/pkg/")
                .filter(|name| is_file_name(name))
                .is_some_and(|name| self.pkg_dir.join(name).is_file()),
            _ => false,
        }
    }
}

/// One path segment naming a file: no separator, no leading dot, nothing but
/// `[A-Za-z0-9._-]`.
fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Paths someone who must change their password may still reach.
fn allowed_before_password_change(path: &str) -> bool {
    matches!(
        path,
        "/change-password" | "/auth/password" | "/auth/sign-out"
    )
}

/// Without a principal: pages redirect to the sign-in page (coming back afterwards), other
/// requests (server functions, form posts) get 401. With a principal that must change its
/// password, every page leads to the password form.
pub async fn require_sign_in(
    State(public): State<PublicPaths>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    // Refused again here, so the gate holds whatever layers run around it.
    if is_ambiguous(path) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    if public.allows(req.method(), path) {
        return next.run(req).await;
    }
    let is_page = req.method() == Method::GET;
    match req.extensions().get::<Principal>() {
        None if is_page => {
            let back = req
                .uri()
                .path_and_query()
                .map(|pq| pq.as_str())
                .unwrap_or("/");
            let target = if back == "/" {
                "/sign-in".to_string()
            } else {
                format!("/sign-in?next={}", super::urlencode(back))
            };
            Redirect::to(&target).into_response()
        }
        None => (StatusCode::UNAUTHORIZED, "sign in first").into_response(),
        Some(p) if p.must_change_password && !allowed_before_password_change(path) => {
            if is_page {
                Redirect::to("/change-password").into_response()
            } else {
                (StatusCode::FORBIDDEN, "change your password first").into_response()
            }
        }
        Some(_) => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_normalise_or_decode_to_another_are_ambiguous() {
        for bad in [
            "/pkg/../events",
            "/pkg/%2e%2e/events",
            "/pkg/%2E%2E/events",
            "/pkg/.%2e/events",
            "/pkg%2f../events",
            "/pkg/x%5c..",
            "/pkg\\..\\events",
            "/./events",
            "/events/.",
            "/events/..",
            "//events",
            "/events//1",
            "/events/",
            "events",
            "",
        ] {
            assert!(is_ambiguous(bad), "{bad:?}");
        }
        for good in [
            "/",
            "/events",
            "/events/12",
            "/orders/ord.1-x_y",
            "/orders/ord%20one",
            "/pkg/oncehook.js",
            "/orders/a..b",
            "/orders/ord%2e1",
            "/orders/%2e%2e%2e",
        ] {
            assert!(!is_ambiguous(good), "{good:?}");
        }
    }

    #[test]
    fn the_public_set_is_exact() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir(site.path().join("pkg")).unwrap();
        std::fs::write(site.path().join("pkg/oncehook.js"), "x").unwrap();
        std::fs::write(site.path().join("pkg/.hidden"), "x").unwrap();
        std::fs::create_dir(site.path().join("pkg/dir")).unwrap();
        let public = PublicPaths::new(site.path(), "pkg", "oncehook.css");
        let (get, post) = (Method::GET, Method::POST);
        assert!(public.allows(&get, "/sign-in"));
        assert!(public.allows(&post, "/auth/sign-in"));
        assert!(public.allows(&get, "/pkg/oncehook.js"));
        assert!(public.allows(&Method::HEAD, "/pkg/oncehook.js"));
        assert!(public.allows(&get, "/pkg/oncehook.css"));
        for (method, path) in [
            (&post, "/sign-in"),
            (&get, "/auth/sign-in"),
            (&post, "/pkg/oncehook.js"),
            (&get, "/pkg/missing.js"),
            (&get, "/pkg/.hidden"),
            (&get, "/pkg/dir"),
            (&get, "/pkg/"),
            (&get, "/pkg"),
            (&get, "/pkg/oncehook.js/x"),
            (&get, "/sign-in/x"),
            (&get, "/"),
            (&get, "/events"),
            (&post, "/api/load_inbox"),
            (&post, "/auth/sign-out"),
        ] {
            assert!(!public.allows(method, path), "{method} {path}");
        }
    }
}
