//! The client's address behind a trusted proxy (`server.trusted_proxies`,
//! `server.forwarded_header`).
//!
//! A connection from a trusted proxy carries the client's address in a header the proxy
//! wrote: `X-Forwarded-For` (each proxy appends the address it received the request from) or
//! `Forwarded` (RFC 7239, its `for=` parameters). Only the entries the trusted proxies added
//! can be believed: the header may arrive with entries the client wrote itself. So the
//! entries are read from the right, skipping those that are trusted proxies themselves (a
//! chain of proxies), and the first one that is not is the client. An entry that is not an
//! address (`unknown`, an obfuscated identifier, garbage) ends the walk: the client is then
//! the last hop known, the proxy that wrote it, so a client can never choose the address it
//! counts as. A connection from any other peer is its own address, whatever it sends.

use crate::config::{ForwardedHeader, IpNet, ServerSettings};
use actix_web::http::header::HeaderMap;
use std::net::{IpAddr, SocketAddr};

/// The trusted proxies and the header they write; see the module docs.
#[derive(Debug, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ForwardedHeader,
}

impl TrustedProxies {
    /// The proxies of `server.trusted_proxies` (entries that do not parse were refused by
    /// `Settings::validate`, and are skipped here).
    pub fn new(server: &ServerSettings) -> Self {
        Self {
            nets: server
                .trusted_proxies
                .iter()
                .filter_map(|net| IpNet::parse(net))
                .collect(),
            header: server.forwarded_header,
        }
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|net| net.contains(ip))
    }

    /// Whether a connection from `peer` is from a trusted proxy (whose forwarded headers
    /// are believed).
    pub fn trusts_peer(&self, peer: Option<IpAddr>) -> bool {
        peer.is_some_and(|peer| self.trusts(peer))
    }

    /// The client's address for a connection from `peer` carrying `headers`.
    pub fn client_address(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?;
        if !self.trusts(client) {
            return Some(client);
        }
        let (name, parse): (_, fn(&str) -> Option<IpAddr>) = match self.header {
            ForwardedHeader::XForwardedFor => ("x-forwarded-for", address),
            ForwardedHeader::Forwarded => ("forwarded", forwarded_for),
        };
        // Every line of the header, in order, is one list (RFC 9110 §5.3). Read as bytes,
        // entry by entry: a byte past ASCII (obs-text) that a client wrote in its own entry
        // makes that entry unreadable, not the line, whose right end its proxy appended.
        let lines: Vec<&[u8]> = headers
            .get_all(name)
            .map(|value| value.as_bytes())
            .collect();
        let entries = lines
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(|byte| *byte == b','));
        for entry in entries {
            match std::str::from_utf8(entry).ok().and_then(parse) {
                Some(hop) => {
                    client = hop;
                    if !self.trusts(hop) {
                        break;
                    }
                }
                None => break,
            }
        }
        Some(client)
    }

    /// The scheme and host the last trusted proxy says the request reached it by, each when
    /// it says one that reads (for a connection from a trusted proxy; the caller checks).
    /// Only the chosen header's family is read: `X-Forwarded-Proto` and `X-Forwarded-Host`
    /// with `x-forwarded-for`, `Forwarded`'s `proto=` and `host=` with `forwarded`; and only
    /// the rightmost value, the one the proxy nearest the server wrote (a client's own
    /// comes before it). A scheme other than `http` or `https`, or a host not of the form
    /// `host[:port]`, is none. (actix's `connection_info` read `Forwarded` whatever the
    /// header chosen, and its leftmost value: a client's own.)
    pub fn forwarded_reach(&self, headers: &HeaderMap) -> (Option<&'static str>, Option<String>) {
        let rightmost = |name: &str| {
            headers
                .get_all(name)
                .last()
                .and_then(|line| std::str::from_utf8(line.as_bytes()).ok())
                .and_then(|line| line.rsplit(',').next())
                .map(|value| value.trim().trim_matches('"').to_ascii_lowercase())
        };
        let (proto, host) = match self.header {
            ForwardedHeader::XForwardedFor => (
                rightmost("x-forwarded-proto"),
                rightmost("x-forwarded-host"),
            ),
            ForwardedHeader::Forwarded => {
                let element = rightmost("forwarded").unwrap_or_default();
                let parameter = |wanted: &str| {
                    element.split(';').find_map(|pair| {
                        let (name, value) = pair.split_once('=')?;
                        (name.trim() == wanted).then(|| value.trim().trim_matches('"').to_owned())
                    })
                };
                (parameter("proto"), parameter("host"))
            }
        };
        let scheme = match proto.as_deref() {
            Some("http") => Some("http"),
            Some("https") => Some("https"),
            _ => None,
        };
        let host = host.filter(|host| super::origin::authority_name(host).is_some());
        (scheme, host)
    }
}

