//! Server-wide counters and gauges, rendered for `GET /metrics` in the Prometheus text
//! format. Plain atomics: cheap enough for the hot path, and readable by tests without
//! timing (a peak gauge shows a limit held, whatever the scheduling was).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub fn add(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// A gauge that also remembers its highest value.
#[derive(Debug, Default)]
pub struct Gauge {
    value: AtomicU64,
    peak: AtomicU64,
}

impl Gauge {
    /// Raises the gauge until the returned guard drops (so a dropped future lowers it too).
    pub fn track(&self) -> GaugeGuard<'_> {
        self.inc();
        GaugeGuard(self)
    }

    /// Raises the gauge by one, for values whose lifetime a guard cannot follow.
    pub fn inc(&self) {
        let now = self.value.fetch_add(1, Ordering::Relaxed) + 1;
        self.observe(now);
    }

    /// Raises the gauge by one unless it is already at `limit`; says whether it did.
    pub fn try_inc_below(&self, limit: u64) -> bool {
        let raised = self
            .value
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            });
        if let Ok(before) = raised {
            self.observe(before + 1);
        }
        raised.is_ok()
    }

    pub fn dec(&self) {
        self.value.fetch_sub(1, Ordering::Relaxed);
    }

    /// Lowers the gauge by `n`.
    pub fn sub(&self, n: u64) {
        self.value.fetch_sub(n, Ordering::Relaxed);
    }

    /// Records a value observed elsewhere (for peaks of per-session counts).
    pub fn observe(&self, value: u64) {
        // The peak only grows, so a value at or below it needs no write. `fetch_max` is a
        // locked read-modify-write even when nothing changes, which takes the cache line
        // from every other worker thread; a load does not, and this runs several times per
        // request.
        if value > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(value, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

pub struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    /// WebSocket sessions admitted and not yet gone (the `server.max_sessions` cap counts
    /// these).
    pub sessions: Gauge,
    /// WebSocket sessions whose socket dropped, kept for a reconnect.
    pub parked_sessions: Gauge,
    /// `tools/call` requests in flight in workers: admitted by their session, not yet
    /// finished or cancelled (a cancelled worker may take a moment more to stop).
    pub workers: Gauge,
    /// Workers waiting for a slot in the global pool.
    pub pool_waiting: Gauge,
    /// Workers holding a slot of the global pool (running their work).
    pub pool_running: Gauge,
    /// Highest number of requests one session had in flight (value unused, peak only).
    pub session_in_flight: Gauge,
    /// Resource subscriptions held by live sessions (`resources/subscribe`).
    pub subscriptions: Gauge,
    pub requests: Counter,
    pub rejected_session_busy: Counter,
    pub rejected_server_busy: Counter,
    /// Requests refused with 401 (no credentials where required, or invalid ones).
    pub rejected_unauthenticated: Counter,
    /// Requests refused with 403 for lack of scope (or of any policy).
    pub rejected_forbidden: Counter,
    /// New sessions refused by `server.max_sessions`.
    pub rejected_sessions_full: Counter,
    /// New sessions refused by `server.max_sessions_per_ip`.
    pub rejected_ip_limit: Counter,
    /// New sessions refused by `server.max_sessions_per_identity`.
    pub rejected_identity_limit: Counter,
    pub cancelled: Counter,
    pub timed_out: Counter,
    pub panicked: Counter,
    /// Requests answered from the de-duplication store (a stored response, or the response
    /// of the run they joined), by idempotency key or by request id.
    pub dedup_hits: Counter,
    /// Requests refused because their idempotency key or id came with other params.
    pub dedup_conflicts: Counter,
    /// Requests with an idempotency key that ran (the first of their key).
    pub idempotent_runs: Counter,
    /// Requests refused for their signature (missing, malformed, late, replayed, invalid).
    pub rejected_signature: Counter,
    /// Redis operations that failed (refused, timed out, an error reply, a dropped
    /// subscription); the node went on locally.
    pub redis_errors: Counter,
    /// Redis operations done locally instead, while Redis was paused after a failure.
    pub redis_skipped: Counter,
    /// Changes of this node's bus sent to the other nodes.
    pub bridge_published: Counter,
    /// Changes of other nodes fed into this node's bus.
    pub bridge_received: Counter,
    /// Changes of this node's bus that could not be sent to the other nodes.
    pub bridge_dropped: Counter,
    /// Whether the bus bridge holds its Redis subscription (0 or 1).
    pub bridge_subscribed: Gauge,
    /// Tasks running on this node (2026-07-28 tasks extension).
    pub tasks_running: Gauge,
    /// Tasks created on this node.
    pub tasks_created: Counter,
    /// What the limits refused or dropped, by reason.
    pub limited: Limited,
}

/// What a limit refused (`mcp_rejected_total{reason}`: a message, a request, a tool's
/// request to the client) or dropped (`mcp_dropped_total{reason}`: notifications that never
/// reach the client).
#[derive(Debug, Default)]
pub struct Limited {
    /// `limits.max_message_bytes` (WebSocket close 1009, HTTP 413).
    pub message_too_large: Counter,
    /// `limits.max_batch_len` (-32010).
    pub batch_too_large: Counter,
    /// `limits.max_json_depth`.
    pub json_depth: Counter,
    /// `limits.max_string_bytes`.
    pub json_string: Counter,
    /// `limits.max_array_len`.
    pub json_array: Counter,
    /// `limits.max_object_members`.
    pub json_object: Counter,
    /// `limits.allowed_methods`.
    pub method_not_allowed: Counter,
    /// `limits.rate`.
    pub rate: Counter,
    /// `limits.max_subscriptions_per_session` and `max_subscription_uri_bytes`.
    pub subscriptions: Counter,
    /// Requests to the client past `limits.max_in_flight_per_session` outstanding.
    pub client_requests: Counter,
    /// Log lines over `limits.log_lines_per_second` / `log_lines_burst` (dropped).
    pub log_lines: Counter,
    /// Notifications over `limits.max_queued_notifications` (dropped).
    pub queued_notifications: Counter,
}

impl Limited {
    /// Counts a wire-level refusal, if a limit made it.
    pub fn count_wire(&self, error: &crate::jsonrpc::WireError) {
        use crate::jsonrpc::{JsonLimit, WireError};
        let counter = match error {
            WireError::BatchTooLarge { .. } => &self.batch_too_large,
            WireError::LimitExceeded(exceeded) => match exceeded.kind {
                JsonLimit::Depth => &self.json_depth,
                JsonLimit::StringBytes => &self.json_string,
                JsonLimit::ArrayLen => &self.json_array,
                JsonLimit::ObjectMembers => &self.json_object,
            },
            WireError::Parse | WireError::InvalidRequest(_) => return,
        };
        counter.inc();
    }

    fn render(&self, out: &mut String) {
        let families = [
            (
                "mcp_rejected_total",
                "Messages, requests and tool requests to the client refused by a limit",
                &[
                    ("message_too_large", &self.message_too_large),
                    ("batch_too_large", &self.batch_too_large),
                    ("json_depth", &self.json_depth),
                    ("json_string", &self.json_string),
                    ("json_array", &self.json_array),
                    ("json_object", &self.json_object),
                    ("method_not_allowed", &self.method_not_allowed),
                    ("rate", &self.rate),
                    ("subscriptions", &self.subscriptions),
                    ("client_requests", &self.client_requests),
                ][..],
            ),
            (
                "mcp_dropped_total",
                "Notifications to clients dropped by a limit",
                &[
                    ("log_lines", &self.log_lines),
                    ("queued_notifications", &self.queued_notifications),
                ][..],
            ),
        ];
        for (name, help, reasons) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (reason, counter) in reasons {
                let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {}", counter.get());
            }
        }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        let gauges = [
            (
                "mcp_sessions",
                "Sessions (WebSocket and HTTP, parked included)",
                &self.sessions,
            ),
            (
                "mcp_parked_sessions",
                "WebSocket sessions waiting for a reconnect",
                &self.parked_sessions,
            ),
            (
                "mcp_workers",
                "tools/call requests in flight in worker actors",
                &self.workers,
            ),
            (
                "mcp_pool_waiting",
                "Workers waiting for a global pool slot",
                &self.pool_waiting,
            ),
            (
                "mcp_pool_running",
                "Workers holding a global pool slot",
                &self.pool_running,
            ),
            (
                "mcp_subscriptions",
                "Resource subscriptions held by live sessions",
                &self.subscriptions,
            ),
            (
                "mcp_tasks_running",
                "Tasks running on this node",
                &self.tasks_running,
            ),
        ];
        for (name, help, gauge) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                gauge.get()
            );
            let _ = writeln!(
                out,
                "# HELP {name}_peak Highest value of {name}\n# TYPE {name}_peak gauge\n{name}_peak {}",
                gauge.peak()
            );
        }
        let _ = writeln!(
            out,
            "# HELP mcp_session_in_flight_peak Highest number of requests one session had in flight\n# TYPE mcp_session_in_flight_peak gauge\nmcp_session_in_flight_peak {}",
            self.session_in_flight.peak()
        );
        let counters = [
            ("mcp_requests_total", "Requests received", &self.requests),
            (
                "mcp_rejected_session_busy_total",
                "Requests refused by the per-session cap",
                &self.rejected_session_busy,
            ),
            (
                "mcp_rejected_server_busy_total",
                "Requests that found no global pool slot in time",
                &self.rejected_server_busy,
            ),
            (
                "mcp_rejected_unauthenticated_total",
                "Requests refused with 401: missing or invalid credentials",
                &self.rejected_unauthenticated,
            ),
            (
                "mcp_rejected_forbidden_total",
                "Requests refused with 403: credentials without the scopes to connect",
                &self.rejected_forbidden,
            ),
            (
                "mcp_rejected_sessions_full_total",
                "New sessions refused by server.max_sessions",
                &self.rejected_sessions_full,
            ),
            (
                "mcp_rejected_ip_limit_total",
                "New sessions refused by server.max_sessions_per_ip",
                &self.rejected_ip_limit,
            ),
            (
                "mcp_rejected_identity_limit_total",
                "New sessions refused by server.max_sessions_per_identity",
                &self.rejected_identity_limit,
            ),
            (
                "mcp_cancelled_total",
                "Requests cancelled by the client or a disconnect",
                &self.cancelled,
            ),
            (
                "mcp_timed_out_total",
                "Requests stopped by their timeout",
                &self.timed_out,
            ),
            (
                "mcp_panicked_total",
                "Requests whose handler panicked",
                &self.panicked,
            ),
            (
                "mcp_dedup_hits_total",
                "Requests answered from the de-duplication store (stored or joined)",
                &self.dedup_hits,
            ),
            (
                "mcp_dedup_conflicts_total",
                "Requests whose idempotency key or id came with other params",
                &self.dedup_conflicts,
            ),
            (
                "mcp_idempotent_runs_total",
                "Requests with an idempotency key that ran",
                &self.idempotent_runs,
            ),
            (
                "mcp_rejected_signature_total",
                "Requests refused for their signature",
                &self.rejected_signature,
            ),
            (
                "mcp_redis_errors_total",
                "Redis operations that failed (the node went on locally)",
                &self.redis_errors,
            ),
            (
                "mcp_redis_skipped_total",
                "Redis operations done locally while Redis was paused after a failure",
                &self.redis_skipped,
            ),
            (
                "mcp_bus_bridge_published_total",
                "Changes sent to the other nodes",
                &self.bridge_published,
            ),
            (
                "mcp_bus_bridge_received_total",
                "Changes received from the other nodes",
                &self.bridge_received,
            ),
            (
                "mcp_bus_bridge_dropped_total",
                "Changes that could not be sent to the other nodes",
                &self.bridge_dropped,
            ),
            (
                "mcp_tasks_created_total",
                "Tool calls that became tasks on this node",
                &self.tasks_created,
            ),
        ];
        let _ = writeln!(
            out,
            "# HELP mcp_bus_bridge_subscribed Whether the change bus is subscribed to the other nodes\n# TYPE mcp_bus_bridge_subscribed gauge\nmcp_bus_bridge_subscribed {}",
            self.bridge_subscribed.get()
        );
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.get()
            );
        }
        self.limited.render(&mut out);
        out
    }
}
