//! Runtime registries: tools, resources, resource templates and prompts added, removed,
//! enabled and disabled through `RunningServer::registry()` while sessions are live.
//!
//! Rules checked: every change reaches every initialized session (20 of them, on two server
//! threads) as `notifications/{tools,resources,prompts}/list_changed` exactly once (a `ping`
//! barrier after it shows no second copy), and the next `*/list` shows it; a change that
//! changes nothing (removing what is not there, enabling what is enabled, a refused
//! registration) sends nothing; a burst of changes made while a session's thread is busy
//! reaches it coalesced (at least one notification, fewer than the changes), and a burst
//! larger than the change bus holds marks every list and subscription changed (spurious
//! notifications rather than lost ones); a session not
//! yet initialized hears of no change, not even after it initializes; a session hears only
//! of the kinds declared to it at `initialize`; a duplicate registration is
//! `RegistryError::Duplicate` and leaves the first in place; a tool whose input or output
//! schema describes no object (a `Json` list) is `RegistryError::InvalidToolSchema`, at
//! build time and at run time; a disabled tool is an unknown
//! tool (-32602) and not listed, and so on for the other kinds.

use crate::support::*;
use mcp_ws::model::{GetPromptResult, PromptMessage, ResourceContents};
use mcp_ws::{
    Prompt, Registry, RegistryError, Resource, ResourceTemplate, Server, Tool, ToolError,
};
use serde_json::{json, Value};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// A tool that answers `answer`.
fn tool(name: &str, answer: &str) -> Tool {
    let answer = answer.to_owned();
    Tool::new(name, format!("answers {answer}"), move |_: NoArgs, _ctx| {
        let answer = answer.clone();
        async move { Ok::<_, ToolError>(answer) }
    })
}

fn template(uri_template: &str) -> ResourceTemplate {
    ResourceTemplate::new(
        uri_template,
        "extra-template",
        |uri, vars, _ctx| async move {
            Ok(ResourceContents::text(
                uri,
                "text/plain",
                format!("id={}", vars["id"]),
            ))
        },
    )
}

fn prompt(name: &str) -> Prompt {
    Prompt::new(name, "a test prompt", |_args, _ctx| async move {
        Ok(GetPromptResult::new(vec![PromptMessage::user("hi")]))
    })
}

/// Every key of a list (all pages), in the order served.
async fn list_keys(client: &mut Client, method: &str, member: &str, key: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor: Option<Value> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let response = client.request(method, params).await;
        let result = response["result"].clone();
        let entries = result[member]
            .as_array()
            .unwrap_or_else(|| panic!("{method} lists {member}: {response}"));
        keys.extend(
            entries
                .iter()
                .map(|e| e[key].as_str().expect("key is a string").to_owned()),
        );
        match result.get("nextCursor") {
            Some(next) => cursor = Some(next.clone()),
            None => return keys,
        }
    }
}

/// Reads the next frame, which must be the notification `method`, then proves with a
/// barrier that no second copy (nor anything else) follows.
async fn expect_exactly_one(client: &mut Client, method: &str) {
    let frame = client.recv().await;
    assert_eq!(frame["method"], method, "expected {method}, got {frame}");
    assert!(
        frame.get("id").is_none(),
        "a notification has no id: {frame}"
    );
    client.expect_nothing_pending().await;
}

/// One change made through the registry, what it must announce, and where it must show.
struct Change {
    name: &'static str,
    apply: fn(&Registry) -> bool,
    notification: &'static str,
    list: &'static str,
    member: &'static str,
    key_field: &'static str,
    key: &'static str,
    listed_after: bool,
}

