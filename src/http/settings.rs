//! The HTTP server's own settings (`[server]`): limits, timeouts, trusted proxies.

use serde::{Deserialize, Serialize};

/// Limits and timeouts of the HTTP server (both listeners).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// A client must send its request headers within this (slowloris guard).
    pub header_read_timeout_ms: u64,
    /// A request body must arrive within this.
    pub body_timeout_ms: u64,
    /// A whole request, body and answer included, must finish within this.
    pub request_timeout_ms: u64,
    /// Open connections per listener; more wait in the accept queue.
    pub max_connections: usize,
    /// Requests handled at once per listener; beyond that 503 with `Retry-After`. At most
    /// `max_connections` (each connection carries one request at a time, so a larger limit
    /// is never reached); below it, so that load is shed while connections remain.
    pub max_in_flight: usize,
    /// Open connections per client address (the TCP peer); more are closed at once, so one
    /// address dribbling slow bodies cannot take every slot. Trusted proxies are exempt.
    pub max_connections_per_address: usize,
    /// Peers whose `proxy_header` names the client (CIDR blocks). Empty: the TCP peer is
    /// the client, whatever the request's headers say.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Which header a trusted proxy reports the client in.
    pub proxy_header: ProxyHeader,
}

/// The header a trusted proxy names the client in. Only one is read: a proxy that sets one
/// passes the other through from the client unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx, HAProxy, Caddy, Traefik, cloud LBs).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

impl ServerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_in_flight <= self.max_connections,
            "server.max_in_flight ({}) must not exceed server.max_connections ({}): each \
             connection carries one request at a time, so that many requests are never in \
             flight and load is never shed",
            self.max_in_flight,
            self.max_connections
        );
        Ok(())
    }
}
