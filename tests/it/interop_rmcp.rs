//! Interop with the official Rust SDK: rmcp 3 (crates.io, `default-features = false`,
//! `client` + `transport-streamable-http-client-reqwest`) as a client of the real server, in
//! both eras and over both transports:
//!
//! - 2026-07-28 (`ClientLifecycleMode::Discover`: `server/discover`, then per-request `_meta`)
//!   over Streamable HTTP (each request a POST of its own, headers checked against the body)
//!   and over a WebSocket (rmcp takes any `Sink`/`Stream` of JSON-RPC messages: here a
//!   tokio-tungstenite socket, one message per text frame);
//! - 2025-11-25 (`ClientLifecycleMode::Initialize`: the `initialize` handshake, in which rmcp
//!   asks for 2026-07-28 and is answered 2025-11-25, the newest version with a handshake) over
//!   the same two: a WebSocket session, and an HTTP session with `Mcp-Session-Id` and its
//!   `GET` stream;
//! - `ClientLifecycleMode::Auto` (a `server/discover` probe, `initialize` only if the server
//!   turns out legacy) settles on 2026-07-28 over both.
//!
//! Each run checks real results, not just the absence of errors: the era rmcp settled on and
//! the server's identity and capabilities it read; tools/list; `echo`, `add` and `fail`
//! results (content text, `isError`, `resultType` in 2026-07-28 only); `sleep`'s progress
//! reaching rmcp's `on_progress`, strictly increasing; -32602 for an unknown tool and for
//! `greet` without its argument; completion of `greet`'s argument; resources/list and the
//! readme's text; `greet`'s message. Asking the client from inside a tool (elicitation,
//! sampling, roots): in 2026-07-28 a multi round-trip request (`input_required` with the ask
//! and a `requestState`, which `call_tool_once` shows, then rmcp's `call_tool` answers it from
//! its handler and retries), in 2025-11-25 a request from the server on the same session;
//! either way rmcp's handler is asked exactly once, with what the tool asked, and the tool
//! gets its answer. Then changes the test makes to the registry while the client is idle:
//! `list_changed` for each list (in 2026-07-28 on a `subscriptions/listen` stream, whose
//! acknowledged filter is checked, and nothing outside it; in 2025-11-25 unsolicited, as the
//! session declared), the lists read again showing the change, a tool added at run time
//! called; `resources/updated` for the subscribed resource only. Over a WebSocket, every frame
//! the server sent must be a JSON-RPC message rmcp reads.
//!
//! The clients run in this process, so the registry changes are made directly (the fixtures
//! are `tests/it/support/interop.rs`'s). No timing assertions: every wait has a time limit, and
//! "nothing else arrived" is checked behind a fence (see [`expect_update_of_only`]).

// Roots and sampling are deprecated in 2026-07-28 (SEP-2577), still part of it, and rmcp
// marks their types deprecated: this test answers them on purpose.
#![allow(deprecated)]

use crate::support::interop::{apply, interop_server};
use futures_util::{SinkExt, StreamExt};
use mcp_ws::RunningServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, GetPromptRequestParams, Implementation, ListRootsResult,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams,
    ResourceUpdatedNotificationParam, Root, SubscriptionFilter,
};
use rmcp::service::{
    NotificationContext, RequestContext, RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{self, Message};

/// How long a notification the server must send may take.
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handler answers, and what the fixtures are called.
const ROOTS: [(&str, &str); 2] = [
    ("file:///interop/project", "project"),
    ("file:///interop/docs", "docs"),
];
const MODEL: &str = "interop-model";
const WATCHED_A: &str = "interop://watched/a";
const WATCHED_B: &str = "interop://watched/b";
const ADDED_TOOL: &str = "interop_added";
const ADDED_RESOURCE: &str = "interop://added";
const ADDED_PROMPT: &str = "interop_added";

fn profile() -> Value {
    json!({"name": "Ada Lovelace", "subscribe": true})
}

// ---------------------------------------------------------------------------------------
// The client side: rmcp's handler, recording what it was asked and told.

/// What the server asked the client (method and params as JSON), the progress it reported,
/// and the notifications it sent outside a listen stream (2025-11-25).
struct Seen {
    asked: Mutex<Vec<(&'static str, Value)>>,
    progress: Mutex<Vec<f64>>,
    notifications: mpsc::UnboundedSender<Value>,
}

impl Seen {
    fn asked(&self, method: &str) -> Vec<Value> {
        self.asked
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, params)| params.clone())
            .collect()
    }

    fn ask(&self, method: &'static str, params: Value) {
        self.asked.lock().expect("lock").push((method, params));
    }

    fn notified(&self, method: &str, uri: Option<&str>) {
        let mut note = json!({ "method": method });
        if let Some(uri) = uri {
            note["uri"] = json!(uri);
        }
        let _ = self.notifications.send(note);
    }
}

