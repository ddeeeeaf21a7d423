//! The admin dashboard over HTTP: the Leptos pages, their server functions and the static
//! bundle (WASM, JS, CSS) that `scripts/build-frontend.sh` writes under the site root.

use app::backend::AdminBackend;
use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use std::{path::PathBuf, sync::Arc};

/// The name wasm-bindgen gives the bundle (`pkg/oncehook.js`, `pkg/oncehook_bg.wasm`) and the
/// stylesheet (`pkg/oncehook.css`); the build script uses the same one.
const OUTPUT_NAME: &str = "oncehook";
const PKG_DIR: &str = "pkg";

/// Compiled in so that a server started without a built frontend still looks right.
const EMBEDDED_CSS: &str = include_str!("../../style/main.css");

/// What the sign-in gate lets through without a session: the sign-in page and form, and
/// the bundle's files under `site_root/pkg`.
pub fn public_paths(site_root: &std::path::Path) -> crate::http::auth::gate::PublicPaths {
    crate::http::auth::gate::PublicPaths::new(site_root, PKG_DIR, &format!("{OUTPUT_NAME}.css"))
}

/// All dashboard routes, ready to be merged with the webhook routes. It has a fallback
/// (static files, then a rendered 404 page), so it must be the only merged router with one.
///
/// `site_root` holds `pkg/` as written by `scripts/build-frontend.sh`. When it is missing the
/// pages still render on the server and work without JavaScript; they just aren't hydrated.
/// `demo` (`serve --demo`) puts a "demo data" badge in every page's top bar.
pub fn dashboard_router(backend: Arc<dyn AdminBackend>, site_root: PathBuf, demo: bool) -> Router {
    // Built in code, not read from Cargo.toml, so the binary runs from any directory.
    let mut options = LeptosOptions::builder()
        .output_name(OUTPUT_NAME)
        .site_root(site_root.to_string_lossy().into_owned())
        .site_pkg_dir(PKG_DIR)
        .build();
    // Under `cargo leptos watch`: the port of its live-reload socket (Cargo.toml's
    // `[package.metadata.leptos] reload-port`); the shell's AutoReload connects to it.
    if let Some(port) = std::env::var("LEPTOS_RELOAD_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        options.reload_port = port;
    }

    // leptos_routes_with_context runs this for page renders and server-function calls alike.
    let raw_route = get(raw_body).with_state(backend.clone());
    let provide_backend = move || {
        provide_context(backend.clone());
        provide_context(app::api::DemoFlag(demo));
        // The page's language: the user's setting, else Accept-Language, else English.
        let parts = use_context::<axum::http::request::Parts>();
        let setting = parts.as_ref().and_then(|p| {
            p.extensions
                .get::<app::locale::UserLocaleSetting>()
                .and_then(|s| s.0.clone())
        });
        let accept = parts.as_ref().and_then(|p| {
            p.headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
        provide_context(app::locale::RequestLocale(app::locale::resolve(
            setting.as_deref(),
            accept.as_deref(),
        )));
        // The nonce of this response's CSP header (web::security_headers), so the inline
        // hydration scripts carry it.
        if let Some(nonce) = use_context::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::CspNonce>().cloned())
        {
            provide_context(leptos::nonce::Nonce::from_value(nonce.0));
        }
    };

    Router::new()
        .route(&format!("/{PKG_DIR}/{OUTPUT_NAME}.css"), get(stylesheet))
        .route("/events/{id}/raw", raw_route)
        .leptos_routes_with_context(&options, route_list(), provide_backend.clone(), {
            let options = options.clone();
            move || app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context(
            provide_backend,
            app::shell,
        ))
        .with_state(options)
}

/// The event's body exactly as the provider sent it (the signature was computed over these
/// bytes), as a download.
/// The app's routes, generated once per process. Generating them runs the app with
/// leptos_server's process-global "suppress resource loads" flag set, and a resource that
/// a render on any thread first polls meanwhile waits forever (leptos-rs/leptos#4773). The
/// server builds one router at start, before any request; tests build many while others
/// render, and that was the page-render hang between test runtimes.
fn route_list() -> Vec<leptos_axum::AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<leptos_axum::AxumRouteListing>> =
        std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(app::App)).clone()
}

async fn raw_body(
    State(backend): State<Arc<dyn AdminBackend>>,
    principal: Option<axum::Extension<app::backend::Principal>>,
    axum::extract::Path(id): axum::extract::Path<i64>,
) -> Response {
    let read = async {
        let axum::Extension(principal) = principal.ok_or(app::error::AppError::Unauthorized)?;
        let who: app::backend::Viewer = app::backend::authorize(
            backend.as_ref(),
            principal,
            "event.raw_body",
            &format!("event:{id}"),
        )
        .await?;
        backend.raw_body(&who, id).await
    };
    match read.await {
        Ok((provider, event_id, body)) => {
            let safe: String = format!("{provider}-{event_id}")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{safe}.json\""),
                    ),
                    (header::CACHE_CONTROL, "no-store".to_string()),
                ],
                body,
            )
                .into_response()
        }
        Err(error) => (
            axum::http::StatusCode::from_u16(error.status_code())
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
            error.to_string(),
        )
            .into_response(),
    }
}

