//! `oncehook serve`: every part in one process, each switchable, with graceful shutdown
//! (stop accepting, answer in-flight requests, stop claiming, finish in-flight events).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Settings;
use crate::http::admin::StoreBackend;
use crate::http::client_addr::{ClientAddr, TrustedProxies};
use crate::http::{self, webhooks::WebhookState, WebParts};
use crate::pipeline::alerts::Alerter;
use crate::pipeline::ingest::{Ingestor, OpenConnections};
use crate::pipeline::processor::{spawn_pg_listener, Processor, ProcessorParts};
use crate::pipeline::relay::{sinks::Sinks, Relay};
use crate::provider::settings::Providers;
use crate::store::{Backend, Db};

pub struct RunningServer {
    /// The webhook address (`listen`).
    pub addr: SocketAddr,
    /// Where the dashboard is served: `admin_listen` when set apart, else `addr`.
    pub admin_addr: SocketAddr,
    pub db: Db,
    shutdown: CancellationToken,
    http: Vec<JoinHandle<anyhow::Result<()>>>,
    background: Vec<JoinHandle<()>>,
}

impl RunningServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// Graceful stop; returns when every part has finished.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Runs until the process is asked to stop (Ctrl-C / SIGTERM), by handlers installed
    /// before the server started: a stop asked for as soon as it is healthy is graceful too.
    pub async fn run_until(self, stop: StopSignal) -> anyhow::Result<()> {
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            stop.recv().await;
            info!("shutting down: finishing in-flight requests and events");
            token.cancel();
        });
        self.wait().await
    }

    async fn wait(self) -> anyhow::Result<()> {
        let mut result = Ok(());
        for http in self.http {
            let r = http.await.context("HTTP server task")?;
            if result.is_ok() {
                result = r;
            }
        }
        for handle in self.background {
            let _ = handle.await;
        }
        // The workers have stopped: their last counts go in before the pools close.
        if let Err(error) = self.db.rollup().flush(&self.db).await {
            warn!(
                error = format!("{error:#}"),
                "overview counts not written at shutdown"
            );
        }
        self.db.close().await;
        result
    }
}

/// Writes the overview's counts behind, every few seconds (store::rollup).
/// Runs `job` every `every` until shutdown, first after one period.
fn spawn_every<F, Fut>(
    every: std::time::Duration,
    shutdown: CancellationToken,
    mut job: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            job().await;
        }
    })
}

/// Writes the overview's per-minute counts every 5 s.
fn spawn_rollup_writer(db: Db, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    spawn_every(std::time::Duration::from_secs(5), shutdown, move || {
        let db = db.clone();
        async move {
            if let Err(error) = db.rollup().flush(&db).await {
                warn!(
                    error = format!("{error:#}"),
                    "overview counts not written; kept for the next try"
                );
            }
        }
    })
}

/// Vacuums the tables the processor rewrites every `every` (store::vacuum_hot_tables),
/// for a PostgreSQL server whose own autovacuum is off.
fn spawn_hot_table_vacuum(
    db: Db,
    every: std::time::Duration,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    spawn_every(every, shutdown, move || {
        let db = db.clone();
        async move {
            let started = std::time::Instant::now();
            match crate::store::vacuum_hot_tables(&db).await {
                Ok(()) => tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    "vacuumed the processor's hot tables"
                ),
                Err(error) => warn!(error = format!("{error:#}"), "hot-table vacuum failed"),
            }
        }
    })
}