#[derive(Clone)]
struct InteropClient(Arc<Seen>);

impl ClientHandler for InteropClient {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.0.ask("elicitation/create", to_json(&request));
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(profile()))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let params = to_json(&params);
        let text = params["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.0.ask("sampling/createMessage", params);
        serde_json::from_value(json!({
            "role": "assistant",
            "content": {"type": "text", "text": format!("sampled: {text}")},
            "model": MODEL,
            "stopReason": "endTurn",
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.0.ask("roots/list", json!({}));
        Ok(ListRootsResult::new(
            ROOTS
                .iter()
                .map(|(uri, name)| Root::new(*uri).with_name(*name))
                .collect(),
        ))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.progress.lock().expect("lock").push(params.progress);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notified("notifications/tools/list_changed", None);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0
            .notified("notifications/resources/list_changed", None);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notified("notifications/prompts/list_changed", None);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0
            .notified("notifications/resources/updated", Some(&params.uri));
    }

    fn get_info(&self) -> ClientConfig {
        // (rmcp's capability builders need its `macros` feature.)
        let capabilities: ClientCapabilities = serde_json::from_value(json!({
            "roots": {},
            "sampling": {},
            "elicitation": {"form": {}},
        }))
        .expect("client capabilities");
        ClientConfig::new(
            capabilities,
            Implementation::new("mcp-ws-interop-rmcp", "0.1.0"),
        )
    }
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("serializes")
}

// ---------------------------------------------------------------------------------------
// Connecting.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    /// 2026-07-28: `server/discover`, then per-request `_meta`.
    Stateless,
    /// 2025-11-25: `initialize`.
    Handshake,
}

impl Era {
    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Era::Stateless => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Era::Handshake => ClientLifecycleMode::Initialize,
        }
    }

    fn version(self) -> ProtocolVersion {
        match self {
            Era::Stateless => ProtocolVersion::V_2026_07_28,
            Era::Handshake => ProtocolVersion::V_2025_11_25,
        }
    }
}

type Client = RunningService<RoleClient, InteropClient>;

/// The handler, and the notifications it is told.
fn handler() -> (InteropClient, mpsc::UnboundedReceiver<Value>) {
    let (notifications, received) = mpsc::unbounded_channel();
    let seen = Seen {
        asked: Mutex::new(Vec::new()),
        progress: Mutex::new(Vec::new()),
        notifications,
    };
    (InteropClient(Arc::new(seen)), received)
}

async fn connect_http(
    server: &RunningServer,
    handler: InteropClient,
    mode: ClientLifecycleMode,
) -> Client {
    // rmcp builds its own reqwest client, which takes the process's crypto provider.
    crate::support::http::install_crypto();
    let transport =
        StreamableHttpClientTransport::from_uri(format!("http://{}/mcp", server.addr()));
    handler
        .serve_with_lifecycle(transport, mode.clone())
        .await
        .unwrap_or_else(|e| panic!("rmcp connects over HTTP ({mode:?}): {e}"))
}

/// Frames from the server that rmcp could not read as JSON-RPC messages: each is a finding.
type Unreadable = Arc<Mutex<Vec<String>>>;

