//! Server-wide counters and gauges, rendered for `GET /metrics` in the Prometheus text
//! format. Plain atomics: cheap enough for the hot path, and readable by tests without
//! timing (a peak gauge shows a limit held, whatever the scheduling was).

use crate::observe::telemetry;
use crate::protocol::mcp::Method;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

    /// Raises the gauge by `n` unless that would take it past `limit`; says whether it did.
    /// A gauge that is itself a budget's count (`replay_bytes`): what it shows is what the
    /// budget enforces.
    pub fn try_add_within(&self, n: u64, limit: u64) -> bool {
        let raised = self
            .value
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= limit)
            });
        if let Ok(before) = raised {
            self.observe(before + n);
        }
        raised.is_ok()
    }

    /// Lowers the gauge by `n`.
    pub fn sub(&self, n: u64) {
        self.value.fetch_sub(n, Ordering::Relaxed);
    }

    /// Sets the gauge to a value counted elsewhere.
    pub fn set(&self, value: u64) {
        self.value.store(value, Ordering::Relaxed);
        self.observe(value);
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
    /// Resource subscriptions held by live sessions: `resources/subscribe`, and the resource
    /// URIs of open `subscriptions/listen` streams (not their task ids, which are no
    /// resources).
    pub subscriptions: Gauge,
    pub requests: Counter,
    pub cancelled: Counter,
    /// Requests of parked WebSocket sessions stopped so that a connected client could have
    /// their worker slot (answered -32004 on resume).
    pub reclaimed: Counter,
    pub timed_out: Counter,
    pub panicked: Counter,
    /// Requests answered from the de-duplication store (a stored response, or the response
    /// of the run they joined), by idempotency key or by request id.
    pub dedup_hits: Counter,
    /// Requests refused because their idempotency key or id came with other params.
    pub dedup_conflicts: Counter,
    /// Requests with an idempotency key that ran (the first of their key).
    pub idempotent_runs: Counter,
    /// Keyed calls whose node died while running them, freed for their retry to run again.
    pub dedup_orphans: Counter,
    /// Keyed results not written to Redis: over this node's share of `dedup.max_bytes` (in
    /// all, or for one identity) in the current window; their retries get -32032.
    pub dedup_unkept: Counter,
    /// Redis operations that failed (refused, timed out, an error reply, a dropped
    /// subscription); the node went on locally.
    pub redis_errors: Counter,
    /// Redis operations done locally instead, while Redis was paused after a failure.
    pub redis_skipped: Counter,
    /// Times Redis went from answering to failing (each such change is logged once); the
    /// heartbeat tells one outage from the next by it.
    pub redis_outages: Counter,
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
    /// Task records this node keeps (running or finished, not yet forgotten).
    pub tasks_stored: Gauge,
    /// Bytes of the task records this node keeps (their JSON), within
    /// `tasks.max_stored_bytes`.
    pub tasks_stored_bytes: Gauge,
    /// Bytes sessions hold for replay (every HTTP session's SSE event log, every parked
    /// WebSocket session's undelivered messages): the count of the server's budget itself,
    /// `limits.max_replay_bytes` (see [`ReplayBudget`](crate::session::replay::ReplayBudget)).
    pub replay_bytes: Gauge,
    /// Tasks created on this node.
    pub tasks_created: Counter,
    /// Requests, messages and connections refused, by reason (see [`Rejections`]).
    pub rejections: Rejections,
    /// Notifications dropped on their way to a client, by reason.
    pub dropped: Drops,
    /// How long requests took, by method.
    pub latency: Latencies,
    /// The gateway's upstreams, by name (set once, when the server is built).
    pub upstreams: std::sync::OnceLock<Vec<(std::sync::Arc<str>, std::sync::Arc<UpstreamMetrics>)>>,
}

/// What the gateway counts of one upstream.
#[derive(Debug, Default)]
pub struct UpstreamMetrics {
    /// Children (or upstream HTTP sessions) running.
    pub children: Gauge,
    /// Children started again after one exited or failed.
    pub restarts: Counter,
    /// Requests forwarded.
    pub requests: Counter,
    /// Requests that ended in an error (the upstream's JSON-RPC error, or it was unavailable).
    pub errors: Counter,
    /// How long forwarded requests took, to the upstream's answer.
    pub latency: Histogram,
}

