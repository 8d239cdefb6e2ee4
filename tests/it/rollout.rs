//! Tool versions and gray release (`[[rollout.rules]]`):
//!
//! - A tool may be registered in several versions; the same name and version twice is
//!   refused when the server is built.
//! - A session sees one version of a name, the same in `tools/list` and `tools/call`: with
//!   no rule the lowest; an identity allow-list serves its version to the identities listed
//!   and not to others; `percent` serves it to about that share of identities, each
//!   identity always to the same version (a new session, the same choice), and 0 and 100
//!   are exact.
//! - Removing a version while sessions are connected moves them to what remains.
//!
//! Over a real socket every client is `anonymous` (authentication is not in this build), so
//! rules naming `anonymous` drive the socket tests. Tests that need many identities host
//! sessions through the in-memory transport with the identity the perimeter would have
//! established (`MemorySession::start_as`), the server's own session core all the same.

use crate::support::*;

use mcp_ws::config::RolloutRule;
use mcp_ws::context::Identity;
use mcp_ws::testing::memory::{ClientFrame, MemorySession};
use mcp_ws::testing::shared::Shared;
use mcp_ws::testing::Admission;
use mcp_ws::{RequestContext, Server, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Query {
    q: String,
}

async fn search_v1(args: Query, _ctx: RequestContext) -> Result<String, ToolError> {
    Ok(format!("v1: {}", args.q))
}

async fn search_v2(args: Query, _ctx: RequestContext) -> Result<String, ToolError> {
    Ok(format!("v2: {}", args.q))
}

fn search_tools() -> [Tool; 2] {
    [
        Tool::new("search", "Searches (v1)", search_v1),
        Tool::new("search", "Searches (v2)", search_v2).version("2"),
    ]
}

fn rule(identities: &[&str], percent: f64) -> RolloutRule {
    RolloutRule {
        tool: "search".into(),
        version: "2".into(),
        identities: identities.iter().map(|s| s.to_string()).collect(),
        percent,
    }
}

fn settings_with(rules: Vec<RolloutRule>) -> Settings {
    let mut s = settings();
    s.rollout.rules = rules;
    s
}

/// The version a client sees in its list ("1" or "2", from the description) and the one
/// its call runs (from the answer); the test asserts they agree.
async fn seen_over_socket(client: &mut Client) -> (String, String) {
    let list = client.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    let search: Vec<&Value> = tools.iter().filter(|t| t["name"] == "search").collect();
    assert_eq!(search.len(), 1, "one version of a name per session: {list}");
    let listed = version_of_description(&search[0]["description"]);
    let call = client.call_tool("search", json!({"q": "cats"})).await;
    let called = version_of_answer(&call);
    (listed, called)
}

fn version_of_description(description: &Value) -> String {
    match description.as_str() {
        Some("Searches (v1)") => "1".into(),
        Some("Searches (v2)") => "2".into(),
        other => panic!("unexpected description {other:?}"),
    }
}

fn version_of_answer(response: &Value) -> String {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {response}"));
    let (version, query) = text.split_once(": ").expect("v<N>: query");
    assert_eq!(query, "cats");
    version.trim_start_matches('v').to_owned()
}

async fn socket_sees(rules: Vec<RolloutRule>) -> String {
    let server = start_with(settings_with(rules), |b| {
        let [v1, v2] = search_tools();
        b.tool(v2).tool(v1)
    });
    let mut client = Client::initialized(&server).await;
    let (listed, called) = seen_over_socket(&mut client).await;
    assert_eq!(listed, called, "the list and the call agree");
    listed
}

#[tokio::test]
async fn without_rules_a_session_sees_the_lowest_version() {
    assert_eq!(socket_sees(vec![]).await, "1");
}

#[tokio::test]
async fn an_identity_allow_list_serves_its_version_to_those_listed_only() {
    assert_eq!(socket_sees(vec![rule(&["anonymous"], 0.0)]).await, "2");
    assert_eq!(socket_sees(vec![rule(&["alice"], 0.0)]).await, "1");
}

#[tokio::test]
async fn zero_and_hundred_percent_are_exact() {
    assert_eq!(socket_sees(vec![rule(&[], 100.0)]).await, "2");
    assert_eq!(socket_sees(vec![rule(&[], 0.0)]).await, "1");
}

#[tokio::test]
async fn the_same_name_and_version_twice_is_refused() {
    let result = crate::demo::demo(Server::builder().settings(settings()))
        .tool(Tool::new("search", "one", search_v1).version("2"))
        .tool(Tool::new("search", "two", search_v2).version("2"))
        .build();
    let Err(error) = result else {
        panic!("a duplicate version must be refused");
    };
    let message = error.to_string();
    assert!(
        message.contains("\"search\"") && message.contains("\"2\""),
        "{message}"
    );
    // Another version of the same name is fine.
    let registry = mcp_ws::Registry::default();
    let [v1, v2] = search_tools();
    registry.add_tool(v2).expect("v2");
    registry.add_tool(v1).expect("v1");
    assert_eq!(registry.tool_versions("search"), ["1", "2"]);
}

#[tokio::test]
async fn removing_a_version_moves_its_sessions_to_what_remains() {
    let server = start_with(settings_with(vec![rule(&["anonymous"], 0.0)]), |b| {
        let [v1, v2] = search_tools();
        b.tool(v1).tool(v2)
    });
    let mut client = Client::initialized(&server).await;
    assert_eq!(
        seen_over_socket(&mut client).await,
        ("2".into(), "2".into())
    );
    assert!(server.registry().remove_tool_version("search", "2"));
    assert!(!server.registry().remove_tool_version("search", "2"));
    let changed = client.recv().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        seen_over_socket(&mut client).await,
        ("1".into(), "1".into())
    );
    assert!(server.registry().remove_tool_version("search", "1"));
    assert!(server.registry().tool_versions("search").is_empty());
    let gone = client.call_tool("search", json!({"q": "cats"})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
}

// ---- many identities, through the in-memory transport -------------------------------------

fn shared_with(rules: Vec<RolloutRule>) -> Arc<Shared> {
    let [v1, v2] = search_tools();
    Server::builder()
        .settings(settings_with(rules))
        .tool(v1)
        .tool(v2)
        .build()
        .expect("server builds")
        .shared()
        .clone()
}

/// A session of `subject`, initialized.
struct Session {
    addr: actix::Addr<MemorySession>,
    frames: UnboundedReceiver<String>,
    next_id: u64,
}

impl Session {
    async fn start(shared: &Arc<Shared>, subject: &str) -> Self {
        let mut admission = Admission::anonymous();
        admission.identity = Identity::authenticated(subject, Vec::new());
        let (addr, frames) = MemorySession::start_as(shared.clone(), admission);
        let mut session = Self {
            addr,
            frames,
            next_id: 0,
        };
        let init = session
            .request("initialize", initialize_params("2025-11-25"))
            .await;
        assert!(init.get("result").is_some(), "{init}");
        session.addr.do_send(ClientFrame(
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
        ));
        session
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.addr.do_send(ClientFrame(
            json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string(),
        ));
        loop {
            let frame = tokio::time::timeout(READ_TIMEOUT, self.frames.recv())
                .await
                .expect("a frame in time")
                .expect("the session is alive");
            let value: Value = serde_json::from_str(&frame).expect("JSON");
            if value["id"] == id {
                return value;
            }
        }
    }

    /// The version listed and the version called, asserted equal.
    async fn sees(&mut self) -> String {
        let list = self.request("tools/list", json!({})).await;
        let tools = list["result"]["tools"].as_array().expect("tools").clone();
        assert_eq!(tools.len(), 1, "one version of a name per session: {list}");
        let listed = version_of_description(&tools[0]["description"]);
        let call = self
            .request(
                "tools/call",
                json!({"name":"search","arguments":{"q":"cats"}}),
            )
            .await;
        assert_eq!(
            version_of_answer(&call),
            listed,
            "the call runs what the list shows"
        );
        listed
    }
}

#[actix_rt::test]
async fn an_allow_list_selects_identities_by_subject() {
    let shared = shared_with(vec![rule(&["alice", "carol"], 0.0)]);
    for (subject, expected) in [
        ("alice", "2"),
        ("bob", "1"),
        ("carol", "2"),
        ("anonymous", "1"),
    ] {
        let mut session = Session::start(&shared, subject).await;
        assert_eq!(session.sees().await, expected, "{subject}");
    }
}

#[actix_rt::test]
async fn a_percentage_reaches_about_that_share_and_each_identity_keeps_its_version() {
    let percent = 30.0;
    let shared = shared_with(vec![rule(&[], percent)]);
    let subjects: Vec<String> = (0..300).map(|i| format!("user-{i}@example.com")).collect();
    let mut first = Vec::new();
    for subject in &subjects {
        let mut session = Session::start(&shared, subject).await;
        first.push(session.sees().await);
    }
    let on_v2 = first.iter().filter(|v| *v == "2").count();
    // 300 identities at 30%: 90 expected, binomial sd 7.9; the hash is fixed, so this count
    // is the same on every run.
    assert!((60..=120).contains(&on_v2), "{on_v2} of 300 on v2");
    // What the server chose is the published, pure function of the rules.
    let rollout = mcp_ws::rollout::Rollout::new(&[rule(&[], percent)]);
    let versions: Vec<Arc<str>> = vec![Arc::from("1"), Arc::from("2")];
    for (subject, seen) in subjects.iter().zip(&first) {
        let chosen = rollout.choose(subject, "search", &versions);
        assert_eq!(*versions[chosen], **seen, "{subject}");
    }
    // Another session of the same identity (a reconnect, another node): the same version.
    let again = shared_with(vec![rule(&[], percent)]);
    for (subject, seen) in subjects.iter().zip(&first).take(60) {
        let mut session = Session::start(&again, subject).await;
        assert_eq!(&session.sees().await, seen, "{subject}");
    }
}
