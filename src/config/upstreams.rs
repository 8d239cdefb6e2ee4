//! `[[upstreams]]`: other MCP servers the gateway serves as this server's own (a stdio
//! program started per session or shared, a Streamable HTTP endpoint, or a WebSocket one).

use super::ConfigError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How many clients one upstream child serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamMode {
    /// One child (or upstream HTTP session) per client session: started as `start` says,
    /// stopped when the session ends.
    #[default]
    PerSession,
    /// One child for every session; ids rewritten so each answer reaches its own caller.
    Shared,
}

/// When a `per_session` upstream's child for a session is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamStart {
    /// At the session's `initialize`, in the background (the answer does not wait): the
    /// child is ready, and the session shown its lists, by the session's first call.
    #[default]
    Initialize,
    /// At the session's first request for the upstream: a session that never uses it costs
    /// no process.
    FirstUse,
}

/// Glob filters on an upstream's tool names (`*` matches any run of characters).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolFilter {
    /// Names served (empty: all).
    pub allow: Vec<String>,
    /// Names never served, even when allowed.
    pub deny: Vec<String>,
}

impl ToolFilter {
    /// Whether the upstream tool `name` is served.
    pub fn admits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|p| glob(p, name)))
            && !self.deny.iter().any(|p| glob(p, name))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// One upstream MCP server (`[[upstreams]]`).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamSettings {
    /// `[a-z0-9-]+`, unique: names the upstream in logs, metrics, errors and the default
    /// prefix.
    pub name: String,
    /// A stdio upstream: the program to run (looked up on `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it (on top of the server's).
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// A remote upstream instead of a command: its endpoint URL, `http://` or `https://`
    /// (Streamable HTTP) or `ws://` or `wss://` (WebSocket, the `mcp` subprotocol).
    pub url: String,
    /// Headers sent with every request to `url` (with the upgrade request of a WebSocket):
    /// an `Authorization`, say; never logged.
    pub headers: BTreeMap<String, String>,
    /// The protocol version asked of the upstream, which also picks the era it is spoken to
    /// in: one of 2024-11-05 … 2025-11-25 (the `initialize` handshake; default 2025-11-25)
    /// or 2026-07-28 (stateless: `server/discover`, `_meta` on every request). Either falls
    /// back to the other era when the upstream speaks only that one.
    pub protocol_version: String,
    /// One child per session (`per_session`, the default) or one for all (`shared`).
    pub mode: UpstreamMode,
    /// `per_session`: a session's child is started at its `initialize` (the default) or at
    /// its first use of the upstream (`first_use`). A 2026-07-28 identity's child, which
    /// has no `initialize`, is started at first use either way.
    pub start: UpstreamStart,
    /// Put before the upstream's tool and prompt names. Default: `<name>__` when there is
    /// more than one upstream or any built-in set, `""` for a single upstream alone.
    pub prefix: Option<String>,
    /// Which of the upstream's tools are served.
    pub tools: ToolFilter,
    /// `per_session`: children at once; a session beyond is refused (-32030, retryable).
    pub max_children: usize,
    /// `shared`: the child is stopped after this long without a request, and started again
    /// on the next (0: never stopped), in ms.
    pub idle_timeout_ms: u64,
    /// `per_session`: environment variables of the child taken from the session's identity
    /// (`{ MCP_USER = "sub" }`): `sub` (the subject), `principal` (`jwt:alice`), `proof`
    /// (`jwt`, `key`, …), `scopes` (space-separated).
    pub env_from_identity: BTreeMap<String, String>,
    /// Longest wait for the child's answer to `initialize`, in ms (`npx -y` may download
    /// first); past it the child is killed. Also the longest wait for its lists (at start,
    /// and after a `list_changed`), given up past it.
    pub initialize_timeout_ms: u64,
    /// Requests to this upstream in flight at once, across sessions (0: no limit beyond the
    /// server's own); more wait for a slot as long as their deadline allows.
    pub max_in_flight: usize,
    /// Requests per second to this upstream, across sessions (0: no limit); over it a call
    /// is refused -32030 (retryable).
    pub requests_per_second: u32,
}