impl UpstreamMetrics {
    fn render(upstreams: &[(std::sync::Arc<str>, std::sync::Arc<Self>)], out: &mut String) {
        if upstreams.is_empty() {
            return;
        }
        type Read = fn(&UpstreamMetrics) -> u64;
        let series: [(&str, &str, &str, Read); 4] = [
            (
                "mcp_upstream_children",
                "gauge",
                "Upstream children (or HTTP sessions) running",
                |m| m.children.get(),
            ),
            (
                "mcp_upstream_restarts_total",
                "counter",
                "Upstream children started again after one ended",
                |m| m.restarts.get(),
            ),
            (
                "mcp_upstream_requests_total",
                "counter",
                "Requests forwarded to an upstream",
                |m| m.requests.get(),
            ),
            (
                "mcp_upstream_errors_total",
                "counter",
                "Forwarded requests that ended in an error",
                |m| m.errors.get(),
            ),
        ];
        for (name, kind, help, read) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (upstream, metrics) in upstreams {
                let _ = writeln!(out, "{name}{{upstream=\"{upstream}\"}} {}", read(metrics));
            }
        }
        let name = "mcp_upstream_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from forwarding a request to the upstream's answer\n# TYPE {name} histogram"
        );
        for (upstream, metrics) in upstreams {
            metrics
                .latency
                .render(name, &format!("upstream=\"{upstream}\""), out);
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
            (
                "mcp_tasks_stored",
                "Task records this node keeps, running or finished",
                &self.tasks_stored,
            ),
            (
                "mcp_tasks_stored_bytes",
                "Bytes of the task records this node keeps",
                &self.tasks_stored_bytes,
            ),
            (
                "mcp_replay_bytes",
                "Bytes sessions hold for replay (SSE event logs, parked WebSocket sessions' undelivered messages)",
                &self.replay_bytes,
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
                "mcp_cancelled_total",
                "Requests cancelled by the client or a disconnect",
                &self.cancelled,
            ),
            (
                "mcp_reclaimed_total",
                "Requests of parked WebSocket sessions stopped to give their pool slot to a connected client",
                &self.reclaimed,
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
                "mcp_dedup_orphans_total",
                "Keyed calls whose node died while running them, freed for their retry",
                &self.dedup_orphans,
            ),
            (
                "mcp_dedup_unkept_total",
                "Keyed results not written to Redis: over this node's share of dedup.max_bytes",
                &self.dedup_unkept,
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
                "mcp_redis_outages_total",
                "Times Redis went from answering to failing",
                &self.redis_outages,
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
        self.rejections.render(&mut out);
        self.dropped.render(&mut out);
        self.latency.render(&mut out);
        if let Some(upstreams) = self.upstreams.get() {
            UpstreamMetrics::render(upstreams, &mut out);
        }
        out
    }
}

