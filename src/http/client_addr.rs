//! Who the client is. Beyond loopback the dashboard sits behind a TLS proxy, so the TCP
//! peer is the proxy for everyone; the proxy names the real client in a header. That header
//! is believed only when the peer is a configured trusted proxy (`server.trusted_proxies`):
//! anyone else can write any address into it.
//!
//! The address is computed once per request where the peer is known (the accept loop in
//! `server`) and travels in the request's extensions as [`ClientAddr`]; the sign-in limits,
//! the audit log and API tokens read it from there.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

use crate::http::settings::ProxyHeader;

/// The client's address: the TCP peer, or the client a trusted proxy reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The trusted proxies and the header they report the client in.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ProxyHeader,
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>, header: ProxyHeader) -> TrustedProxies {
        TrustedProxies { nets, header }
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client behind `peer`. The header's hops are read from the right (each proxy
    /// appends the address it saw): the first one that is not a trusted proxy is the
    /// client; whatever stands left of it was written by the client and proves nothing. An
    /// unreadable hop stops the walk at the last trusted proxy before it.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let hops: Vec<Option<IpAddr>> = match self.header {
            ProxyHeader::XForwardedFor => header_items(headers, "x-forwarded-for")
                .map(parse_node)
                .collect(),
            ProxyHeader::Forwarded => header_items(headers, "forwarded")
                .map(forwarded_for)
                .collect(),
        };
        for hop in hops.into_iter().rev() {
            let Some(hop) = hop else { return client };
            client = hop.to_canonical();
            if !self.trusts(client) {
                return client;
            }
        }
        client
    }
}

/// The comma-separated items of every instance of `name`, in order (a header sent several
/// times is one list, RFC 9110 §5.3). A value that is not text is one unreadable item.
fn header_items<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(','))
        .map(str::trim)
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]:4711`, `[2001:db8::1]`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// The `for=` of one `Forwarded` element (`for=192.0.2.60;proto=https;by=...`); `None`
/// without one, or for `unknown` and obfuscated identifiers (RFC 7239 §6).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        parse_node(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(nets: &[&str], header: ProxyHeader) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()).collect(), header)
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_the_headers_say() {
        let none = TrustedProxies::default();
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("forwarded", "for=1.2.3.4"),
        ]);
        assert_eq!(none.client(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        let some = proxies(&["10.0.0.0/8"], ProxyHeader::XForwardedFor);
        assert_eq!(some.client(ip("192.0.2.1"), &h), ip("192.0.2.1"));
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_past_trusted_proxies() {
        let p = proxies(&["10.0.0.0/8", "fd00::/8"], ProxyHeader::XForwardedFor);
        let peer = ip("10.0.0.1");
        let client = |pairs: &[(&'static str, &'static str)]| p.client(peer, &headers(pairs));
        assert_eq!(
            client(&[("x-forwarded-for", "203.0.113.7")]),
            ip("203.0.113.7")
        );
        // The client wrote the left part; the proxies appended the rest.
        assert_eq!(
            client(&[("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.1.2.3")]),
            ip("203.0.113.7")
        );
        // Two instances of the header are one list.
        assert_eq!(
            client(&[
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-for", "203.0.113.8")
            ]),
            ip("203.0.113.8")
        );
        assert_eq!(
            client(&[("x-forwarded-for", "[2001:db8::5]:4711")]),
            ip("2001:db8::5")
        );
        assert_eq!(
            client(&[("x-forwarded-for", "192.0.2.9:55000")]),
            ip("192.0.2.9")
        );
        // No header: the proxy itself is the client. Only trusted hops: the leftmost.
        assert_eq!(client(&[]), peer);
        assert_eq!(
            client(&[("x-forwarded-for", "10.9.9.9, fd00::1")]),
            ip("10.9.9.9")
        );
        // Garbage right of a trusted hop: stop at that hop, believe nothing left of it.
        assert_eq!(
            client(&[("x-forwarded-for", "203.0.113.7, not-an-ip")]),
            peer
        );
        assert_eq!(
            client(&[("x-forwarded-for", "203.0.113.7, garbage, 10.1.1.1")]),
            ip("10.1.1.1")
        );
        // In this mode `Forwarded` is the client's own word.
        assert_eq!(client(&[("forwarded", "for=203.0.113.7")]), peer);
    }

    #[test]
    fn forwarded_elements_name_the_client_in_for() {
        let p = proxies(&["10.0.0.0/8"], ProxyHeader::Forwarded);
        let peer = ip("10.0.0.1");
        let client = |value: &'static str| p.client(peer, &headers(&[("forwarded", value)]));
        assert_eq!(
            client("for=192.0.2.60;proto=http;by=203.0.113.43"),
            ip("192.0.2.60")
        );
        assert_eq!(
            client("for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\""),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            client("proto=https;for=\"192.0.2.61:80\""),
            ip("192.0.2.61")
        );
        assert_eq!(client("for=unknown"), peer);
        assert_eq!(client("for=_hidden, for=10.2.2.2"), ip("10.2.2.2"));
        let xff = headers(&[("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(p.client(peer, &xff), peer, "X-Forwarded-For is ignored");
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_blocks() {
        let p = proxies(&["127.0.0.1/32"], ProxyHeader::XForwardedFor);
        let mapped = ip("::ffff:127.0.0.1");
        assert!(p.trusts(mapped));
        let h = headers(&[("x-forwarded-for", "::ffff:203.0.113.7")]);
        assert_eq!(p.client(mapped, &h), ip("203.0.113.7"));
    }
}