/// Ctrl-C or SIGTERM (a process manager's stop), with the handlers installed at once: until
/// they are, either signal kills the process on the spot.
pub struct StopSignal {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    pub fn install() -> anyhow::Result<StopSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignal {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignal {})
    }

    pub async fn recv(self) {
        #[cfg(unix)]
        {
            let StopSignal {
                mut interrupt,
                mut terminate,
            } = self;
            tokio::select! { _ = interrupt.recv() => {}, _ = terminate.recv() => {} }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Connects, migrates, binds and starts every enabled part.
pub async fn start(settings: Settings) -> anyhow::Result<RunningServer> {
    check_listeners(&settings)?;
    // Before anything is received, so no count is lost to the facade's no-op recorder.
    crate::ops::metrics::handle();
    let db = Db::connect(&settings.database_url).await?;
    db.migrate().await?;
    // Only an instance that processes vacuums: the others rewrite none of these tables.
    let vacuum_every = (settings.processor.enabled && settings.processor.vacuum_secs > 0)
        .then(|| std::time::Duration::from_secs(settings.processor.vacuum_secs));
    let autovacuum_off = crate::store::autovacuum_is_off(&db).await;
    if autovacuum_off {
        tracing::warn!(
            "{}",
            crate::store::autovacuum_warning(vacuum_every.is_some())
        );
    }
    let shutdown = CancellationToken::new();
    let mut background = Vec::new();
    if let (true, Some(every)) = (autovacuum_off, vacuum_every) {
        background.push(spawn_hot_table_vacuum(db.clone(), every, shutdown.clone()));
    }
    // Held before the first heartbeat advertises it (store::instances).
    background.extend(crate::store::instances::hold_liveness(&db, shutdown.clone()).await?);
    // Claims a stopped instance left behind are released before our workers start.
    crate::store::instances::recover_at_start(&db).await?;
    let providers = Arc::new(Providers::build(&settings.providers)?);
    let wake = Arc::new(Notify::new());

    let (alerter, alert_task) = Alerter::start(settings.alerts.clone());
    background.push(crate::pipeline::alerts::watch_commits(
        settings.alerts.clone(),
        db.health().subscribe(),
        shutdown.clone(),
    ));
    let outbox_wake = Arc::new(Notify::new());
    let processor = settings.processor.enabled.then(|| {
        Arc::new(Processor::new(
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
        ))
    });

    // The connections of the listener that takes webhooks, which the receipt writers
    // look at to tell how many more receipts may come (`ingest::OpenConnections`).
    let webhook_connections = OpenConnections::new(settings.server.max_connections);
    let webhooks = if settings.receiver.enabled {
        let (ingestor, writers) = Ingestor::start(
            db.clone(),
            wake.clone(),
            &settings.receiver,
            processor.clone(),
            webhook_connections.clone(),
        );
        background.extend(writers);
        Some(WebhookState {
            providers: providers.clone(),
            ingestor,
            db: db.clone(),
            warnings: Default::default(),
        })
    } else {
        None
    };

    if let Some(processor) = &processor {
        background.extend(processor.clone().spawn_workers(shutdown.clone()));
        if db.backend == Backend::Postgres {
            background.push(spawn_pg_listener(
                db.url().to_string(),
                processor.clone(),
                shutdown.clone(),
            ));
        }
    }

    if settings.outbox.relay.enabled {
        let relay = Arc::new(Relay::new(
            db.clone(),
            Sinks::build(&settings.sinks)?.with_providers(&settings.providers)?,
            settings.outbox.relay.clone(),
            settings.dead_letters.resolve_within_hours,
            alerter.clone(),
            outbox_wake.clone(),
        ));
        background.extend(relay.spawn_workers(shutdown.clone()));
    }
    if settings.retention.enabled {
        background.push(crate::pipeline::retention::spawn_pruner(
            db.clone(),
            settings.retention.clone(),
            shutdown.clone(),
        ));
    }
    // The consistency check (`verify.interval_minutes`), its result on the overview.
    background.extend(crate::verify::job::spawn(
        db.clone(),
        settings.verify_scope(),
        shutdown.clone(),
    ));
    // Reconciliation (`reconcile.interval`) of each provider with an `api_key`.
    crate::http::metrics::set_confirm_within(settings.commands.confirm_within_secs as i64 * 1000);
    let reconciler = crate::reconcile::Reconciler {
        db: db.clone(),
        settings: Arc::new(settings.reconcile_scope()),
        providers: providers.clone(),
        alerter: alerter.clone(),
    };
    background.extend(crate::reconcile::job::spawn(
        reconciler.clone(),
        shutdown.clone(),
    ));
    background.push(spawn_rollup_writer(db.clone(), shutdown.clone()));
    // SQLite: checkpoints off the single writer's commits.
    background.push(crate::store::wal::spawn_checkpointer(
        db.clone(),
        shutdown.clone(),
    ));
    // The instance's heartbeat stops after the workers (it is awaited in order).
    background.push(crate::store::instances::spawn_heartbeat(
        db.clone(),
        shutdown.clone(),
    ));
    // The alert sender stops once every Alerter clone is gone (after the workers).
    drop(alerter);
    background.push(alert_task);

    let (access, sweeper) =
        crate::http::auth::Access::start(&db, &settings.dashboard, shutdown.clone()).await?;
    background.push(sweeper);
    let dashboard = Some((
        Arc::new(
            StoreBackend::new(db.clone(), providers.clone())
                .with_settings(
                    crate::config::view::settings_view(&settings, &providers)?,
                    settings.commands.confirm_within_secs as i64 * 1000,
                )
                .with_reconciler(reconciler, shutdown.clone()),
        ) as Arc<dyn app::backend::AdminBackend>,
        settings.site_root.clone(),
    ));
    let mut http = Vec::new();
    let addr;
    let admin_addr;
    match settings.admin_listen {
        // Webhooks on `listen`, everything else on `admin_listen`.
        Some(admin) => {
            let webhook_router = http::router(WebParts {
                webhooks,
                max_body_bytes: settings.receiver.max_body_bytes,
                db: db.clone(),
                dashboard: None,
                access: None,
                demo: settings.demo,
            });
            let admin_router = http::router(WebParts {
                webhooks: None,
                max_body_bytes: settings.receiver.max_body_bytes,
                db: db.clone(),
                dashboard,
                access: Some(access),
                demo: settings.demo,
            });
            let (a, task) = listen(
                settings.listen,
                webhook_router,
                &settings,
                &shutdown,
                webhook_connections,
            )
            .await?;
            addr = a;
            http.push(task);
            let (a, task) = listen(
                admin,
                admin_router,
                &settings,
                &shutdown,
                OpenConnections::new(settings.server.max_connections),
            )
            .await?;
            admin_addr = a;
            http.push(task);
        }
        None => {
            let router = http::router(WebParts {
                webhooks,
                max_body_bytes: settings.receiver.max_body_bytes,
                db: db.clone(),
                dashboard,
                access: Some(access),
                demo: settings.demo,
            });
            let (a, task) = listen(
                settings.listen,
                router,
                &settings,
                &shutdown,
                webhook_connections,
            )
            .await?;
            addr = a;
            admin_addr = a;
            http.push(task);
        }
    }
    Ok(RunningServer {
        addr,
        admin_addr,
        db,
        shutdown,
        http,
        background,
    })
}

/// Whether the dashboard may be served on `addr`: on a loopback address, or anywhere once
/// its sign-in is safe there (the session cookie only travels over TLS).
pub fn dashboard_exposure_allowed(addr: SocketAddr, sign_in_safe: bool) -> bool {
    sign_in_safe || addr.ip().is_loopback()
}

/// Refuses settings that would put the dashboard on a non-loopback address.
pub fn check_listeners(settings: &Settings) -> anyhow::Result<()> {
    let dashboard = settings.admin_listen.unwrap_or(settings.listen);
    // Every page needs a signed-in session; beyond loopback the session cookie must only
    // travel over TLS (terminated in front of oncehook), which `secure_cookie` declares.
    let sign_in_safe = settings.dashboard.secure_cookie;
    anyhow::ensure!(
        dashboard_exposure_allowed(dashboard, sign_in_safe),
        "the dashboard would be served on {dashboard}, which is not a loopback address, \
         without TLS for its session cookie: set admin_listen to a loopback address (e.g. \
         127.0.0.1:8081) to serve webhooks alone on {}, or serve the dashboard behind TLS \
         and set dashboard.secure_cookie = true",
        settings.listen
    );
    Ok(())
}

/// Binds `addr` and serves `router` there until `shutdown`, with the configured limits and
/// its open connections held in the slots of `connections`.
async fn listen(
    addr: SocketAddr,
    router: axum::Router,
    settings: &Settings,
    shutdown: &CancellationToken,
    connections: OpenConnections,
) -> anyhow::Result<(SocketAddr, JoinHandle<anyhow::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr()?;
    let limits = settings.server.clone();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        serve(listener, router, limits, token, connections).await;
        // The router (and with it every Ingestor clone) is dropped here, which lets the
        // ingest writers drain their queue and stop.
        Ok(())
    });
    Ok((bound, task))
}