/// Declares [`Rejections`]: one counter per reason, each with the label value it is
/// rendered with and what it counts.
macro_rules! rejections {
    ($($(#[doc = $doc:literal])+ $field:ident => $label:literal,)+) => {
        /// Requests, messages and connections refused by a limit or policy, by reason. To count a new reason,
        /// add a line to the `rejections!` table in `metrics.rs` and call
        /// `shared.metrics.rejections.<reason>.inc()` where the refusal is made (HTTP
        /// refusals are counted in one place, from [`Refusal`](crate::perimeter::Refusal)).
        #[derive(Debug, Default)]
        pub struct Rejections {
            $($(#[doc = $doc])+ pub $field: Counter,)+
        }

        impl Rejections {
            /// Every reason with its label value.
            pub fn all(&self) -> [(&'static str, &Counter); [$($label),+].len()] {
                [$(($label, &self.$field)),+]
            }
        }
    };
}

rejections! {
    /// An `Origin` header names a site that may not use the server (HTTP 403).
    origin => "origin",
    /// A `Host` header names a host the server does not answer to (HTTP 403).
    host => "host",
    /// Missing or invalid credentials where they are required (HTTP 401).
    unauthenticated => "unauthenticated",
    /// Credentials without a required scope (HTTP 403).
    forbidden => "forbidden",
    /// `server.max_sessions` sessions are open (HTTP 503).
    session_cap => "session_cap",
    /// A gateway upstream that starts a child at every `initialize` runs `max_children`
    /// (HTTP 503).
    upstream_children => "upstream_children",
    /// `server.max_sessions_per_ip` sessions from one client address (HTTP 429).
    ip_limit => "ip_limit",
    /// `server.max_sessions_per_identity` sessions of one identity (HTTP 429).
    identity_limit => "identity_limit",
    /// A TLS connection from an address with `server.max_handshakes_per_ip` handshakes in
    /// progress (closed before its handshake).
    handshake_ip_limit => "handshake_ip_limit",
    /// A connection from an address with `server.max_connections_per_ip` connections open
    /// (closed as it is accepted, nothing it sent read).
    connection_ip_limit => "connection_ip_limit",
    /// A message over `limits.max_message_bytes` (WebSocket close 1009, HTTP 413).
    message_too_large => "message_too_large",
    /// A message refused because `limits.max_partial_bytes` of partly received messages are
    /// held, over all connections (WebSocket close 1009, HTTP 413).
    partial_budget => "partial_budget",
    /// A message not received within `limits.partial_timeout_ms` (WebSocket close 1008, HTTP
    /// 408).
    partial_deadline => "partial_deadline",
    /// A batch over `limits.max_batch_len` entries (-32010).
    batch_too_large => "batch_too_large",
    /// `limits.max_json_depth` (-32600).
    json_depth => "json_depth",
    /// `limits.max_string_bytes` (-32600).
    json_string => "json_string",
    /// `limits.max_array_len` (-32600).
    json_array => "json_array",
    /// `limits.max_object_members` (-32600).
    json_object => "json_object",
    /// A method outside `limits.allowed_methods` (-32601).
    method_not_allowed => "method_not_allowed",
    /// Over the identity's `limits.rate` (-32017).
    rate => "rate",
    /// A request signature missing, malformed, late, replayed or invalid (-32018).
    signature => "signature",
    /// `limits.max_subscriptions_per_session` or `max_subscription_uri_bytes` (-32602), and
    /// each URI or task id a `subscriptions/listen` leaves out of its acknowledgement.
    subscriptions => "subscriptions",
    /// A tool's request to the client past `limits.max_in_flight_per_session` outstanding.
    client_requests => "client_requests",
    /// `limits.max_in_flight_per_session` requests already in flight (-32009).
    session_busy => "session_busy",
    /// No global pool slot within `limits.admission_wait_ms` (-32008).
    server_busy => "server_busy",
    /// A `tools/call` with an idempotency key while Redis cannot be reached
    /// (`cluster.on_store_error = "refuse"`, -32008).
    store_unavailable => "store_unavailable",
}

impl Rejections {
    /// Counts a wire-level refusal, if a limit made it.
    pub fn count_wire(&self, error: &crate::protocol::jsonrpc::WireError) {
        use crate::protocol::jsonrpc::{JsonLimit, WireError};
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
        let _ = writeln!(
            out,
            "# HELP mcp_rejected_total Requests, messages and connections refused by a limit or policy, by reason\n# TYPE mcp_rejected_total counter"
        );
        for (reason, counter) in self.all() {
            let _ = writeln!(
                out,
                "mcp_rejected_total{{reason=\"{reason}\"}} {}",
                counter.get()
            );
        }
    }
}

/// Upper bounds of the latency buckets, in seconds as rendered (`le`) and in nanoseconds as
/// compared. Fixed, so that every node of a deployment reports the same buckets.
const BUCKETS: [(&str, u64); 19] = [
    ("0.0001", 100_000),
    ("0.00025", 250_000),
    ("0.0005", 500_000),
    ("0.001", 1_000_000),
    ("0.0025", 2_500_000),
    ("0.005", 5_000_000),
    ("0.01", 10_000_000),
    ("0.025", 25_000_000),
    ("0.05", 50_000_000),
    ("0.1", 100_000_000),
    ("0.25", 250_000_000),
    ("0.5", 500_000_000),
    ("1", 1_000_000_000),
    ("2.5", 2_500_000_000),
    ("5", 5_000_000_000),
    ("10", 10_000_000_000),
    ("30", 30_000_000_000),
    ("60", 60_000_000_000),
    ("300", 300_000_000_000),
];

/// A latency histogram with the fixed `BUCKETS`: one count per bucket (not cumulative: an
/// observation touches one counter; the cumulative counts are summed when rendered) and the
/// sum of the observed durations.
#[derive(Debug, Default)]
pub struct Histogram {
    /// `counts[i]` counts durations in `(BUCKETS[i-1], BUCKETS[i]]`; the last one those
    /// above every bound.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one duration: two relaxed atomic adds, after a scan that stops at the first
    /// bucket that fits (the first few for fast requests).
    pub fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BUCKETS
            .iter()
            .position(|&(_, bound)| nanos <= bound)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// How many durations were recorded.
    #[cfg(any(test, feature = "testing"))]
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        for (i, (le, _)) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let seconds = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {seconds}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// The methods latencies are kept for: the ones the server serves, and `other` for every
/// request refused before it had one (an unknown method, one not negotiated).
const METHODS: [(Option<Method>, &str); 19] = [
    (Some(Method::Initialize), "initialize"),
    (Some(Method::Discover), "server/discover"),
    (Some(Method::SubscriptionsListen), "subscriptions/listen"),
    (Some(Method::TasksGet), "tasks/get"),
    (Some(Method::TasksUpdate), "tasks/update"),
    (Some(Method::TasksCancel), "tasks/cancel"),
    (Some(Method::Ping), "ping"),
    (Some(Method::ToolsList), "tools/list"),
    (Some(Method::ToolsCall), "tools/call"),
    (Some(Method::ResourcesList), "resources/list"),
    (Some(Method::ResourcesRead), "resources/read"),
    (
        Some(Method::ResourceTemplatesList),
        "resources/templates/list",
    ),
    (Some(Method::ResourcesSubscribe), "resources/subscribe"),
    (Some(Method::ResourcesUnsubscribe), "resources/unsubscribe"),
    (Some(Method::PromptsList), "prompts/list"),
    (Some(Method::PromptsGet), "prompts/get"),
    (Some(Method::LoggingSetLevel), "logging/setLevel"),
    (Some(Method::CompletionComplete), "completion/complete"),
    (None, "other"),
];

/// A request's method as the latency histograms know it (an index into `METHODS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodLabel(u8);

impl MethodLabel {
    /// The label of a request method (`other` for one the server does not serve).
    pub fn of(method: &str) -> Self {
        let method = Method::parse(method);
        let index = METHODS
            .iter()
            .position(|(m, _)| *m == method)
            .unwrap_or(METHODS.len() - 1);
        Self(index as u8)
    }

    /// Every label, in the order of their [`index`](Self::index).
    pub(crate) fn all() -> impl Iterator<Item = Self> {
        (0..METHODS.len()).map(|index| Self(index as u8))
    }

    /// Its place among [`all`](Self::all) the labels.
    pub(crate) fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The method's name, when it is one the server serves (not `other`): a plain token.
    pub(crate) fn served(self) -> Option<&'static str> {
        let (method, name) = METHODS[usize::from(self.0)];
        method.map(|_| name)
    }

    /// The label value.
    #[cfg(any(test, feature = "testing"))]
    pub fn as_str(self) -> &'static str {
        METHODS[usize::from(self.0)].1
    }
}

/// Request latencies, one histogram per method: from the request's arrival in its session to
/// its answer (for a worker, until its outcome is back in the session; a cancelled request
/// is not observed).
#[derive(Debug, Default)]
pub struct Latencies {
    by_method: [Histogram; METHODS.len()],
}

impl Latencies {
    /// Records a request's duration.
    pub fn observe(&self, method: MethodLabel, elapsed: Duration) {
        self.by_method[usize::from(method.0)].observe(elapsed);
    }

    /// The histogram of one method.
    #[cfg(any(test, feature = "testing"))]
    pub fn of(&self, method: MethodLabel) -> &Histogram {
        &self.by_method[usize::from(method.0)]
    }

    fn render(&self, out: &mut String) {
        let name = "mcp_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a request's arrival to its answer, by method\n# TYPE {name} histogram"
        );
        for (histogram, (_, method)) in self.by_method.iter().zip(METHODS) {
            histogram.render(name, &format!("method=\"{method}\""), out);
        }
    }
}

/// What was dropped rather than wait or grow without bound (`mcp_dropped_total{reason}`):
/// notifications on their way to a client, what sessions could not keep for replay within
/// the server's budget, and (`reason="access_log"`) lines of the server's own log that found
/// the background writer's queue full or whose write failed — every lost log line, access
/// line or not, counted process-wide ([`telemetry::dropped_lines`]).
#[derive(Debug, Default)]
pub struct Drops {
    /// Log lines over `limits.log_lines_per_second` / `log_lines_burst`.
    pub log_lines: Counter,
    /// Notifications over `limits.max_queued_notifications`.
    pub queued_notifications: Counter,
    /// A request's notifications (log lines, progress) whose message would have been over
    /// `limits.max_message_bytes`.
    pub oversized_notifications: Counter,
    /// Entries kept for replay (SSE events, a parked WebSocket session's undelivered
    /// messages) given up, or never kept, because `limits.max_replay_bytes` were held: sent
    /// live if a reader was there, refused to a replay that asks for them.
    pub replay_budget: Counter,
}

impl Drops {
    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP mcp_dropped_total Notifications to clients dropped by a limit (their number, or the size of one), entries not kept for replay within limits.max_replay_bytes (reason=\"replay_budget\"), and lines of the server log dropped or lost (reason=\"access_log\")\n# TYPE mcp_dropped_total counter"
        );
        for (reason, count) in [
            ("log_lines", self.log_lines.get()),
            ("queued_notifications", self.queued_notifications.get()),
            (
                "oversized_notifications",
                self.oversized_notifications.get(),
            ),
            ("replay_budget", self.replay_budget.get()),
            ("access_log", telemetry::dropped_lines()),
        ] {
            let _ = writeln!(out, "mcp_dropped_total{{reason=\"{reason}\"}} {count}");
        }
    }
}
