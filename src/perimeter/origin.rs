//! Origin and Host checks: the browser-facing half of the perimeter.
//!
//! A web page the user happens to open can make the browser connect to a server on the
//! user's own machine: a cross-site WebSocket upgrade, or a `fetch` after DNS rebinding. The
//! browser always says where the page came from (`Origin`) and which name it resolved
//! (`Host`), so both are checked on every request to the MCP endpoint, before any session
//! exists. Clients that are not browsers send no `Origin` and are not affected.
//!
//! - `Origin`, when present, must be in `http.allowed_origins`; with no list configured,
//!   only an origin naming the request's own host passes, or, when the server is bound to
//!   loopback, a loopback origin (`localhost`, `127.0.0.1`, `[::1]`, any port).
//! - `Host` must be in `http.allowed_hosts`; with no list configured and a loopback bind,
//!   it must be a loopback name (DNS rebinding points a foreign name at 127.0.0.1).
//!
//! Both are read strictly as `host[:port]` ([`authority_name`]): a `Host` of another form
//! (`localhost:80@evil.example`, a path, a second colon) is 400 (RFC 9112 §3.2), an `Origin`
//! of another form, or two `Origin` headers, 403. Leniently read, such a `Host` passed the
//! check by its first part and was named back in URLs whose host is another
//! (`http://localhost:80@evil.example/mcp`).

use super::Refusal;
use crate::config::HttpSettings;
use actix_web::http::header::{HeaderMap, HOST, ORIGIN};
use std::net::SocketAddr;

/// The Origin/Host policy, built once from the settings.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    /// Exact origins (`scheme://host[:port]`, lower case); `None` = the default rule.
    origins: Option<Vec<String>>,
    /// Allowed `Host` values, lower case: a name (any port) or `name:port`.
    hosts: Option<Vec<String>>,
    /// Whether the listener is bound to a loopback address.
    loopback_bind: bool,
}

impl OriginPolicy {
    /// The policy for a server listening on `listen`.
    pub fn new(http: &HttpSettings, listen: SocketAddr) -> Self {
        let lower = |list: &Vec<String>| -> Option<Vec<String>> {
            (!list.is_empty()).then(|| list.iter().map(|s| s.to_ascii_lowercase()).collect())
        };
        Self {
            origins: lower(&http.allowed_origins),
            hosts: lower(&http.allowed_hosts),
            loopback_bind: listen.ip().is_loopback(),
        }
    }

    /// Checks the `Host` and `Origin` headers of a request.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = self.checked_host(headers)?;
        let mut origins = headers.get_all(ORIGIN);
        let Some(origin) = origins.next() else {
            return Ok(());
        };
        // Which of two a browser meant is not for the server to guess (browsers send one).
        if origins.next().is_some() {
            return Err(Refusal::ForbiddenOrigin);
        }
        let origin = origin
            .to_str()
            .map_err(|_| Refusal::ForbiddenOrigin)?
            .to_ascii_lowercase();
        if self.origin_allowed(&origin, host.as_deref()) {
            Ok(())
        } else {
            Err(Refusal::ForbiddenOrigin)
        }
    }

    /// Checks the `Host` header alone (of a document served to any origin, such as the
    /// resource metadata, which names the server by it): its value, lower-cased.
    pub fn checked_host(&self, headers: &HeaderMap) -> Result<Option<String>, Refusal> {
        let host = headers
            .get(HOST)
            .map(|h| h.to_str().map(str::to_ascii_lowercase));
        let host = match host {
            Some(Ok(host)) => Some(host),
            // Not visible ASCII: not `host[:port]` either.
            Some(Err(_)) => return Err(Refusal::BadHost),
            None => None,
        };
        if let Some(host) = &host {
            self.check_host(host)?;
        }
        Ok(host)
    }

    fn check_host(&self, host: &str) -> Result<(), Refusal> {
        let name = authority_name(host).ok_or(Refusal::BadHost)?;
        let allowed = match &self.hosts {
            Some(list) => list.iter().any(|entry| entry == host || entry == name),
            None => !self.loopback_bind || is_loopback_name(name),
        };
        if allowed {
            Ok(())
        } else {
            Err(Refusal::ForbiddenHost)
        }
    }

    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if let Some(list) = &self.origins {
            return list.iter().any(|entry| entry == "*" || entry == origin);
        }
        // `null` (sandboxed frames, file:// pages) names no host: never by default.
        let Some(authority) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        let Some(name) = authority_name(authority) else {
            return false;
        };
        host == Some(authority) || (self.loopback_bind && is_loopback_name(name))
    }
}

/// The name part of an authority read strictly as `host[:port]` (RFC 9110 §7.2, `uri-host
/// [":" port]`): a name of ASCII letters, digits, `-`, `.` and `_` (an IPv4 address is one),
/// or an IPv6 address in brackets (kept with them), and a port of at most five digits.
/// `None` for anything else: userinfo (`a@b`), a path, a second colon, brackets around what
/// is not an IPv6 address.
pub(crate) fn authority_name(authority: &str) -> Option<&str> {
    let bytes = authority.as_bytes();
    // One pass over the name (every request's `Host` is read here): a table, not a search
    // for the colon and a second scan.
    let name_end = if bytes.first() == Some(&b'[') {
        let end = memchr::memchr(b']', bytes)?;
        authority[1..end].parse::<std::net::Ipv6Addr>().ok()?;
        end + 1
    } else {
        let end = bytes
            .iter()
            .position(|&byte| !NAME_BYTES[usize::from(byte)])
            .unwrap_or(bytes.len());
        if end == 0 {
            return None;
        }
        end
    };
    match bytes[name_end..].split_first() {
        None => {}
        Some((b':', digits)) if digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit) => {}
        Some(_) => return None,
    }
    Some(&authority[..name_end])
}