/// rmcp over a WebSocket: the socket, as a `Sink` of the messages rmcp sends (each one text
/// frame) and a `Stream` of those it receives. Control frames are the socket's business; a
/// binary frame or a text that is no JSON-RPC message is kept in `unreadable`.
async fn connect_ws(
    server: &RunningServer,
    handler: InteropClient,
    mode: ClientLifecycleMode,
    unreadable: Unreadable,
) -> Client {
    let (ws, _response) = tokio_tungstenite::connect_async(server.url())
        .await
        .expect("websocket connects");
    let (sink, stream) = ws.split();
    let sink = sink.with(|message: TxJsonRpcMessage<RoleClient>| async move {
        let text = serde_json::to_string(&message).expect("serializes");
        Ok::<_, tungstenite::Error>(Message::text(text))
    });
    let stream = stream.filter_map(move |frame| {
        let unreadable = unreadable.clone();
        async move {
            let text = match frame {
                Ok(Message::Text(text)) => text.to_string(),
                Ok(Message::Binary(bytes)) => format!("binary frame of {} bytes", bytes.len()),
                _ => return None,
            };
            match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&text) {
                Ok(message) => Some(message),
                Err(error) => {
                    unreadable
                        .lock()
                        .expect("lock")
                        .push(format!("{error}: {text}"));
                    None
                }
            }
        }
    });
    handler
        .serve_with_lifecycle((Box::pin(sink), Box::pin(stream)), mode.clone())
        .await
        .unwrap_or_else(|e| panic!("rmcp connects over a WebSocket ({mode:?}): {e}"))
}

// ---------------------------------------------------------------------------------------
// The scenario, the same for every era and transport.

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object: {other}"),
    }
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments(args))
}

/// The text of a tool result's only content block, checking `isError` is as expected.
fn tool_text(result: &impl serde::Serialize, is_error: bool) -> String {
    let result = to_json(result);
    assert_eq!(
        result["isError"].as_bool().unwrap_or(false),
        is_error,
        "isError: {result}"
    );
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "one content block: {result}");
    assert_eq!(content[0]["type"], "text", "{result}");
    content[0]["text"].as_str().expect("text").to_owned()
}

/// The JSON-RPC error code of a failed request.
fn error_code<T: std::fmt::Debug>(outcome: Result<T, rmcp::ServiceError>) -> i32 {
    match outcome {
        Err(rmcp::ServiceError::McpError(error)) => error.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// The JSON a tool answered with, after checking it did not fail.
async fn call_for_json(client: &Client, name: &str, args: Value) -> Value {
    let result = client
        .call_tool(call(name, args))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name}: {e}"));
    serde_json::from_str(&tool_text(&result, false)).expect("the tool answers JSON")
}

/// Where the notifications of the server's changes arrive: in 2026-07-28 from a
/// `subscriptions/listen` stream, in 2025-11-25 from the handler.
struct Notifications {
    received: mpsc::UnboundedReceiver<Value>,
}

impl Notifications {
    async fn next(&mut self, waiting_for: &str) -> Value {
        tokio::time::timeout(NOTIFICATION_TIMEOUT, self.received.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("no notification within {NOTIFICATION_TIMEOUT:?}: {waiting_for}")
            })
            .unwrap_or_else(|| panic!("the notifications ended: {waiting_for}"))
    }

    /// The next `n`, as their methods, sorted.
    async fn methods(&mut self, n: usize, waiting_for: &str) -> Vec<String> {
        let mut methods = Vec::new();
        for _ in 0..n {
            let note = self.next(waiting_for).await;
            methods.push(note["method"].as_str().expect("method").to_owned());
        }
        methods.sort();
        methods
    }

    fn pending(&mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.received.try_recv().ok()).collect()
    }
}

const LIST_CHANGES: [&str; 3] = [
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
];

/// A listen stream's notifications, read into a channel until it ends.
struct Listening {
    pump: tokio::task::JoinHandle<()>,
    /// What reached the handler instead: nothing may (2026-07-28 has no unsolicited
    /// notifications).
    stray: mpsc::UnboundedReceiver<Value>,
}

