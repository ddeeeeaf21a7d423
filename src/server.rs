//! `oncehook serve`: every part in one process, each switchable, with graceful shutdown
//! (stop accepting, answer in-flight requests, stop claiming, finish in-flight events).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::admin::StoreBackend;
use crate::alerts::Alerter;
use crate::config::{Providers, Settings};
use crate::ingest::Ingestor;
use crate::processor::{spawn_pg_listener, Processor, ProcessorParts};
use crate::relay::{sinks::Sinks, Relay};
use crate::store::{Backend, Db};
use crate::web::{self, webhooks::WebhookState, WebParts};

pub struct RunningServer {
    pub addr: SocketAddr,
    pub db: Db,
    shutdown: CancellationToken,
    http: JoinHandle<anyhow::Result<()>>,
    background: Vec<JoinHandle<()>>,
}

impl RunningServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful stop; returns when every part has finished.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Runs until the process is asked to stop (Ctrl-C / SIGTERM).
    pub async fn run_until_signal(self) -> anyhow::Result<()> {
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            info!("shutting down: finishing in-flight requests and events");
            token.cancel();
        });
        self.wait().await
    }

    async fn wait(self) -> anyhow::Result<()> {
        let result = self.http.await.context("HTTP server task")?;
        for handle in self.background {
            let _ = handle.await;
        }
        self.db.close().await;
        result
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Connects, migrates, binds and starts every enabled part.
pub async fn start(settings: Settings) -> anyhow::Result<RunningServer> {
    let db = Db::connect(&settings.database_url).await?;
    db.migrate().await?;
    let providers = Arc::new(Providers::build(&settings.providers)?);
    let wake = Arc::new(Notify::new());
    let shutdown = CancellationToken::new();
    let mut background = Vec::new();

    let webhooks = if settings.receiver.enabled {
        let (ingestor, writers) = Ingestor::start(db.clone(), wake.clone(), &settings.receiver);
        background.extend(writers);
        Some(WebhookState {
            providers: providers.clone(),
            ingestor,
        })
    } else {
        None
    };

    let (alerter, alert_task) = Alerter::start(settings.alerts.clone());
    let outbox_wake = Arc::new(Notify::new());
    if settings.processor.enabled {
        let processor = Arc::new(Processor::new(
            db.clone(),
            ProcessorParts {
                providers: providers.clone(),
                settings: settings.processor.clone(),
                outbox: settings.outbox.clone(),
                resolve_within_hours: settings.dead_letters.resolve_within_hours,
                alerter: alerter.clone(),
                wake: wake.clone(),
                outbox_wake: outbox_wake.clone(),
            },
        ));
        background.extend(processor.spawn_workers(shutdown.clone()));
        if db.backend == Backend::Postgres {
            background.push(spawn_pg_listener(
                db.url().to_string(),
                wake.clone(),
                shutdown.clone(),
            ));
        }
    }

    if settings.outbox.relay.enabled {
        let relay = Arc::new(Relay::new(
            db.clone(),
            Sinks::build(&settings.sinks)?,
            settings.outbox.relay.clone(),
            settings.dead_letters.resolve_within_hours,
            alerter.clone(),
            outbox_wake.clone(),
        ));
        background.extend(relay.spawn_workers(shutdown.clone()));
    }
    if settings.retention.enabled {
        background.push(crate::retention::spawn_pruner(
            db.clone(),
            settings.retention.clone(),
            shutdown.clone(),
        ));
    }
    // The alert sender stops once every Alerter clone is gone (after the workers).
    drop(alerter);
    background.push(alert_task);

    let (access, sweeper) =
        crate::auth::Access::start(&db, &settings.dashboard, shutdown.clone()).await?;
    background.push(sweeper);
    let router = web::router(WebParts {
        webhooks,
        max_body_bytes: settings.receiver.max_body_bytes,
        db: db.clone(),
        dashboard: Some((
            Arc::new(StoreBackend {
                db: db.clone(),
                providers: providers.clone(),
            }),
            settings.site_root.clone(),
        )),
        access: Some(access),
    });
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("binding {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let token = shutdown.clone();
    let http = tokio::spawn(async move {
        // With the client address: sign-in limits and the audit log need it.
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { token.cancelled().await })
        .await
        .context("HTTP server")
        // The router (and with it every Ingestor clone) is dropped here, which lets the
        // ingest writers drain their queue and stop.
    });
    Ok(RunningServer {
        addr,
        db,
        shutdown,
        http,
        background,
    })
}