/// The bytes of a host name: ASCII letters, digits, `-`, `.` and `_`.
static NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
        byte += 1;
    }
    table
};

fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                name.clone(),
                HeaderValue::from_str(value).expect("header value"),
            );
        }
        map
    }

    fn policy(origins: &[&str], hosts: &[&str], listen: &str) -> OriginPolicy {
        let http = HttpSettings {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
        };
        OriginPolicy::new(&http, listen.parse().expect("addr"))
    }

    #[test]
    fn loopback_default_admits_local_pages_and_plain_clients() {
        let p = policy(&[], &[], "127.0.0.1:8765");
        for (host, origin) in [
            ("127.0.0.1:8765", None),
            ("localhost:8765", Some("http://localhost:3000")),
            ("127.0.0.1:8765", Some("http://127.0.0.1:8765")),
            ("[::1]:8765", Some("https://[::1]:1234")),
        ] {
            let mut h = vec![(HOST, host)];
            h.extend(origin.map(|o| (ORIGIN, o)));
            assert!(p.check(&headers(&h)).is_ok(), "{host} {origin:?}");
        }
    }

    #[test]
    fn loopback_default_refuses_foreign_origins_and_rebound_hosts() {
        let p = policy(&[], &[], "127.0.0.1:8765");
        let foreign = headers(&[(HOST, "127.0.0.1:8765"), (ORIGIN, "http://evil.example")]);
        assert_eq!(p.check(&foreign), Err(Refusal::ForbiddenOrigin));
        let null = headers(&[(HOST, "127.0.0.1:8765"), (ORIGIN, "null")]);
        assert_eq!(p.check(&null), Err(Refusal::ForbiddenOrigin));
        let rebound = headers(&[(HOST, "evil.example:8765")]);
        assert_eq!(p.check(&rebound), Err(Refusal::ForbiddenHost));
        let lookalike = headers(&[(HOST, "localhost.evil.example")]);
        assert_eq!(p.check(&lookalike), Err(Refusal::ForbiddenHost));
    }

    #[test]
    fn public_bind_admits_same_host_origins_only() {
        let p = policy(&[], &[], "0.0.0.0:443");
        let same = headers(&[
            (HOST, "mcp.example.com"),
            (ORIGIN, "https://mcp.example.com"),
        ]);
        assert!(p.check(&same).is_ok());
        let local = headers(&[(HOST, "mcp.example.com"), (ORIGIN, "http://localhost")]);
        assert_eq!(p.check(&local), Err(Refusal::ForbiddenOrigin));
    }

    #[test]
    fn configured_lists_replace_the_defaults() {
        let p = policy(
            &["https://app.example"],
            &["mcp.example", "gw:8443"],
            "127.0.0.1:1",
        );
        let ok = headers(&[(HOST, "mcp.example:9000"), (ORIGIN, "https://APP.example")]);
        assert!(p.check(&ok).is_ok());
        let port_bound = headers(&[(HOST, "gw:8443")]);
        assert!(p.check(&port_bound).is_ok());
        let wrong_port = headers(&[(HOST, "gw:9000")]);
        assert_eq!(p.check(&wrong_port), Err(Refusal::ForbiddenHost));
        let localhost = headers(&[(HOST, "localhost")]);
        assert_eq!(p.check(&localhost), Err(Refusal::ForbiddenHost));
        let other = headers(&[(HOST, "mcp.example"), (ORIGIN, "https://other.example")]);
        assert_eq!(p.check(&other), Err(Refusal::ForbiddenOrigin));
        // Userinfo names another host: the listed name before it is no pass.
        let userinfo = headers(&[(HOST, "mcp.example:443@evil.example")]);
        assert_eq!(p.check(&userinfo), Err(Refusal::BadHost));
    }

    #[test]
    fn host_and_origin_are_read_as_host_port_only() {
        for (authority, name) in [
            ("localhost", Some("localhost")),
            ("localhost:8765", Some("localhost")),
            ("localhost:", Some("localhost")),
            ("127.0.0.1:1", Some("127.0.0.1")),
            ("[::1]", Some("[::1]")),
            ("[::1]:8765", Some("[::1]")),
            ("mcp_internal.example", Some("mcp_internal.example")),
            ("localhost:80@evil.example", None),
            ("[::1]evil.example", None),
            ("[::1]@evil.example", None),
            ("[evil.example]", None),
            ("localhost:80:80", None),
            ("localhost:123456", None),
            ("localhost/x", None),
            ("local host", None),
            ("", None),
            (":80", None),
        ] {
            assert_eq!(authority_name(authority), name, "{authority}");
        }
        let p = policy(&[], &[], "127.0.0.1:8765");
        for host in ["localhost:80@evil.example", "[::1]evil.example"] {
            assert_eq!(
                p.check(&headers(&[(HOST, host)])),
                Err(Refusal::BadHost),
                "{host}"
            );
        }
        let userinfo = headers(&[(HOST, "localhost"), (ORIGIN, "http://[::1]@evil.example")]);
        assert_eq!(p.check(&userinfo), Err(Refusal::ForbiddenOrigin));
        let mut not_ascii = HeaderMap::new();
        not_ascii.insert(
            HOST,
            HeaderValue::from_bytes(b"caf\xc3\xa9").expect("obs-text"),
        );
        assert_eq!(p.check(&not_ascii), Err(Refusal::BadHost));
        let mut two = headers(&[(HOST, "localhost"), (ORIGIN, "http://localhost")]);
        two.append(ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert_eq!(p.check(&two), Err(Refusal::ForbiddenOrigin));
    }
}
