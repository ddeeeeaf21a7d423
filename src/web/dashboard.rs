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

/// All dashboard routes, ready to be merged with the webhook routes. It has a fallback
/// (static files, then a rendered 404 page), so it must be the only merged router with one.
///
/// `site_root` holds `pkg/` as written by `scripts/build-frontend.sh`. When it is missing the
/// pages still render on the server and work without JavaScript; they just aren't hydrated.
pub fn dashboard_router(backend: Arc<dyn AdminBackend>, site_root: PathBuf) -> Router {
    // Built in code, not read from Cargo.toml, so the binary runs from any directory.
    let options = LeptosOptions::builder()
        .output_name(OUTPUT_NAME)
        .site_root(site_root.to_string_lossy().into_owned())
        .site_pkg_dir(PKG_DIR)
        .build();

    // leptos_routes_with_context runs this for page renders and server-function calls alike.
    let provide_backend = move || provide_context(backend.clone());

    Router::new()
        .route(&format!("/{PKG_DIR}/{OUTPUT_NAME}.css"), get(stylesheet))
        .leptos_routes_with_context(
            &options,
            generate_route_list(app::App),
            provide_backend.clone(),
            {
                let options = options.clone();
                move || app::shell(options.clone())
            },
        )
        .fallback(leptos_axum::file_and_error_handler_with_context(
            provide_backend,
            app::shell,
        ))
        .with_state(options)
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