/// Where changes arrive for `era`: in 2026-07-28 it opens a listen stream (list changes of
/// every kind, updates of [`WATCHED_A`]) and checks its acknowledgement; in 2025-11-25 it
/// subscribes to [`WATCHED_A`] (list changes come unasked, as the session declared).
async fn listen_for_changes(
    client: &Client,
    era: Era,
    from_handler: mpsc::UnboundedReceiver<Value>,
) -> (Notifications, Option<Listening>) {
    match era {
        Era::Handshake => {
            let caps = &client.peer_info().expect("peer info").capabilities;
            let declared = to_json(caps);
            for kind in ["tools", "resources", "prompts"] {
                assert_eq!(declared[kind]["listChanged"], true, "{declared}");
            }
            assert_eq!(declared["resources"]["subscribe"], true, "{declared}");
            client
                .subscribe(rmcp::model::SubscribeRequestParams::new(WATCHED_A))
                .await
                .expect("resources/subscribe");
            (
                Notifications {
                    received: from_handler,
                },
                None,
            )
        }
        Era::Stateless => {
            let filter = SubscriptionFilter::builder()
                .tools_list_changed()
                .resources_list_changed()
                .prompts_list_changed()
                .resource_subscription(WATCHED_A)
                .build();
            let mut subscription = client
                .listen(filter.clone())
                .await
                .expect("subscriptions/listen");
            assert_eq!(
                to_json(subscription.acknowledged()),
                to_json(&filter),
                "the whole filter is acknowledged"
            );
            let (tx, received) = mpsc::unbounded_channel();
            let pump = tokio::spawn(async move {
                loop {
                    match subscription.next().await {
                        Ok(Some(notification)) => {
                            let note = to_json(&notification);
                            let mut out = json!({ "method": note["method"] });
                            if let Some(uri) = note["params"].get("uri") {
                                out["uri"] = uri.clone();
                            }
                            if tx.send(out).is_err() {
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(error) => {
                            let _ =
                                tx.send(json!({ "method": "error", "error": error.to_string() }));
                            break;
                        }
                    }
                }
            });
            let listening = Listening {
                pump,
                stray: from_handler,
            };
            (Notifications { received }, Some(listening))
        }
    }
}

/// Asks for updates of `quiet` then `loud` (published in that order), waits for the one of
/// `loud`, then publishes `loud` again and waits for that one too: the server sends what is
/// not part of a request on one ordered stream (the socket, the `GET` stream, the listen
/// stream), so had it sent one for `quiet`, published before, it would have come before this
/// fence.
async fn expect_update_of_only(
    server: &RunningServer,
    notifications: &mut Notifications,
    loud: &str,
    quiet: &str,
) {
    let updated = |uri: &str| json!({"method": "notifications/resources/updated", "uri": uri});
    apply(server, &format!("updated {quiet}")).expect("update");
    apply(server, &format!("updated {loud}")).expect("update");
    assert_eq!(notifications.next("an update").await, updated(loud));
    apply(server, &format!("updated {loud}")).expect("update");
    assert_eq!(notifications.next("the fence").await, updated(loud));
    assert_eq!(notifications.pending(), Vec::<Value>::new(), "nothing else");
}

async fn tool_names(client: &Client) -> Vec<String> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools.iter().map(|t| t.name.to_string()).collect()
}

async fn scenario(
    server: &RunningServer,
    client: Client,
    seen: Arc<Seen>,
    from_handler: mpsc::UnboundedReceiver<Value>,
    era: Era,
) {
    // The era rmcp settled on, and what it learned of the server (in 2026-07-28, from
    // `server/discover` and the serverInfo in its result's `_meta`).
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, era.version());
    // The fixtures' server keeps the default name, and the version defaults to the crate's.
    let server_info = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server_info.name, mcp_ws::Settings::default().info.name);
    assert_eq!(server_info.version, env!("CARGO_PKG_VERSION"));
    let caps = to_json(&info.capabilities);
    for kind in ["tools", "resources", "prompts", "completions"] {
        assert!(caps[kind].is_object(), "capabilities.{kind}: {caps}");
    }

    let names = tool_names(&client).await;
    for name in [
        "echo",
        "add",
        "sleep",
        "fail",
        "ask_roots",
        "ask_sampling",
        "ask_elicitation",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }

    let echo = client
        .call_tool(call("echo", json!({"text": "hello rmcp"})))
        .await
        .expect("echo");
    assert_eq!(tool_text(&echo, false), "hello rmcp");
    // Results carry `resultType` in 2026-07-28 only (a 2025-11-25 result has no such field).
    let result_type = to_json(&echo)["resultType"].clone();
    match era {
        Era::Stateless => assert_eq!(result_type, "complete"),
        Era::Handshake => assert_eq!(result_type, Value::Null),
    }
    let add = client
        .call_tool(call("add", json!({"a": 2, "b": 40})))
        .await
        .expect("add");
    assert_eq!(
        tool_text(&add, false).parse::<f64>().expect("a number"),
        42.0
    );
    let fail = client
        .call_tool(call("fail", json!({"message": "boom"})))
        .await
        .expect("fail answers a result");
    assert!(tool_text(&fail, true).contains("boom"));
    assert_eq!(
        error_code(
            client
                .call_tool(call("no_such_tool_interop", json!({})))
                .await
        ),
        -32602
    );

    // rmcp puts a progressToken on every request; `sleep` reports against it.
    let slept = client
        .call_tool(call("sleep", json!({"ms": 300})))
        .await
        .expect("sleep");
    tool_text(&slept, false);
    let progress = seen.progress.lock().expect("lock").clone();
    assert!(!progress.is_empty(), "no progress reached on_progress");
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "progress strictly increasing: {progress:?}"
    );

    // Asking the client from inside a tool.
    if era == Era::Stateless {
        // One round by hand: the ask comes back as an `input_required` result.
        let first = client
            .call_tool_once(call("ask_elicitation", json!({"message": "Who are you?"})))
            .await
            .expect("ask_elicitation, first round");
        let CallToolResponse::InputRequired(input) = first else {
            panic!("expected input_required, got {first:?}");
        };
        let input = to_json(&input);
        assert_eq!(input["resultType"], "input_required", "{input}");
        let asks = input["inputRequests"].as_object().expect("inputRequests");
        assert_eq!(asks.len(), 1, "{input}");
        let ask = asks.values().next().expect("one ask");
        assert_eq!(ask["method"], "elicitation/create", "{input}");
        assert_eq!(ask["params"]["message"], "Who are you?", "{input}");
        assert!(input["requestState"].is_string(), "{input}");
        assert!(seen.asked("elicitation/create").is_empty());
    }
    let answered = call_for_json(
        &client,
        "ask_elicitation",
        json!({"message": "Who are you?"}),
    )
    .await;
    assert_eq!(answered, json!({"action": "accept", "content": profile()}));
    let asked = seen.asked("elicitation/create");
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    assert_eq!(asked[0]["message"], "Who are you?");
    assert_eq!(asked[0]["mode"], "form");
    let schema = &asked[0]["requestedSchema"];
    assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");
    assert_eq!(
        schema["properties"]["subscribe"]["type"], "boolean",
        "{schema}"
    );

    let sampling_args = json!({
        "prompt": "What is 6 x 7?",
        "maxTokens": 64,
        "systemPrompt": "Answer briefly."
    });
    let answered = call_for_json(&client, "ask_sampling", sampling_args.clone()).await;
    assert_eq!(
        answered,
        json!({
            "role": "assistant",
            "model": MODEL,
            "text": "sampled: What is 6 x 7?",
            "stopReason": "endTurn",
        })
    );
    let asked = seen.asked("sampling/createMessage");
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    assert_eq!(
        asked[0]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": sampling_args["prompt"]}}])
    );
    assert_eq!(asked[0]["maxTokens"], sampling_args["maxTokens"]);
    assert_eq!(asked[0]["systemPrompt"], sampling_args["systemPrompt"]);

    let answered = call_for_json(&client, "ask_roots", json!({})).await;
    let roots: Vec<Value> = ROOTS
        .iter()
        .map(|(uri, name)| json!({"uri": uri, "name": name}))
        .collect();
    assert_eq!(answered, json!({ "roots": roots }));
    assert_eq!(seen.asked("roots/list").len(), 1);

    // Resources, prompts, completion.
    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    for uri in ["mcp-ws://demo/readme", WATCHED_A, WATCHED_B] {
        assert!(uris.contains(&uri), "{uri} in {uris:?}");
    }
    let read = client
        .read_resource(ReadResourceRequestParams::new("mcp-ws://demo/readme"))
        .await
        .expect("resources/read");
    let read = to_json(&read);
    assert_eq!(read["contents"][0]["uri"], "mcp-ws://demo/readme", "{read}");
    assert_eq!(read["contents"][0]["mimeType"], "text/markdown", "{read}");
    let text = read["contents"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("# mcp-ws demo"), "{read}");

    let prompt = client
        .get_prompt(
            GetPromptRequestParams::new("greet").with_arguments(arguments(json!({"name": "Ada"}))),
        )
        .await
        .expect("prompts/get");
    let prompt = to_json(&prompt);
    assert_eq!(prompt["messages"][0]["role"], "user", "{prompt}");
    let text = prompt["messages"][0]["content"]["text"]
        .as_str()
        .expect("text");
    assert!(text.contains("Ada"), "{prompt}");
    assert_eq!(
        error_code(
            client
                .get_prompt(GetPromptRequestParams::new("greet"))
                .await
        ),
        -32602
    );
    let completions = client
        .complete_prompt_simple("greet", "name", "A")
        .await
        .expect("completion/complete");
    assert!(
        !completions.is_empty() && completions.iter().all(|c| c.starts_with('A')),
        "{completions:?}"
    );
    assert!(completions.iter().any(|c| c == "Ada"), "{completions:?}");

    // Changes made while the client is idle.
    let (mut notifications, listening) = listen_for_changes(&client, era, from_handler).await;
    apply(server, "add").expect("add");
    assert_eq!(
        notifications.methods(3, "list changes after add").await,
        LIST_CHANGES
    );
    assert!(tool_names(&client).await.iter().any(|n| n == ADDED_TOOL));
    let resources = client.list_all_resources().await.expect("resources/list");
    assert!(resources.iter().any(|r| r.uri == ADDED_RESOURCE));
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert!(prompts.iter().any(|p| p.name == ADDED_PROMPT));
    let added = client
        .call_tool(call(ADDED_TOOL, json!({})))
        .await
        .expect("the added tool");
    assert_eq!(tool_text(&added, false), "added at run time");

    apply(server, "remove").expect("remove");
    assert_eq!(
        notifications.methods(3, "list changes after remove").await,
        LIST_CHANGES
    );
    assert!(!tool_names(&client).await.iter().any(|n| n == ADDED_TOOL));

    expect_update_of_only(server, &mut notifications, WATCHED_A, WATCHED_B).await;

    client.cancel().await.expect("the client closes");
    if let Some(mut listening) = listening {
        listening.pump.await.expect("the listen pump");
        let stray: Vec<Value> = std::iter::from_fn(|| listening.stray.try_recv().ok()).collect();
        assert_eq!(
            stray,
            Vec::<Value>::new(),
            "notifications outside the listen stream"
        );
    }
}