/// The stylesheet from the site root when it was built there (so CSS edits show without
/// recompiling the server), else the copy compiled into the binary.
async fn stylesheet(State(options): State<LeptosOptions>) -> Response {
    let path = PathBuf::from(&*options.site_root)
        .join(&*options.site_pkg_dir)
        .join(format!("{}.css", options.output_name));
    let css = match tokio::fs::read_to_string(&path).await {
        Ok(css) => css,
        Err(_) => EMBEDDED_CSS.to_string(),
    };
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        css,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::backend::fixed::FixedInbox;
    use app::backend::{InboxEventView, Principal, Role};

    fn one_event() -> Arc<dyn AdminBackend> {
        Arc::new(FixedInbox {
            events: vec![InboxEventView {
                id: 7,
                provider: "stripe".into(),
                event_id: "evt_ssr_check".into(),
                event_type: Some("payment_intent.succeeded".into()),
                status: "applied".into(),
                reason: None,
                order_id: Some("order-1".into()),
                deliveries: 3,
                received_at: "2025-01-02T03:04:05.678Z".into(),
            }],
            fail: None,
        })
    }

    fn broken() -> Arc<dyn AdminBackend> {
        Arc::new(FixedInbox {
            events: vec![],
            fail: Some("connection refused".into()),
        })
    }

    /// Every test here runs on this one runtime, as the server does.
    fn on_one_runtime(test: impl std::future::Future<Output = ()>) {
        static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> =
            std::sync::LazyLock::new(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
            });
        RUNTIME.block_on(test);
    }

    /// Serves the dashboard on a free port with a site root that has no frontend built, the
    /// way `oncehook serve` runs before `scripts/build-frontend.sh`.
    /// Every request comes from a signed-in viewer (the sign-in layers are tested with the
    /// whole server).
    async fn serve(backend: Arc<dyn AdminBackend>) -> String {
        let viewer = Principal {
            user_id: 1,
            name: "vera".into(),
            role: Role::Viewer,
            must_change_password: false,
            source: None,
        };
        let router = dashboard_router(backend, PathBuf::from("/nonexistent/site"), false)
            .layer(axum::Extension(viewer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{addr}")
    }

    async fn get(url: &str) -> (u16, String) {
        let response = reqwest::get(url).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[test]
    fn inbox_is_in_the_first_html_without_a_built_frontend() {
        on_one_runtime(async {
            let base = serve(one_event()).await;
            for path in ["/events", "/inbox"] {
                let (status, html) = get(&format!("{base}{path}")).await;
                assert_eq!(status, 200, "{path}");
                assert!(html.contains("evt_ssr_check"), "{path}: {html}");
                assert!(html.contains("badge badge-ok"), "{path}");
                assert!(html.contains("2025-01-02 03:04:05"), "{path}");
            }
            let (_, older) = get(&format!("{base}/events?before=7")).await;
            assert!(older.contains("No older events."));
        });
    }

    #[test]
    fn concurrent_renders_all_answer() {
        on_one_runtime(async {
            let base = serve(one_event()).await;
            let renders = (0..64).map(|i| {
                let url = format!("{base}/events?n={i}");
                tokio::spawn(async move { get(&url).await })
            });
            for render in futures::future::join_all(renders).await {
                let (status, html) = render.unwrap();
                assert_eq!(status, 200);
                assert!(html.contains("evt_ssr_check"));
            }
        });
    }

    #[test]
    fn backend_failure_is_a_503_page() {
        on_one_runtime(async {
            let base = serve(broken()).await;
            let (status, html) = get(&format!("{base}/events")).await;
            assert_eq!(status, 503);
            assert!(html.contains("connection refused"));
        });
    }

    #[test]
    fn unknown_paths_are_a_404_page() {
        on_one_runtime(async {
            let base = serve(one_event()).await;
            let (status, html) = get(&format!("{base}/no/such/page")).await;
            assert_eq!(status, 404);
            assert!(html.contains("Not found"));
        });
    }

    #[test]
    fn stylesheet_falls_back_to_the_embedded_copy() {
        on_one_runtime(async {
            let base = serve(one_event()).await;
            let (status, css) = get(&format!("{base}/pkg/oncehook.css")).await;
            assert_eq!(status, 200);
            assert_eq!(css, EMBEDDED_CSS);
        });
    }

    /// Dashboards built on several runtimes while others render, as test processes do:
    /// before the route list was generated once per process, a render that first polled
    /// its resource while another router was being built waited forever (leptos#4773);
    /// 4 threads x 20 rounds hung in each of five runs.
    #[test]
    fn renders_answer_while_other_dashboards_are_built() {
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                std::thread::spawn(move || {
                    for round in 0..20 {
                        let runtime = tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(2)
                            .enable_all()
                            .build()
                            .unwrap();
                        runtime.block_on(async {
                            let base = serve(one_event()).await;
                            for i in 0..5 {
                                let url = format!("{base}/events?n={i}");
                                let answer = tokio::time::timeout(
                                    std::time::Duration::from_secs(10),
                                    get(&url),
                                )
                                .await;
                                let (status, _) = answer.unwrap_or_else(|_| {
                                    panic!("thread {thread}, round {round}: no answer in 10 s")
                                });
                                assert_eq!(status, 200);
                            }
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