#[tokio::test]
async fn every_change_reaches_every_initialized_session_exactly_once() {
    let mut s = settings();
    // Sessions on two threads: each thread's fan-out must reach its own sessions.
    s.server.workers = 2;
    let server = start(s);
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(Client::initialized(&server).await);
    }
    let changes = [
        Change {
            name: "add tool",
            apply: |r| r.add_tool(tool("extra", "x")).is_ok(),
            notification: "notifications/tools/list_changed",
            list: "tools/list",
            member: "tools",
            key_field: "name",
            key: "extra",
            listed_after: true,
        },
        Change {
            name: "disable tool",
            apply: |r| r.disable_tool("extra"),
            notification: "notifications/tools/list_changed",
            list: "tools/list",
            member: "tools",
            key_field: "name",
            key: "extra",
            listed_after: false,
        },
        Change {
            name: "enable tool",
            apply: |r| r.enable_tool("extra"),
            notification: "notifications/tools/list_changed",
            list: "tools/list",
            member: "tools",
            key_field: "name",
            key: "extra",
            listed_after: true,
        },
        Change {
            name: "remove tool",
            apply: |r| r.remove_tool("extra"),
            notification: "notifications/tools/list_changed",
            list: "tools/list",
            member: "tools",
            key_field: "name",
            key: "extra",
            listed_after: false,
        },
        Change {
            name: "add resource",
            apply: |r| {
                r.add_resource(Resource::text("test://extra", "extra", "text/plain", "x"))
                    .is_ok()
            },
            notification: "notifications/resources/list_changed",
            list: "resources/list",
            member: "resources",
            key_field: "uri",
            key: "test://extra",
            listed_after: true,
        },
        Change {
            name: "disable resource",
            apply: |r| r.disable_resource("test://extra"),
            notification: "notifications/resources/list_changed",
            list: "resources/list",
            member: "resources",
            key_field: "uri",
            key: "test://extra",
            listed_after: false,
        },
        Change {
            name: "enable resource",
            apply: |r| r.enable_resource("test://extra"),
            notification: "notifications/resources/list_changed",
            list: "resources/list",
            member: "resources",
            key_field: "uri",
            key: "test://extra",
            listed_after: true,
        },
        Change {
            name: "remove resource",
            apply: |r| r.remove_resource("test://extra"),
            notification: "notifications/resources/list_changed",
            list: "resources/list",
            member: "resources",
            key_field: "uri",
            key: "test://extra",
            listed_after: false,
        },
        Change {
            name: "add template",
            apply: |r| r.add_resource_template(template("test://t/{id}")).is_ok(),
            notification: "notifications/resources/list_changed",
            list: "resources/templates/list",
            member: "resourceTemplates",
            key_field: "uriTemplate",
            key: "test://t/{id}",
            listed_after: true,
        },
        Change {
            name: "disable template",
            apply: |r| r.disable_resource_template("test://t/{id}"),
            notification: "notifications/resources/list_changed",
            list: "resources/templates/list",
            member: "resourceTemplates",
            key_field: "uriTemplate",
            key: "test://t/{id}",
            listed_after: false,
        },
        Change {
            name: "enable template",
            apply: |r| r.enable_resource_template("test://t/{id}"),
            notification: "notifications/resources/list_changed",
            list: "resources/templates/list",
            member: "resourceTemplates",
            key_field: "uriTemplate",
            key: "test://t/{id}",
            listed_after: true,
        },
        Change {
            name: "remove template",
            apply: |r| r.remove_resource_template("test://t/{id}"),
            notification: "notifications/resources/list_changed",
            list: "resources/templates/list",
            member: "resourceTemplates",
            key_field: "uriTemplate",
            key: "test://t/{id}",
            listed_after: false,
        },
        Change {
            name: "add prompt",
            apply: |r| r.add_prompt(prompt("extra")).is_ok(),
            notification: "notifications/prompts/list_changed",
            list: "prompts/list",
            member: "prompts",
            key_field: "name",
            key: "extra",
            listed_after: true,
        },
        Change {
            name: "disable prompt",
            apply: |r| r.disable_prompt("extra"),
            notification: "notifications/prompts/list_changed",
            list: "prompts/list",
            member: "prompts",
            key_field: "name",
            key: "extra",
            listed_after: false,
        },
        Change {
            name: "enable prompt",
            apply: |r| r.enable_prompt("extra"),
            notification: "notifications/prompts/list_changed",
            list: "prompts/list",
            member: "prompts",
            key_field: "name",
            key: "extra",
            listed_after: true,
        },
        Change {
            name: "remove prompt",
            apply: |r| r.remove_prompt("extra"),
            notification: "notifications/prompts/list_changed",
            list: "prompts/list",
            member: "prompts",
            key_field: "name",
            key: "extra",
            listed_after: false,
        },
    ];
    for change in &changes {
        assert!(
            (change.apply)(server.registry()),
            "{} took effect",
            change.name
        );
        for client in &mut clients {
            expect_exactly_one(client, change.notification).await;
            let keys = list_keys(client, change.list, change.member, change.key_field).await;
            assert_eq!(
                keys.iter().any(|k| k == change.key),
                change.listed_after,
                "after {}: {} gives {keys:?}",
                change.name,
                change.list
            );
        }
    }
}