async fn run_over_http(era: Era) {
    let server = interop_server();
    let (handler, from_handler) = handler();
    let seen = handler.0.clone();
    let client = connect_http(&server, handler, era.lifecycle()).await;
    scenario(&server, client, seen, from_handler, era).await;
}

async fn run_over_ws(era: Era) {
    let server = interop_server();
    let (handler, from_handler) = handler();
    let seen = handler.0.clone();
    let unreadable = Unreadable::default();
    let client = connect_ws(&server, handler, era.lifecycle(), unreadable.clone()).await;
    scenario(&server, client, seen, from_handler, era).await;
    let unreadable = unreadable.lock().expect("lock").clone();
    assert!(
        unreadable.is_empty(),
        "frames rmcp could not read: {unreadable:#?}"
    );
}

#[tokio::test]
async fn rmcp_2026_07_28_over_streamable_http() {
    run_over_http(Era::Stateless).await;
}

#[tokio::test]
async fn rmcp_2026_07_28_over_websocket() {
    run_over_ws(Era::Stateless).await;
}

#[tokio::test]
async fn rmcp_2025_11_25_over_websocket() {
    run_over_ws(Era::Handshake).await;
}

#[tokio::test]
async fn rmcp_2025_11_25_over_streamable_http() {
    run_over_http(Era::Handshake).await;
}

/// rmcp's `Auto` mode probes with `server/discover` and falls back to `initialize` only when
/// the answer says the server is legacy: this dual-era server is taken for a 2026-07-28 one,
/// over both transports, and serves it so.
#[tokio::test]
async fn rmcp_auto_mode_settles_on_2026_07_28() {
    let server = interop_server();
    let auto = || ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let unreadable = Unreadable::default();
    let clients = [
        connect_http(&server, handler().0, auto()).await,
        connect_ws(&server, handler().0, auto(), unreadable.clone()).await,
    ];
    for client in clients {
        let info = client.peer_info().expect("peer info");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
        let echo = client
            .call_tool(call("echo", json!({"text": "auto"})))
            .await
            .expect("echo");
        let echo = to_json(&echo);
        assert_eq!(echo["content"][0]["text"], "auto", "{echo}");
        assert_eq!(
            echo["resultType"], "complete",
            "a 2026-07-28 result: {echo}"
        );
        client.cancel().await.expect("the client closes");
    }
    assert!(unreadable.lock().expect("lock").is_empty());
}