/// 503 with `Retry-After` when more requests are in flight than `max_in_flight`.
async fn overloaded(_: tower::BoxError) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1")],
        "overloaded, retry later",
    )
        .into_response()
}

/// Open connections per client address. A connection over its address's allowance is
/// closed as soon as it is accepted; trusted proxies carry many clients and are exempt.
struct AddressSlots {
    per_address: usize,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One connection's place in its address's count, given back when dropped.
struct AddressSlot {
    slots: Arc<AddressSlots>,
    ip: std::net::IpAddr,
}

impl AddressSlots {
    fn new(per_address: usize) -> Arc<AddressSlots> {
        Arc::new(AddressSlots {
            per_address: per_address.max(1),
            open: Default::default(),
        })
    }

    fn take(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock().expect("never poisoned");
        let count = open.entry(ip).or_insert(0);
        if *count >= self.per_address {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            slots: self.clone(),
            ip,
        })
    }

    fn len(&self, ip: std::net::IpAddr) -> usize {
        let open = self.open.lock().expect("never poisoned");
        open.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().expect("never poisoned");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            // Forgotten at zero: the map holds only addresses with open connections.
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The accept loop: at most `server.max_connections` open connections (the slots of
/// `connections`; more wait in the kernel's accept queue) and `max_connections_per_address`
/// from one address, hyper's header-read timer against slow clients, a deadline for the whole body and the request (408), and
/// load shedding (503) around the router; each request carries its [`ClientAddr`]. On
/// shutdown, stop accepting and let open connections finish their requests.
async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: crate::http::settings::ServerSettings,
    shutdown: CancellationToken,
    connections: OpenConnections,
) {
    use axum::error_handling::HandleErrorLayer;
    use axum::http::StatusCode;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use std::time::Duration;
    use tower::ServiceBuilder;
    use tower_http::timeout::{RequestBodyDeadlineLayer, TimeoutLayer};

    let service = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(overloaded))
        .load_shed()
        .concurrency_limit(limits.max_in_flight.max(1))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(limits.request_timeout_ms),
        ))
        // One deadline for the whole body: a timeout per frame would let a client that sends
        // a byte just before each timeout hold its connection until the request timeout.
        .layer(RequestBodyDeadlineLayer::new(Duration::from_millis(
            limits.body_timeout_ms,
        )))
        .service(router);
    let proxies = Arc::new(TrustedProxies::new(
        limits.trusted_proxies.clone(),
        limits.proxy_header,
    ));
    let per_address = AddressSlots::new(limits.max_connections_per_address);
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            permit = connections.slot() => permit,
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, peer),
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let address_slot = if proxies.trusts(peer.ip()) {
            None
        } else {
            match per_address.take(peer.ip()) {
                Some(slot) => Some(slot),
                None => {
                    // Debug only: a flood of these must cost no disk.
                    tracing::debug!(
                        peer = %peer.ip(),
                        open = per_address.len(peer.ip()),
                        "connection closed: its address has max_connections_per_address open"
                    );
                    continue;
                }
            }
        };
        let _ = stream.set_nodelay(true);
        // The peer (axum's ConnectInfo) and the client it speaks for, once per request.
        let proxies = proxies.clone();
        let with_peer = tower::ServiceExt::map_request(
            service.clone(),
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                let client = ClientAddr(proxies.client(peer.ip(), req.headers()));
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req.extensions_mut().insert(client);
                req
            },
        );
        let connection = http1.serve_connection(
            TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(with_peer),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(address_slot);
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::AddressSlots;

    #[test]
    fn each_address_keeps_at_most_its_slots_and_gets_them_back_on_close() {
        let slots = AddressSlots::new(2);
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let b: std::net::IpAddr = "192.0.2.2".parse().unwrap();
        let first = slots.take(a).expect("first");
        let second = slots.take(a).expect("second");
        assert!(slots.take(a).is_none(), "a third from the same address");
        assert!(slots.take(b).is_some(), "another address is not affected");
        drop(first);
        let again = slots
            .take(a)
            .expect("a closed connection gives its slot back");
        assert_eq!(slots.len(a), 2);
        drop(again);
        drop(second);
        assert!(
            slots.open.lock().unwrap().is_empty(),
            "addresses without open connections are forgotten"
        );
    }
}