#[tokio::test]
async fn a_change_that_changes_nothing_announces_nothing() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let registry = server.registry();
    assert!(!registry.remove_tool("never-registered"));
    assert!(!registry.enable_tool("echo"), "echo is enabled already");
    assert!(!registry.disable_tool("never-registered"));
    assert!(!registry.remove_resource("test://never"));
    assert!(!registry.enable_resource("mcp-ws://demo/readme"));
    assert!(!registry.remove_resource_template("test://never/{id}"));
    assert!(!registry.remove_prompt("never"));
    assert!(!registry.enable_prompt("greet"));
    assert!(registry.add_tool(tool("echo", "impostor")).is_err());
    client.expect_nothing_pending().await;
    // The same session still hears of a real change: the silence above was not deafness.
    assert!(registry.disable_tool("echo"));
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
}

/// A tool that blocks its server thread until the test releases it: the only way to hold a
/// session's thread busy while changes are published, so that they pile up before the
/// session looks. (Blocking inside an actor is exactly what the server must never do; this
/// test tool does it on purpose.)
fn blocking_tool() -> (Tool, mpsc::Receiver<()>, mpsc::SyncSender<()>) {
    let (entered_tx, entered_rx) = mpsc::sync_channel::<()>(1);
    let (release_tx, release_rx) = mpsc::sync_channel::<()>(1);
    let release_rx = Arc::new(Mutex::new(release_rx));
    let block = Tool::new("block", "blocks its thread", move |_: NoArgs, _ctx| {
        let _ = entered_tx.send(());
        let released = release_rx
            .lock()
            .expect("lock")
            .recv_timeout(READ_TIMEOUT)
            .is_ok();
        async move { Ok::<_, ToolError>(if released { "released" } else { "timed out" }) }
    });
    (block, entered_rx, release_tx)
}

#[tokio::test]
async fn a_burst_of_changes_while_the_session_is_busy_is_coalesced() {
    const BURST: usize = 50;
    let (block, entered, release) = blocking_tool();
    // One server thread: the blocked tool holds the session and its thread's fan-out.
    let server = start_with(settings(), |b| b.tool(block));
    let mut client = Client::initialized(&server).await;
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":"busy","method":"tools/call","params":{"name":"block"}}),
        )
        .await;
    tokio::task::spawn_blocking(move || entered.recv_timeout(READ_TIMEOUT))
        .await
        .expect("join")
        .expect("the tool is running and holds its thread");
    for i in 0..BURST {
        server
            .registry()
            .add_tool(tool(&format!("burst-{i:02}"), "x"))
            .expect("a new name registers");
    }
    release.send(()).expect("release");
    let response = client.recv_response(&json!("busy")).await;
    assert_eq!(response["result"]["content"][0]["text"], "released");
    let frames = client.drain_until_barrier().await;
    let notifications = frames
        .iter()
        .filter(|f| f["method"] == "notifications/tools/list_changed")
        .count();
    assert!(
        frames
            .iter()
            .all(|f| f["method"] == "notifications/tools/list_changed"),
        "only list changes: {frames:?}"
    );
    assert!(
        (1..BURST).contains(&notifications),
        "{BURST} changes gave {notifications} notifications"
    );
    let names = list_keys(&mut client, "tools/list", "tools", "name").await;
    for i in 0..BURST {
        let name = format!("burst-{i:02}");
        assert!(names.contains(&name), "{name} listed: {names:?}");
    }
}