impl std::fmt::Debug for UpstreamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be credentials.
        let headers: Vec<&String> = self.headers.keys().collect();
        f.debug_struct("UpstreamSettings")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("mode", &self.mode)
            .field("start", &self.start)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        Self {
            name: String::new(),
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: String::new(),
            headers: BTreeMap::new(),
            protocol_version: crate::client::DEFAULT_PROTOCOL_VERSION.to_owned(),
            mode: UpstreamMode::PerSession,
            start: UpstreamStart::Initialize,
            prefix: None,
            tools: ToolFilter::default(),
            max_children: 256,
            idle_timeout_ms: 300_000,
            env_from_identity: BTreeMap::new(),
            initialize_timeout_ms: 60_000,
            max_in_flight: 0,
            requests_per_second: 0,
        }
    }
}

/// The schemes an upstream's `url` may have: Streamable HTTP, then WebSocket.
const REMOTE_SCHEMES: &[&str] = &["http://", "https://", "ws://", "wss://"];

/// The identity fields `env_from_identity` may name.
pub const IDENTITY_FIELDS: &[&str] = &["sub", "principal", "proof", "scopes"];

/// Checks `[[upstreams]]`: names, one of `command` / `url`, known identity fields.
pub(super) fn validate(upstreams: &[UpstreamSettings]) -> Result<(), ConfigError> {
    let invalid = |message: String| Err(ConfigError::Invalid(message));
    let mut names = std::collections::HashSet::new();
    for upstream in upstreams {
        let name = &upstream.name;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return invalid(format!("upstreams: name {name:?} is not [a-z0-9-]+"));
        }
        if !names.insert(name.as_str()) {
            return invalid(format!("upstreams: the name {name:?} is used twice"));
        }
        match (upstream.command.is_empty(), upstream.url.is_empty()) {
            (false, true) | (true, false) => {}
            _ => {
                return invalid(format!(
                    "upstreams.{name}: set exactly one of command and url"
                ))
            }
        }
        let url = &upstream.url;
        if !(url.is_empty() || REMOTE_SCHEMES.iter().any(|scheme| url.starts_with(scheme))) {
            // The URL itself is not repeated: it may carry credentials.
            return invalid(format!(
                "upstreams.{name}.url: not an http://, https:// (Streamable HTTP), ws:// or \
                 wss:// (WebSocket) URL"
            ));
        }
        if crate::protocol::mcp::ProtocolVersion::parse(&upstream.protocol_version).is_none() {
            return invalid(format!(
                "upstreams.{name}.protocol_version: {:?} is not a protocol version this server \
                 speaks (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28)",
                upstream.protocol_version
            ));
        }
        if let Some(field) = upstream
            .env_from_identity
            .values()
            .find(|f| !IDENTITY_FIELDS.contains(&f.as_str()))
        {
            return invalid(format!(
                "upstreams.{name}.env_from_identity: {field:?} is not one of {}",
                IDENTITY_FIELDS.join(", ")
            ));
        }
        if upstream.mode == UpstreamMode::PerSession && upstream.max_children == 0 {
            return invalid(format!("upstreams.{name}.max_children: must be at least 1"));
        }
        if upstream.initialize_timeout_ms == 0 {
            return invalid(format!(
                "upstreams.{name}.initialize_timeout_ms: must be at least 1"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob("read_*", "read_file"));
        assert!(glob("*", ""));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("a*c*e", "abcd"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        assert!(glob("*_file", "read_file"));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn deny_wins_over_allow() {
        let filter = ToolFilter {
            allow: vec!["read_*".into(), "list_*".into()],
            deny: vec!["read_secret*".into()],
        };
        assert!(filter.admits("read_file"));
        assert!(filter.admits("list_dir"));
        assert!(!filter.admits("write_file"));
        assert!(!filter.admits("read_secrets"));
        assert!(ToolFilter::default().admits("anything"));
    }

    #[test]
    fn a_url_is_streamable_http_or_websocket() {
        let remote = |url: &str| UpstreamSettings {
            name: "remote".into(),
            url: url.into(),
            ..UpstreamSettings::default()
        };
        for url in [
            "http://127.0.0.1:8000/mcp",
            "https://host/mcp",
            "ws://127.0.0.1:8000/ws",
            "wss://host/mcp",
        ] {
            assert!(validate(&[remote(url)]).is_ok(), "{url}");
        }
        for url in ["ftp://host/mcp", "host:8000/mcp", "WS://host/mcp"] {
            let Err(ConfigError::Invalid(message)) = validate(&[remote(url)]) else {
                panic!("{url} accepted");
            };
            assert!(message.starts_with("upstreams.remote.url: "), "{message}");
            assert!(message.contains("ws:// or wss://"), "{message}");
            assert!(!message.contains(url), "the URL is not repeated: {message}");
        }
    }
}
