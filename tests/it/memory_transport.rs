//! The protocol core driven in-process through the in-memory transport (no socket), with
//! exact assertions on the frames it sends:
//!
//! - `initialize` is answered with the negotiated version, the server capabilities and
//!   `serverInfo`; `notifications/initialized` gets no frame; `tools/call echo` returns the
//!   text unchanged, under the request's id.
//! - A `tools/call` carrying `_meta.progressToken` gets `notifications/progress` frames with
//!   that token, strictly increasing progress below the total, all *before* its response,
//!   and none after it.
//! - A request cancelled with `notifications/cancelled` never gets a response, and its
//!   worker is gone.

use crate::support::*;

use mcp_ws::testing::memory::{ClientFrame, MemorySession};
use mcp_ws::testing::shared::Shared;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// The in-memory session and the frames it sends.
struct Harness {
    shared: Arc<Shared>,
    session: actix::Addr<MemorySession>,
    frames: UnboundedReceiver<String>,
}

impl Harness {
    fn start() -> Self {
        let shared = crate::demo::demo(mcp_ws::Server::builder().settings(settings()))
            .build()
            .expect("server builds")
            .shared()
            .clone();
        let (session, frames) = MemorySession::start(shared.clone());
        Self {
            shared,
            session,
            frames,
        }
    }

    fn send(&self, message: Value) {
        self.session.do_send(ClientFrame(message.to_string()));
    }

    /// The next frame the session sends, parsed; fails after READ_TIMEOUT.
    async fn next(&mut self) -> Value {
        let frame = tokio::time::timeout(READ_TIMEOUT, self.frames.recv())
            .await
            .expect("a frame arrives in time")
            .expect("the session is alive");
        serde_json::from_str(&frame).expect("the session sends valid JSON")
    }

    /// Sends a `ping` and returns every frame that came before its answer.
    async fn frames_before_barrier(&mut self, barrier: &str) -> Vec<Value> {
        self.send(json!({"jsonrpc":"2.0","id":barrier,"method":"ping"}));
        let mut before = Vec::new();
        loop {
            let frame = self.next().await;
            if frame["id"] == barrier {
                assert_eq!(frame, json!({"jsonrpc":"2.0","id":barrier,"result":{}}));
                return before;
            }
            before.push(frame);
        }
    }

    /// Calls `echo` and checks its response frame to the byte.
    async fn assert_echo(&mut self, id: &str, text: &str) {
        self.send(json!({
            "jsonrpc":"2.0","id":id,"method":"tools/call",
            "params": {"name":"echo","arguments":{"text":text}},
        }));
        assert_eq!(
            self.next().await,
            json!({
                "jsonrpc": "2.0",
                "id": id,
                "result": {"content": [{"type": "text", "text": text}]},
            })
        );
    }

    async fn initialize(&mut self) {
        self.send(json!({
            "jsonrpc":"2.0","id":1,"method":"initialize",
            "params": initialize_params("2025-11-25"),
        }));
        let response = self.next().await;
        assert_eq!(
            response,
            json!({
                "jsonrpc": "2.0",
                "id": 1,
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {
                        "tools": {"listChanged": true},
                        "resources": {"subscribe": true, "listChanged": true},
                        "prompts": {"listChanged": true},
                        "logging": {},
                        "completions": {},
                    },
                    "serverInfo": {"name": "mcp-ws", "version": env!("CARGO_PKG_VERSION")},
                },
            })
        );
        self.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        let extra = self.frames_before_barrier("after-initialized").await;
        assert!(
            extra.is_empty(),
            "notifications/initialized is not answered: {extra:?}"
        );
    }
}

#[actix_rt::test]
async fn initialize_then_echo_answer_with_exact_frames() {
    let mut h = Harness::start();
    h.initialize().await;

    h.assert_echo("echo-1", "hello memory").await;
    let extra = h.frames_before_barrier("after-echo").await;
    assert!(extra.is_empty(), "nothing but the echo response: {extra:?}");
}

#[actix_rt::test]
async fn progress_notifications_precede_the_response_and_none_follow_it() {
    let mut h = Harness::start();
    h.initialize().await;

    h.send(json!({
        "jsonrpc":"2.0","id":7,"method":"tools/call",
        "params": {"name":"sleep","arguments":{"ms":300},"_meta":{"progressToken":"p-7"}},
    }));
    let mut progress = Vec::new();
    let response = loop {
        let frame = h.next().await;
        if frame.get("id").is_some() {
            break frame;
        }
        assert_eq!(frame["jsonrpc"], "2.0", "{frame}");
        assert_eq!(frame["method"], "notifications/progress", "{frame}");
        assert_eq!(frame["params"]["progressToken"], "p-7", "{frame}");
        assert_eq!(frame["params"]["total"], json!(300.0), "{frame}");
        progress.push(
            frame["params"]["progress"]
                .as_f64()
                .expect("numeric progress"),
        );
    };
    assert_eq!(
        response,
        json!({
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"content": [{"type": "text", "text": "slept 300 ms"}]},
        })
    );
    assert!(
        !progress.is_empty(),
        "a 300 ms sleep with a progress token reports progress"
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {progress:?}"
    );
    assert!(
        progress.iter().all(|&p| p > 0.0 && p < 300.0),
        "within (0, total): {progress:?}"
    );
    let extra = h.frames_before_barrier("after-sleep").await;
    assert!(extra.is_empty(), "no frame after the response: {extra:?}");
}

#[actix_rt::test]
async fn cancelled_request_gets_no_response() {
    let mut h = Harness::start();
    h.initialize().await;

    h.send(json!({
        "jsonrpc":"2.0","id":"long","method":"tools/call",
        "params": {"name":"sleep","arguments":{"ms":60000},"_meta":{"progressToken":"p-long"}},
    }));
    // The first progress report proves the worker is running.
    let first = h.next().await;
    assert_eq!(first["method"], "notifications/progress", "{first}");
    assert_eq!(first["params"]["progressToken"], "p-long", "{first}");
    assert_eq!(h.shared.metrics.workers.get(), 1);

    h.send(json!({
        "jsonrpc":"2.0","method":"notifications/cancelled",
        "params": {"requestId":"long","reason":"test"},
    }));
    let before = h.frames_before_barrier("after-cancel").await;
    // Progress queued before the cancel was handled may still go out; a response may not.
    for frame in &before {
        assert_eq!(frame["method"], "notifications/progress", "{frame}");
    }
    assert_eq!(
        h.shared.metrics.workers.get(),
        0,
        "the request is no longer in flight"
    );
    assert_eq!(h.shared.metrics.cancelled.get(), 1);

    // The session is still usable, and the cancelled id never answers.
    h.assert_echo("echo-after", "still here").await;
    let after = h.frames_before_barrier("final").await;
    assert!(after.is_empty(), "nothing for the cancelled id: {after:?}");
}