#[tokio::test]
async fn a_fan_out_that_falls_behind_marks_everything_changed() {
    // More changes than the change bus holds (1024) while the thread is blocked: the
    // thread's fan-out loses track, and says so to its sessions rather than say nothing.
    const TOGGLES: usize = 1100;
    let (block, entered, release) = blocking_tool();
    let server = start_with(settings(), |b| b.tool(block));
    let mut client = Client::initialized(&server).await;
    let subscribed = client
        .request(
            "resources/subscribe",
            json!({"uri": "mcp-ws://demo/readme"}),
        )
        .await;
    assert_eq!(subscribed["result"], json!({}));
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":"busy","method":"tools/call","params":{"name":"block"}}),
        )
        .await;
    tokio::task::spawn_blocking(move || entered.recv_timeout(READ_TIMEOUT))
        .await
        .expect("join")
        .expect("the tool is running and holds its thread");
    for i in 0..TOGGLES {
        let changed = if i % 2 == 0 {
            server.registry().disable_tool("echo")
        } else {
            server.registry().enable_tool("echo")
        };
        assert!(changed);
    }
    release.send(()).expect("release");
    let response = client.recv_response(&json!("busy")).await;
    assert_eq!(response["result"]["content"][0]["text"], "released");
    let frames = client.drain_until_barrier().await;
    let count = |method: &str| frames.iter().filter(|f| f["method"] == method).count();
    // Tools changed: coalesced (the fan-out marks as many events as it handles in one run).
    let tools = count("notifications/tools/list_changed");
    assert!(
        (1..TOGGLES).contains(&tools),
        "{tools} for {TOGGLES} changes"
    );
    // The others did not change: they are marked once, when the fan-out lost track.
    for method in [
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/updated",
    ] {
        assert_eq!(count(method), 1, "{method}: {frames:?}");
    }
    let updated = frames
        .iter()
        .find(|f| f["method"] == "notifications/resources/updated")
        .expect("an update");
    assert_eq!(updated["params"]["uri"], "mcp-ws://demo/readme");
    let names = list_keys(&mut client, "tools/list", "tools", "name").await;
    assert!(
        names.contains(&"echo".to_owned()),
        "an even number of toggles: {names:?}"
    );
}

#[tokio::test]
async fn a_session_not_yet_initialized_hears_of_no_change() {
    let server = start(settings());
    let mut witness = Client::initialized(&server).await;
    let mut early = Client::connect(&server).await;
    assert!(server.registry().add_tool(tool("extra", "x")).is_ok());
    // Once the witness heard of it, the change went through the fan-out of the thread both
    // sessions live on.
    expect_exactly_one(&mut witness, "notifications/tools/list_changed").await;
    early.expect_nothing_pending().await;
    let response = early
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(response["result"]["protocolVersion"], "2025-11-25");
    early
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    // The change happened before it initialized: it learns of it from its first list.
    early.expect_nothing_pending().await;
    let names = list_keys(&mut early, "tools/list", "tools", "name").await;
    assert!(names.contains(&"extra".to_owned()), "{names:?}");
    // From now on it hears of changes like the others.
    assert!(server.registry().remove_tool("extra"));
    expect_exactly_one(&mut early, "notifications/tools/list_changed").await;
    expect_exactly_one(&mut witness, "notifications/tools/list_changed").await;
}

#[tokio::test]
async fn a_session_hears_only_of_the_kinds_declared_to_it() {
    let server = start_bare(settings(), |b| b.tool(tool("only", "x")));
    let mut early = Client::initialized(&server).await;
    let caps = {
        let mut probe = Client::connect(&server).await;
        probe
            .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
            .await["result"]["capabilities"]
            .clone()
    };
    assert!(caps.get("prompts").is_none(), "{caps}");
    assert!(caps.get("resources").is_none(), "{caps}");

    assert!(server.registry().add_prompt(prompt("late")).is_ok());
    assert!(server
        .registry()
        .add_resource(Resource::text("test://late", "late", "text/plain", "x"))
        .is_ok());
    // Prompts and resources were never declared to this session: it cannot list them, so it
    // is not told they changed.
    early.expect_nothing_pending().await;
    let response = early.request("prompts/list", json!({})).await;
    assert_eq!(response["error"]["code"], -32601, "{response}");
    // Tools were declared: it still hears of those.
    assert!(server.registry().add_tool(tool("more", "y")).is_ok());
    expect_exactly_one(&mut early, "notifications/tools/list_changed").await;

    // A session that initializes now is told of every kind, and hears of each.
    let mut late = Client::initialized(&server).await;
    let names = list_keys(&mut late, "prompts/list", "prompts", "name").await;
    assert_eq!(names, ["late"]);
    assert!(server.registry().remove_prompt("late"));
    expect_exactly_one(&mut late, "notifications/prompts/list_changed").await;
    assert!(server.registry().remove_resource("test://late"));
    expect_exactly_one(&mut late, "notifications/resources/list_changed").await;
    early.expect_nothing_pending().await;
}