/// An address as a proxy writes one: `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`, with or
/// without a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
fn address(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    text.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// The `for=` address of one element of a `Forwarded` list (`for=192.0.2.60;proto=http`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            address(value)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn proxies(nets: &[&str], header: ForwardedHeader) -> TrustedProxies {
        let server = ServerSettings {
            trusted_proxies: nets.iter().map(|n| (*n).to_owned()).collect(),
            forwarded_header: header,
            ..ServerSettings::default()
        };
        TrustedProxies::new(&server)
    }

    fn headers(name: &'static str, lines: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_bytes(line.as_bytes()).expect("value"),
            );
        }
        map
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("ip"))
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_past_trusted_hops() {
        let trusted = proxies(&["10.0.0.0/8", "127.0.0.1"], ForwardedHeader::XForwardedFor);
        let client = |peer: &str, lines: &[&str]| {
            trusted.client_address(ip(peer), &headers("x-forwarded-for", lines))
        };
        assert_eq!(client("127.0.0.1", &["203.0.113.7"]), ip("203.0.113.7"));
        // The client wrote the first entry; the proxy appended the address it saw.
        assert_eq!(
            client("127.0.0.1", &["198.51.100.1, 203.0.113.7"]),
            ip("203.0.113.7")
        );
        // A chain of trusted proxies, across two header lines.
        assert_eq!(
            client("127.0.0.1", &["198.51.100.1, 203.0.113.7", "10.1.2.3"]),
            ip("203.0.113.7")
        );
        // Everything trusted: the leftmost.
        assert_eq!(client("127.0.0.1", &["10.9.9.9, 10.1.2.3"]), ip("10.9.9.9"));
        // No header, or an entry that is not an address: the last hop known.
        assert_eq!(client("127.0.0.1", &[]), ip("127.0.0.1"));
        assert_eq!(client("127.0.0.1", &["unknown"]), ip("127.0.0.1"));
        assert_eq!(
            client("127.0.0.1", &["203.0.113.7, garbage, 10.1.2.3"]),
            ip("10.1.2.3")
        );
        // Ports and brackets.
        assert_eq!(
            client("127.0.0.1", &["[2001:db8::1]:4711"]),
            ip("2001:db8::1")
        );
        // A byte past ASCII in the client's own entry spoils that entry only, not the one
        // the proxy appended on the same line (the line was read as none: the proxy's
        // address, another share of every per-address limit).
        assert_eq!(
            client("127.0.0.1", &["198.51.100.1 \u{e9}, 203.0.113.7"]),
            ip("203.0.113.7")
        );
        assert_eq!(client("127.0.0.1", &["\u{e9}"]), ip("127.0.0.1"));
        // A peer that is not trusted is its own address, whatever it sends.
        assert_eq!(client("192.0.2.9", &["203.0.113.7"]), ip("192.0.2.9"));
    }

    #[test]
    fn forwarded_is_read_by_its_for_parameters_and_only_when_chosen() {
        let trusted = proxies(&["127.0.0.0/8", "::1"], ForwardedHeader::Forwarded);
        let forwarded = headers(
            "forwarded",
            &[r#"for=198.51.100.1;proto=https, For="[2001:db8:cafe::17]:4711";by=10.0.0.1"#],
        );
        assert_eq!(
            trusted.client_address(ip("::1"), &forwarded),
            ip("2001:db8:cafe::17")
        );
        // X-Forwarded-For is not read when Forwarded is the header chosen.
        let other = headers("x-forwarded-for", &["203.0.113.7"]);
        assert_eq!(
            trusted.client_address(ip("127.0.0.1"), &other),
            ip("127.0.0.1")
        );
        // IPv4-mapped peers are matched as IPv4.
        let mapped = headers("forwarded", &["for=203.0.113.8"]);
        assert_eq!(
            trusted.client_address(ip("::ffff:127.0.0.1"), &mapped),
            ip("203.0.113.8")
        );
    }

    #[test]
    fn a_forwarded_scheme_and_host_are_the_chosen_families_rightmost() {
        let map = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(value).expect("value"),
                );
            }
            map
        };
        let xff = proxies(&["127.0.0.1"], ForwardedHeader::XForwardedFor);
        let reach = |pairs: &[(&'static str, &str)]| xff.forwarded_reach(&map(pairs));
        assert_eq!(
            reach(&[
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "mcp.example")
            ]),
            (Some("https"), Some("mcp.example".to_owned()))
        );
        // The proxy's value is the rightmost; the client's own comes before it.
        assert_eq!(
            reach(&[
                ("x-forwarded-host", "evil.example, mcp.example:8443"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-proto", "http"),
            ]),
            (Some("http"), Some("mcp.example:8443".to_owned()))
        );
        // The other family is not read; what does not read is none.
        assert_eq!(
            reach(&[("forwarded", "host=evil.example;proto=https")]),
            (None, None)
        );
        assert_eq!(
            reach(&[
                ("x-forwarded-proto", "gopher"),
                ("x-forwarded-host", "evil.example/x?"),
            ]),
            (None, None)
        );
        assert_eq!(reach(&[("x-forwarded-host", "a:1@evil.example")]).1, None);
        let forwarded = proxies(&["127.0.0.1"], ForwardedHeader::Forwarded);
        assert_eq!(
            forwarded.forwarded_reach(&map(&[
                (
                    "forwarded",
                    "host=evil.example;proto=http, for=1.2.3.4;host=\"mcp.example\";proto=https"
                ),
                ("x-forwarded-host", "other.example"),
            ])),
            (Some("https"), Some("mcp.example".to_owned()))
        );
    }

    #[test]
    fn no_trusted_proxies_reads_no_header() {
        let none = TrustedProxies::default();
        let spoofed = headers("x-forwarded-for", &["203.0.113.7"]);
        assert_eq!(
            none.client_address(ip("127.0.0.1"), &spoofed),
            ip("127.0.0.1")
        );
    }
}
