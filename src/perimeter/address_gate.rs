//! Places per client address, each taken as a connection passes and given back when it is
//! done with: the gate of two limits.
//!
//! - Open connections (`server.max_connections_per_ip`), passed as a connection is accepted
//!   (the public listener is built in `server::listener`), its place held by the
//!   connection's stream until it ends. Every connection is a file descriptor: one client
//!   holding idle ones (headers sent, a body that never comes) could take them all, and
//!   `accept` failed for every other client. A connection over it is closed at once, before
//!   anything it sent is read (with TLS, before its handshake).
//! - TLS handshakes in progress (`server.max_handshakes_per_ip`), passed next, before a TLS
//!   connection's handshake starts. actix-tls lets each worker run a fixed number of
//!   handshakes at once (256) and gives each up to `server.tls_handshake_timeout_ms`. A
//!   connection that never sends a ClientHello holds one of those places for the whole
//!   timeout, so one client that keeps a few thousand idle connections open made every real
//!   client wait for a place, or time out. With the gate, one address holds at most
//!   `max_handshakes_per_ip` places; a connection over it is closed before it takes one. The
//!   place is given back when the handshake ends (completed, failed or timed out), not when
//!   the connection does.
//!
//! The address is the TCP peer's (nothing forwarded is known yet), counted as the session
//! limits count it ([`client_key`]: IPv4 as is, IPv6 by its /64). Peers in
//! `server.trusted_proxies` are not limited: a proxy opens every client's connection from
//! its own address. The map holds one entry per address holding a place.

use super::connections::client_key;
use super::forwarded::TrustedProxies;
use crate::config::ServerSettings;
use crate::{give_back_place, take_place};
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Places per client address; see the module docs.
#[derive(Debug, Default)]
pub struct AddressGate {
    per_ip: usize,
    proxies: TrustedProxies,
    by_ip: DashMap<IpAddr, usize>,
}

/// A place within its address's limit; dropping it gives the place back.
#[derive(Debug)]
pub struct AddressPlace {
    gate: Arc<AddressGate>,
    ip: IpAddr,
}

impl AddressGate {
    /// A gate of `per_ip` places per address (0: none), trusting `server.trusted_proxies`.
    pub fn new(per_ip: usize, server: &ServerSettings) -> Self {
        Self {
            per_ip,
            proxies: TrustedProxies::new(server),
            by_ip: DashMap::new(),
        }
    }

    /// Takes a place for `peer` (`Ok(None)`: not limited), or `Err` with the limit when its
    /// address holds that many already.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Option<AddressPlace>, usize> {
        if self.per_ip == 0 || self.proxies.trusts_peer(Some(peer)) {
            return Ok(None);
        }
        let ip = client_key(peer);
        if !take_place(&self.by_ip, ip, self.per_ip) {
            return Err(self.per_ip);
        }
        Ok(Some(AddressPlace {
            gate: self.clone(),
            ip,
        }))
    }

    /// The places `ip`'s address holds now (for tests and diagnostics).
    #[cfg(any(test, feature = "testing"))]
    pub fn held(&self, ip: IpAddr) -> usize {
        self.by_ip.get(&client_key(ip)).map_or(0, |count| *count)
    }
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        give_back_place(&self.gate.by_ip, &self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(per_ip: usize, trusted: &[&str]) -> Arc<AddressGate> {
        let server = ServerSettings {
            trusted_proxies: trusted.iter().map(|net| net.to_string()).collect(),
            ..ServerSettings::default()
        };
        Arc::new(AddressGate::new(per_ip, &server))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn an_address_holds_at_most_its_places_and_gets_them_back() {
        let gate = gate(2, &[]);
        let first = gate.admit(ip("10.0.0.1")).expect("first");
        let second = gate.admit(ip("10.0.0.1")).expect("second");
        assert_eq!(gate.admit(ip("10.0.0.1")).err(), Some(2));
        assert!(
            gate.admit(ip("10.0.0.2"))
                .expect("another address")
                .is_some(),
            "other addresses are not affected"
        );
        assert_eq!(
            gate.admit(ip("::ffff:10.0.0.1")).err(),
            Some(2),
            "the same IPv4 address, mapped"
        );
        drop(first);
        assert_eq!(gate.held(ip("10.0.0.1")), 1);
        let third = gate.admit(ip("10.0.0.1")).expect("a place came back");
        drop((second, third));
        assert!(gate.by_ip.is_empty(), "no entry outlives its places");
    }

    #[test]
    fn no_limit_at_zero_nor_for_trusted_proxies() {
        let unlimited = gate(0, &[]);
        assert!((0..100).all(|_| matches!(unlimited.admit(ip("10.0.0.1")), Ok(None))));
        let behind_proxy = gate(1, &["10.1.0.0/16"]);
        assert!((0..100).all(|_| matches!(behind_proxy.admit(ip("10.1.2.3")), Ok(None))));
        let _held = behind_proxy.admit(ip("2001:db8:1:2::1")).expect("first");
        assert_eq!(
            behind_proxy.admit(ip("2001:db8:1:2::9")).err(),
            Some(1),
            "another address of the same /64"
        );
    }
}