#[tokio::test]
async fn a_duplicate_registration_is_refused_and_the_first_stays() {
    let server = start_with(settings(), |b| {
        b.resource_template(template("test://t/{id}"))
    });
    let mut client = Client::initialized(&server).await;
    let registry = server.registry();
    let before = client.request("tools/list", json!({})).await;

    assert_eq!(
        registry.add_tool(tool("echo", "impostor")),
        Err(RegistryError::DuplicateVersion {
            name: "echo".into(),
            version: "1".into(),
        })
    );
    assert_eq!(
        registry.add_resource(Resource::text(
            "mcp-ws://demo/readme",
            "impostor",
            "text/plain",
            "impostor"
        )),
        Err(RegistryError::Duplicate {
            kind: "resource",
            key: "mcp-ws://demo/readme".into()
        })
    );
    assert_eq!(
        registry.add_resource_template(
            ResourceTemplate::new("test://t/{id}", "impostor", |uri, _vars, _ctx| async move {
                Ok(ResourceContents::text(uri, "text/plain", "impostor"))
            })
        ),
        Err(RegistryError::Duplicate {
            kind: "resource template",
            key: "test://t/{id}".into()
        })
    );
    assert_eq!(
        registry.add_prompt(prompt("greet")),
        Err(RegistryError::Duplicate {
            kind: "prompt",
            key: "greet".into()
        })
    );
    // Nothing changed, so nothing was announced, and the first of each still answers.
    client.expect_nothing_pending().await;
    assert_eq!(
        client.request("tools/list", json!({})).await["result"],
        before["result"]
    );
    let echo = client.call_tool("echo", json!({"text": "still me"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "still me");
    let readme = client
        .request("resources/read", json!({"uri": "mcp-ws://demo/readme"}))
        .await;
    let text = readme["result"]["contents"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("# mcp-ws demo"), "{readme}");
    let templated = client
        .request("resources/read", json!({"uri": "test://t/7"}))
        .await;
    assert_eq!(templated["result"]["contents"][0]["text"], "id=7");
    let greet = client
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        greet["result"]["messages"][0]["content"]["text"],
        "Please greet Ada warmly."
    );
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Reading {
    celsius: f64,
}

/// Tools whose schemas do not describe objects: a `Json` output of a list, and raw
/// arguments described as a string.
fn tools_without_object_schemas() -> [Tool; 2] {
    [
        Tool::new("readings", "a list", |_: NoArgs, _ctx| async move {
            Ok::<_, ToolError>(mcp_ws::Json(vec![Reading { celsius: 1.0 }]))
        }),
        Tool::from_handler(
            "stringly",
            "takes a string",
            json!({"type": "string"}),
            Hold(Arc::new(tokio::sync::Semaphore::new(1))),
        ),
    ]
}

#[tokio::test]
async fn a_tool_whose_schema_is_no_object_is_refused() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let before = client.request("tools/list", json!({})).await;
    let [readings, stringly] = tools_without_object_schemas();
    assert_eq!(
        server.registry().add_tool(readings),
        Err(RegistryError::InvalidToolSchema {
            tool: "readings".into(),
            member: "outputSchema"
        })
    );
    assert_eq!(
        server.registry().add_tool(stringly),
        Err(RegistryError::InvalidToolSchema {
            tool: "stringly".into(),
            member: "inputSchema"
        })
    );
    client.expect_nothing_pending().await;
    assert_eq!(
        client.request("tools/list", json!({})).await["result"],
        before["result"]
    );
    for tool in tools_without_object_schemas() {
        let built = Server::builder().settings(settings()).tool(tool).build();
        assert!(
            matches!(
                built,
                Err(mcp_ws::Error::Registry(
                    RegistryError::InvalidToolSchema { .. }
                ))
            ),
            "the builder refuses it too"
        );
    }
}

#[test]
fn the_builder_refuses_duplicates_and_invalid_templates() {
    let duplicate = Server::builder()
        .settings(settings())
        .tool(tool("twice", "a"))
        .tool(tool("twice", "b"))
        .build();
    match duplicate {
        // A tool name may hold several versions; the same name in the same version is taken.
        Err(mcp_ws::Error::Registry(RegistryError::DuplicateVersion { name, version })) => {
            assert_eq!((name.as_str(), version.as_str()), ("twice", "1"));
        }
        Err(other) => panic!("expected a duplicate, got {other}"),
        Ok(_) => panic!("expected a duplicate, got a server"),
    }
    let registry = Registry::default();
    assert!(matches!(
        registry.add_resource_template(template("test://{+path}")),
        Err(RegistryError::InvalidTemplate(_))
    ));
}

/// A session keeps the tools it called while the registry stands still: every change
/// reaches its next call (a disabled tool is unknown, a replaced one runs its new code).
#[tokio::test]
async fn a_session_calls_what_the_registry_holds_now_after_each_change() {
    let server = start_with(settings(), |b| b.tool(tool("versioned", "first")));
    let mut client = Client::initialized(&server).await;
    let registry = server.registry();
    let answer = |response: &Value| response["result"]["content"][0]["text"].clone();

    for _ in 0..2 {
        let called = client.call_tool("versioned", json!({})).await;
        assert_eq!(answer(&called), "first", "{called}");
    }
    assert!(registry.disable_tool("versioned"));
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
    let id = client.fresh_id();
    let response = client
        .request_with_id(id.clone(), "tools/call", json!({"name": "versioned"}))
        .await;
    assert_eq!(
        assert_error(&response, &id, -32602)["data"]["tool"],
        "versioned"
    );

    assert!(registry.enable_tool("versioned"));
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
    let called = client.call_tool("versioned", json!({})).await;
    assert_eq!(answer(&called), "first", "{called}");

    assert!(registry.remove_tool("versioned"));
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
    assert!(registry.add_tool(tool("versioned", "second")).is_ok());
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
    let called = client.call_tool("versioned", json!({})).await;
    assert_eq!(answer(&called), "second", "{called}");
}

#[tokio::test]
async fn a_disabled_entry_is_unknown_and_unlisted_until_enabled() {
    let server = start_with(settings(), |b| {
        b.resource_template(template("test://t/{id}"))
    });
    let mut client = Client::initialized(&server).await;
    let registry = server.registry();

    assert!(registry.disable_tool("echo"));
    expect_exactly_one(&mut client, "notifications/tools/list_changed").await;
    let id = client.fresh_id();
    let response = client
        .request_with_id(
            id.clone(),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    let error = assert_error(&response, &id, -32602);
    assert_eq!(error["data"]["tool"], "echo");
    let names = list_keys(&mut client, "tools/list", "tools", "name").await;
    assert!(!names.contains(&"echo".to_owned()), "{names:?}");

    assert!(registry.disable_prompt("greet"));
    expect_exactly_one(&mut client, "notifications/prompts/list_changed").await;
    let response = client
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let response = client
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "A"}}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");

    assert!(registry.disable_resource("mcp-ws://demo/readme"));
    expect_exactly_one(&mut client, "notifications/resources/list_changed").await;
    let response = client
        .request("resources/read", json!({"uri": "mcp-ws://demo/readme"}))
        .await;
    assert_eq!(response["error"]["code"], -32002, "{response}");

    assert!(registry.disable_resource_template("test://t/{id}"));
    expect_exactly_one(&mut client, "notifications/resources/list_changed").await;
    let response = client
        .request("resources/read", json!({"uri": "test://t/7"}))
        .await;
    assert_eq!(response["error"]["code"], -32002, "{response}");
    let templates = list_keys(
        &mut client,
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    )
    .await;
    assert!(templates.is_empty(), "{templates:?}");

    // Enabled again, each answers as before.
    assert!(registry.enable_tool("echo"));
    assert!(registry.enable_prompt("greet"));
    assert!(registry.enable_resource("mcp-ws://demo/readme"));
    assert!(registry.enable_resource_template("test://t/{id}"));
    let echo = client.call_tool("echo", json!({"text": "back"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "back");
    let greet = client
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert!(greet.get("result").is_some(), "{greet}");
    let readme = client
        .request("resources/read", json!({"uri": "mcp-ws://demo/readme"}))
        .await;
    assert!(readme.get("result").is_some(), "{readme}");
    let templated = client
        .request("resources/read", json!({"uri": "test://t/8"}))
        .await;
    assert_eq!(templated["result"]["contents"][0]["text"], "id=8");
}
