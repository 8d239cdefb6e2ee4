//! Session limits per client: how many sessions one client address, and one authenticated
//! identity, may hold at once (`server.max_sessions_per_ip`, by default a tenth of
//! `server.max_sessions`, and `max_sessions_per_identity`; the global cap is
//! `server.max_sessions`, counted by `Shared`).
//!
//! A client address is the peer's IP address, or the one a trusted proxy forwarded (see
//! `perimeter::forwarded`). IPv6 addresses count by their /64 (one host or household gets a
//! whole /64 and can pick any address in it), IPv4-mapped IPv6 addresses as the IPv4 address.
//!
//! A new session takes a [`ConnectionPermit`] before it exists, so a client over its limit
//! costs nothing but the refused request; the session holds the permit for as long as it
//! lives (a resumed WebSocket session keeps its own), and dropping it gives the place back.
//! The counters are maps with one entry per IP or identity that holds a session: they are
//! bounded by the session cap, and an entry is removed when its count falls to zero.

use super::Admission;
use crate::{give_back_place, take_place};
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Which per-client limit a new session is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientLimit {
    /// `server.max_sessions_per_ip` (by default a tenth of `server.max_sessions`).
    Ip,
    /// `server.max_sessions_per_identity`.
    Identity,
}

impl ClientLimit {
    /// How the limit is named to the client.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ip => "IP address",
            Self::Identity => "identity",
        }
    }
}

/// The per-client session counters; see the module docs.
#[derive(Debug, Default)]
pub struct ConnectionLimits {
    per_ip: usize,
    per_identity: usize,
    by_ip: DashMap<IpAddr, usize>,
    by_identity: DashMap<Arc<str>, usize>,
}

/// A session's place within its client's limits; dropping it gives the place back.
#[derive(Debug)]
pub struct ConnectionPermit {
    limits: Arc<ConnectionLimits>,
    ip: Option<IpAddr>,
    identity: Option<Arc<str>>,
}

impl ConnectionLimits {
    /// Limits of `per_ip` and `per_identity` sessions (0: no limit).
    pub fn new(per_ip: usize, per_identity: usize) -> Self {
        Self {
            per_ip,
            per_identity,
            ..Self::default()
        }
    }

    /// Takes a place for a new session of the client admitted as `admission`, or says
    /// which of its limits it is over. Unauthenticated clients count only per IP.
    pub fn acquire(
        self: &Arc<Self>,
        admission: &Admission,
    ) -> Result<Option<ConnectionPermit>, (ClientLimit, usize)> {
        let ip = admission.peer.filter(|_| self.per_ip > 0).map(client_key);
        let identity = (self.per_identity > 0 && admission.identity.is_authenticated())
            .then(|| Arc::<str>::from(admission.identity.principal()));
        if ip.is_none() && identity.is_none() {
            return Ok(None);
        }
        if let Some(ip) = ip {
            if !take_place(&self.by_ip, ip, self.per_ip) {
                return Err((ClientLimit::Ip, self.per_ip));
            }
        }
        if let Some(identity) = &identity {
            if !take_place(&self.by_identity, identity.clone(), self.per_identity) {
                if let Some(ip) = ip {
                    give_back_place(&self.by_ip, &ip);
                }
                return Err((ClientLimit::Identity, self.per_identity));
            }
        }
        Ok(Some(ConnectionPermit {
            limits: self.clone(),
            ip,
            identity,
        }))
    }

    /// Sessions held by `ip` now (for tests and diagnostics).
    #[cfg(any(test, feature = "testing"))]
    pub fn held_by_ip(&self, ip: &IpAddr) -> usize {
        self.by_ip.get(&client_key(*ip)).map_or(0, |count| *count)
    }
}

/// The address a client's sessions (and its anonymous request rate) count under: IPv4 as
/// is, an IPv4-mapped IPv6 address as its IPv4 address, any other IPv6 address as its /64.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                v6.to_bits() & !((1u128 << 64) - 1),
            )),
        },
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        if let Some(ip) = &self.ip {
            give_back_place(&self.limits.by_ip, ip);
        }
        if let Some(identity) = &self.identity {
            give_back_place(&self.limits.by_identity, identity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Identity;

    fn from(ip: [u8; 4], identity: Identity) -> Admission {
        let mut admission = Admission::anonymous();
        admission.peer = Some(IpAddr::from(ip));
        admission.identity = identity;
        admission
    }

    #[test]
    fn each_limit_holds_and_places_come_back() {
        let limits = Arc::new(ConnectionLimits::new(2, 1));
        let alice = Identity::authenticated("alice", vec![]);
        let first = limits
            .acquire(&from([10, 0, 0, 1], alice.clone()))
            .expect("first");
        let refused = limits.acquire(&from([10, 0, 0, 2], alice.clone()));
        assert_eq!(refused.err(), Some((ClientLimit::Identity, 1)));
        assert_eq!(
            limits.held_by_ip(&IpAddr::from([10, 0, 0, 2])),
            0,
            "a refused session gives its IP place back"
        );
        let anon = limits
            .acquire(&from([10, 0, 0, 1], Identity::anonymous()))
            .expect("second from the IP");
        let third = limits.acquire(&from([10, 0, 0, 1], Identity::anonymous()));
        assert_eq!(third.err(), Some((ClientLimit::Ip, 2)));
        drop(first);
        drop(anon);
        assert_eq!(limits.held_by_ip(&IpAddr::from([10, 0, 0, 1])), 0);
        assert!(limits.by_ip.is_empty() && limits.by_identity.is_empty());
        assert!(limits.acquire(&from([10, 0, 0, 1], alice)).is_ok());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let limits = Arc::new(ConnectionLimits::new(1, 0));
        let at = |ip: &str| {
            let mut admission = Admission::anonymous();
            admission.peer = Some(ip.parse().expect("ip"));
            admission
        };
        let _first = limits.acquire(&at("2001:db8:1:2::1")).expect("first");
        assert_eq!(
            limits.acquire(&at("2001:db8:1:2:ffff::9")).err(),
            Some((ClientLimit::Ip, 1)),
            "another address of the same /64"
        );
        assert!(
            limits.acquire(&at("2001:db8:1:3::1")).is_ok(),
            "another /64"
        );
        let _v4 = limits.acquire(&at("10.0.0.9")).expect("ipv4");
        assert_eq!(
            limits.acquire(&at("::ffff:10.0.0.9")).err(),
            Some((ClientLimit::Ip, 1)),
            "the same IPv4 address, mapped"
        );
    }
}
