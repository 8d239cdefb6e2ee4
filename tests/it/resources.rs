//! Resources, resource templates, subscriptions, completion and pagination, over a real
//! WebSocket.
//!
//! Rules checked: `resources/templates/list` lists each template; a read reaches a template
//! by expanding it (each variable one non-empty path segment, percent-decoded, and one
//! segment once decoded: no `/`, `\`, control character, `.` or `..`), a fixed
//! resource winning over a template that also matches; an unknown URI (or one that only
//! nearly matches) is -32002 naming it; `resources/subscribe` + `Registry::resource_updated`
//! sends `notifications/resources/updated` to the subscribed sessions only, once per update,
//! `resources/unsubscribe` stops it, subscriptions end with their session (the
//! `mcp_subscriptions` gauge), and more than `limits.max_subscriptions_per_session` are refused
//! (-32602); `completion/complete` completes prompt arguments and template variables (with
//! `context.arguments`), refuses unknown prompts, templates and arguments (-32602), and sends
//! at most 100 values with `total` and `hasMore`; with a small `limits.page_size` every list
//! is walked page by page and the pages concatenate to the full sorted list, while a garbage
//! cursor and a stale one (the list changed between pages) are -32602, never a restart from
//! page one; a slow read, render or completion does not hold up the session (a `ping`
//! answers meanwhile), and a panicking one answers -32603 while the session lives on.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;
use mcp_ws::model::{GetPromptResult, PromptMessage, ResourceContents};
use mcp_ws::resource::CompletionRequest;
use mcp_ws::{
    Prompt, PromptArgument, Resource, ResourceError, ResourceTemplate, RunningServer,
    ServerBuilder, Tool, ToolError,
};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A template whose reads answer with the variables they were given.
fn echo_template(uri_template: &str, name: &str) -> ResourceTemplate {
    ResourceTemplate::new(uri_template, name, |uri, vars, _ctx| async move {
        let mut pairs: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.sort();
        Ok(ResourceContents::text(uri, "text/plain", pairs.join(",")))
    })
    .description("answers with its variables")
    .mime_type("text/plain")
}

/// Candidates for the `org` and `user` variables of `test://users/{org}/{user}`: users
/// depend on the org already chosen (`context.arguments`).
async fn complete_user(request: CompletionRequest, _ctx: mcp_ws::RequestContext) -> Vec<String> {
    let candidates: Vec<String> = match request.argument.as_str() {
        "org" => vec!["acme".into(), "apex".into(), "zeta".into()],
        "user" => match request.context.get("org").map(String::as_str) {
            Some("acme") => vec!["ada".into(), "alan".into(), "bob".into()],
            Some(other) => vec![format!("{other}-admin")],
            None => vec!["nobody".into()],
        },
        _ => Vec::new(),
    };
    candidates
        .into_iter()
        .filter(|c| c.starts_with(&request.value))
        .collect()
}

/// Candidates for the `pick` prompt: `kind` from a short list; `item` depends on the kind,
/// and the kind `many` has `count` items (from the context), to go past 100.
async fn complete_pick(request: CompletionRequest, _ctx: mcp_ws::RequestContext) -> Vec<String> {
    match request.argument.as_str() {
        "kind" => ["fruit", "fish", "vegetable"]
            .iter()
            .filter(|k| k.starts_with(&request.value))
            .map(|k| (*k).to_owned())
            .collect(),
        "item" => match request.context.get("kind").map(String::as_str) {
            Some("fruit") => ["apple", "apricot", "banana"]
                .iter()
                .filter(|c| c.starts_with(&request.value))
                .map(|c| (*c).to_owned())
                .collect(),
            Some("many") => {
                let count: usize = request
                    .context
                    .get("count")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                (0..count).map(|i| format!("item-{i:03}")).collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

async fn render_pick(
    arguments: mcp_ws::prompt::PromptArguments,
    _ctx: mcp_ws::RequestContext,
) -> Result<GetPromptResult, mcp_ws::PromptError> {
    Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
        "pick a {}",
        arguments["kind"]
    ))]))
}

/// Everything the tests below read, complete and subscribe to.
fn fixtures(builder: ServerBuilder) -> ServerBuilder {
    builder
        .resource_template(echo_template("test://items/{id}/data", "item"))
        .resource_template(echo_template("test://pairs/{left}-{right}", "pair"))
        .resource_template(
            echo_template("test://users/{org}/{user}", "user").complete(complete_user),
        )
        .resource_template(echo_template("test://plain/{x}", "no completion"))
        .resource(Resource::text(
            "test://items/fixed/data",
            "fixed",
            "text/plain",
            "the fixed one",
        ))
        .prompt(
            Prompt::new("pick", "picks something", render_pick)
                .argument(PromptArgument::required("kind", "what kind"))
                .argument(PromptArgument::optional("item", "which one"))
                .complete(complete_pick),
        )
        .prompt(
            Prompt::new("plain", "no completion", render_pick)
                .argument(PromptArgument::required("kind", "what kind")),
        )
}

fn read_text(response: &Value) -> String {
    response["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text read: {response}"))
        .to_owned()
}

#[tokio::test]
async fn templates_are_listed() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    let response = client.request("resources/templates/list", json!({})).await;
    let templates = response["result"]["resourceTemplates"]
        .as_array()
        .expect("templates");
    let item = templates
        .iter()
        .find(|t| t["uriTemplate"] == "test://items/{id}/data")
        .unwrap_or_else(|| panic!("listed: {response}"));
    assert_eq!(item["name"], "item");
    assert_eq!(item["description"], "answers with its variables");
    assert_eq!(item["mimeType"], "text/plain");
    let listed: Vec<&str> = templates
        .iter()
        .map(|t| t["uriTemplate"].as_str().expect("uriTemplate"))
        .collect();
    for expected in [
        "test://items/{id}/data",
        "test://pairs/{left}-{right}",
        "test://users/{org}/{user}",
        "test://plain/{x}",
    ] {
        assert!(listed.contains(&expected), "{expected} in {listed:?}");
    }
    // Templates are not resources.
    let resources = client.request("resources/list", json!({})).await;
    assert!(
        !resources.to_string().contains("{id}"),
        "templates stay out of resources/list: {resources}"
    );
}

#[tokio::test]
async fn a_read_expands_the_template_and_percent_decodes_its_variables() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;

    let response = client.read_resource("test://items/42/data").await;
    assert_eq!(read_text(&response), "id=42");
    assert_eq!(
        response["result"]["contents"][0]["uri"],
        "test://items/42/data"
    );
    assert_eq!(response["result"]["contents"][0]["mimeType"], "text/plain");

    let response = client
        .read_resource("test://items/a%20b%3Fc%C3%A9/data")
        .await;
    assert_eq!(read_text(&response), "id=a b?cé");

    let response = client.read_resource("test://pairs/left-right").await;
    assert_eq!(read_text(&response), "left=left,right=right");

    // A fixed resource at a URI a template also matches is the one read.
    let response = client.read_resource("test://items/fixed/data").await;
    assert_eq!(read_text(&response), "the fixed one");
}

#[tokio::test]
async fn an_unknown_uri_is_resource_not_found() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    for uri in [
        "test://nowhere",
        "test://items//data",    // an empty variable
        "test://items/4/2/data", // a variable spans one segment only
        "test://items/42/datum", // the trailing literal differs
        "test://items/%zz/data", // not percent-encoding
        "test://items/%FF/data", // decodes to no UTF-8
        // Decodes to more than one path segment: a reader building a path from it would
        // leave its directory.
        "test://items/..%2F..%2Fetc%2Fpasswd/data",
        "test://items/%2E%2E/data",
        "test://items/..%5Csecret/data",
        "test://items/a%00b/data",
    ] {
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), "resources/read", json!({ "uri": uri }))
            .await;
        let error = assert_error(&response, &id, -32002);
        assert_eq!(error["data"]["uri"], uri, "{response}");
    }
    assert_server_alive(&server).await;
}

async fn subscribe(client: &mut Client, uri: &str) -> Value {
    client
        .request("resources/subscribe", json!({ "uri": uri }))
        .await
}

/// The next frame is `notifications/resources/updated` for `uri`, and nothing follows it.
async fn expect_one_update(client: &mut Client, uri: &str) {
    let frame = client.recv().await;
    assert_eq!(
        frame["method"], "notifications/resources/updated",
        "{frame}"
    );
    assert_eq!(frame["params"]["uri"], uri, "{frame}");
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn updates_reach_the_subscribed_sessions_only_until_they_unsubscribe() {
    let server = start_with(settings(), fixtures);
    let mut subscriber = Client::initialized(&server).await;
    let mut other = Client::initialized(&server).await;
    let readme = "mcp-ws://demo/readme";
    let templated = "test://items/7/data";
    assert_eq!(
        subscribe(&mut subscriber, readme).await["result"],
        json!({})
    );
    assert_eq!(
        subscribe(&mut subscriber, templated).await["result"],
        json!({})
    );
    assert_eq!(
        subscribe(&mut other, "test://items/8/data").await["result"],
        json!({})
    );
    assert_eq!(metric(&server, "mcp_subscriptions").await, 3);

    server.registry().resource_updated(readme);
    expect_one_update(&mut subscriber, readme).await;
    server.registry().resource_updated(templated);
    expect_one_update(&mut subscriber, templated).await;
    // Neither update was for the other session's URI.
    other.expect_nothing_pending().await;

    // Subscribing twice is one subscription: still one notification per update.
    assert_eq!(
        subscribe(&mut subscriber, readme).await["result"],
        json!({})
    );
    assert_eq!(metric(&server, "mcp_subscriptions").await, 3);
    server.registry().resource_updated(readme);
    expect_one_update(&mut subscriber, readme).await;

    let response = subscriber
        .request("resources/unsubscribe", json!({ "uri": readme }))
        .await;
    assert_eq!(response["result"], json!({}));
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);
    server.registry().resource_updated(readme);
    // The templated subscription still works: its update is the only frame to come.
    server.registry().resource_updated(templated);
    expect_one_update(&mut subscriber, templated).await;
    other.expect_nothing_pending().await;

    // Unsubscribing from what was never subscribed is harmless.
    let response = other
        .request("resources/unsubscribe", json!({ "uri": "test://never" }))
        .await;
    assert_eq!(response["result"], json!({}));
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);
}

#[tokio::test]
async fn a_subscription_to_an_unknown_uri_is_resource_not_found() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    let id = client.fresh_id();
    let response = client
        .request_with_id(
            id.clone(),
            "resources/subscribe",
            json!({"uri": "test://nowhere"}),
        )
        .await;
    let error = assert_error(&response, &id, -32002);
    assert_eq!(error["data"]["uri"], "test://nowhere");
    assert_eq!(metric(&server, "mcp_subscriptions").await, 0);
}

#[tokio::test]
async fn subscriptions_end_with_their_session() {
    let server = start_with(settings(), fixtures);
    let mut leaving = Client::initialized(&server).await;
    let mut staying = Client::initialized(&server).await;
    for uri in [
        "mcp-ws://demo/readme",
        "test://items/1/data",
        "test://items/2/data",
    ] {
        assert_eq!(subscribe(&mut leaving, uri).await["result"], json!({}));
    }
    assert_eq!(
        subscribe(&mut staying, "test://items/1/data").await["result"],
        json!({})
    );
    assert_eq!(metric(&server, "mcp_subscriptions").await, 4);
    leaving.hang_up().await;
    wait_metric(&server, "mcp_sessions", 1).await;
    wait_metric(&server, "mcp_subscriptions", 1).await;
    server.registry().resource_updated("test://items/1/data");
    expect_one_update(&mut staying, "test://items/1/data").await;
}

#[tokio::test]
async fn too_many_subscriptions_are_refused() {
    let mut s = settings();
    s.limits.max_subscriptions_per_session = 2;
    let server = start_with(s, fixtures);
    let mut client = Client::initialized(&server).await;
    assert_eq!(
        subscribe(&mut client, "test://items/1/data").await["result"],
        json!({})
    );
    assert_eq!(
        subscribe(&mut client, "test://items/2/data").await["result"],
        json!({})
    );
    let id = client.fresh_id();
    let response = client
        .request_with_id(
            id.clone(),
            "resources/subscribe",
            json!({"uri": "test://items/3/data"}),
        )
        .await;
    let error = assert_error(&response, &id, -32602);
    assert_eq!(error["data"]["limit"], 2);
    // The refused one is not subscribed; the two others are.
    server.registry().resource_updated("test://items/3/data");
    client.expect_nothing_pending().await;
    server.registry().resource_updated("test://items/2/data");
    expect_one_update(&mut client, "test://items/2/data").await;
    // What is held may be subscribed again, and a freed place may be taken.
    assert_eq!(
        subscribe(&mut client, "test://items/1/data").await["result"],
        json!({})
    );
    let response = client
        .request(
            "resources/unsubscribe",
            json!({"uri": "test://items/1/data"}),
        )
        .await;
    assert_eq!(response["result"], json!({}));
    assert_eq!(
        subscribe(&mut client, "test://items/3/data").await["result"],
        json!({})
    );
    // Another session has places of its own.
    let mut other = Client::initialized(&server).await;
    assert_eq!(
        subscribe(&mut other, "test://items/1/data").await["result"],
        json!({})
    );
    assert_eq!(metric(&server, "mcp_subscriptions").await, 3);
}

async fn complete(
    client: &mut Client,
    reference: Value,
    name: &str,
    value: &str,
    context: Option<Value>,
) -> Value {
    let mut params = json!({"ref": reference, "argument": {"name": name, "value": value}});
    if let Some(context) = context {
        params["context"] = json!({ "arguments": context });
    }
    client.request("completion/complete", params).await
}

fn values(response: &Value) -> Vec<String> {
    response["result"]["completion"]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("a completion: {response}"))
        .iter()
        .map(|v| v.as_str().expect("string").to_owned())
        .collect()
}

#[tokio::test]
async fn completion_of_prompt_arguments_and_template_variables() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    let pick = json!({"type": "ref/prompt", "name": "pick"});
    let users = json!({"type": "ref/resource", "uri": "test://users/{org}/{user}"});

    let response = complete(&mut client, pick.clone(), "kind", "f", None).await;
    assert_eq!(values(&response), ["fruit", "fish"]);
    assert_eq!(response["result"]["completion"]["total"], 2);
    assert_eq!(response["result"]["completion"]["hasMore"], false);
    let response = complete(
        &mut client,
        pick.clone(),
        "item",
        "ap",
        Some(json!({"kind": "fruit"})),
    )
    .await;
    assert_eq!(values(&response), ["apple", "apricot"]);
    let response = complete(&mut client, pick.clone(), "item", "", None).await;
    assert_eq!(values(&response), Vec::<String>::new());

    let response = complete(&mut client, users.clone(), "org", "a", None).await;
    assert_eq!(values(&response), ["acme", "apex"]);
    let response = complete(
        &mut client,
        users.clone(),
        "user",
        "a",
        Some(json!({"org": "acme"})),
    )
    .await;
    assert_eq!(values(&response), ["ada", "alan"]);
    let response = complete(
        &mut client,
        users.clone(),
        "user",
        "",
        Some(json!({"org": "zeta"})),
    )
    .await;
    assert_eq!(values(&response), ["zeta-admin"]);

    // A prompt or template without a completer offers nothing, without error.
    let plain = json!({"type": "ref/prompt", "name": "plain"});
    let response = complete(&mut client, plain, "kind", "f", None).await;
    assert_eq!(values(&response), Vec::<String>::new());
    assert_eq!(response["result"]["completion"]["total"], 0);
    let plain_template = json!({"type": "ref/resource", "uri": "test://plain/{x}"});
    let response = complete(&mut client, plain_template, "x", "", None).await;
    assert_eq!(values(&response), Vec::<String>::new());
}

#[tokio::test]
async fn completion_sends_at_most_100_values_with_total_and_has_more() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    let pick = json!({"type": "ref/prompt", "name": "pick"});
    for (count, sent, has_more) in [(150, 100, true), (100, 100, false), (99, 99, false)] {
        let context = json!({"kind": "many", "count": count.to_string()});
        let response = complete(&mut client, pick.clone(), "item", "", Some(context)).await;
        let got = values(&response);
        assert_eq!(got.len(), sent, "{count} candidates");
        // The first ones, in the completer's order.
        let expected: Vec<String> = (0..sent).map(|i| format!("item-{i:03}")).collect();
        assert_eq!(got, expected);
        assert_eq!(response["result"]["completion"]["total"], count);
        assert_eq!(response["result"]["completion"]["hasMore"], has_more);
    }
}

#[tokio::test]
async fn completion_of_unknown_prompts_templates_and_arguments_is_invalid_params() {
    let server = start_with(settings(), fixtures);
    let mut client = Client::initialized(&server).await;
    for (reference, argument) in [
        (json!({"type": "ref/prompt", "name": "nope"}), "kind"),
        (json!({"type": "ref/prompt", "name": "pick"}), "nope"),
        (
            json!({"type": "ref/resource", "uri": "test://nope/{id}"}),
            "id",
        ),
        // A URI is not a template: the ref names a template.
        (
            json!({"type": "ref/resource", "uri": "test://users/acme/ada"}),
            "user",
        ),
        (
            json!({"type": "ref/resource", "uri": "test://users/{org}/{user}"}),
            "nope",
        ),
        (json!({"type": "ref/nothing", "name": "pick"}), "kind"),
    ] {
        let id = client.fresh_id();
        let response = client
            .request_with_id(
                id.clone(),
                "completion/complete",
                json!({"ref": reference, "argument": {"name": argument, "value": ""}}),
            )
            .await;
        assert_error(&response, &id, -32602);
    }
    assert_server_alive(&server).await;
}

fn named_tool(name: &str) -> Tool {
    Tool::new(name, "a listed tool", |_: NoArgs, _ctx| async move {
        Ok::<_, ToolError>("x")
    })
}

fn named_prompt(name: &str) -> Prompt {
    Prompt::new(name, "a listed prompt", |_args, _ctx| async move {
        Ok(GetPromptResult::new(vec![PromptMessage::user("x")]))
    })
}

/// Names registered out of order, so that the served order is the server's doing.
const NAMES: [&str; 7] = [
    "golf", "alpha", "echo", "charlie", "foxtrot", "bravo", "delta",
];

fn paged_server(page_size: usize) -> RunningServer {
    let mut s = settings();
    s.limits.page_size = page_size;
    start_bare(s, |mut b| {
        for name in NAMES {
            b = b
                .tool(named_tool(name))
                .prompt(named_prompt(name))
                .resource(Resource::text(
                    format!("test://r/{name}"),
                    name,
                    "text/plain",
                    name,
                ))
                .resource_template(echo_template(&format!("test://t/{name}/{{id}}"), name));
        }
        b
    })
}

/// Walks a list page by page; returns the keys of each page.
async fn pages(client: &mut Client, method: &str, member: &str, key: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<Value> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let response = client.request(method, params).await;
        let entries = response["result"][member]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: {response}"));
        pages.push(
            entries
                .iter()
                .map(|e| e[key].as_str().expect("key").to_owned())
                .collect(),
        );
        match response["result"].get("nextCursor") {
            Some(next) => {
                assert!(next.is_string(), "{response}");
                cursor = Some(next.clone());
            }
            None => return pages,
        }
        assert!(pages.len() <= NAMES.len(), "the walk ends");
    }
}

const LISTS: [(&str, &str, &str, &str); 4] = [
    ("tools/list", "tools", "name", ""),
    ("prompts/list", "prompts", "name", ""),
    ("resources/list", "resources", "uri", "test://r/"),
    (
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
        "test://t/",
    ),
];

/// The key a list gives the entry registered as `name`.
fn key_of(prefix: &str, name: &str) -> String {
    match prefix {
        "" => name.to_owned(),
        "test://t/" => format!("test://t/{name}/{{id}}"),
        _ => format!("{prefix}{name}"),
    }
}

#[tokio::test]
async fn pages_of_every_list_concatenate_to_the_full_sorted_list() {
    for page_size in [1, 2, 3, 7, 100] {
        let server = paged_server(page_size);
        let mut client = Client::initialized(&server).await;
        for (method, member, key, prefix) in LISTS {
            let pages = pages(&mut client, method, member, key).await;
            let (last, full) = pages.split_last().expect("at least one page");
            for page in full {
                assert_eq!(page.len(), page_size, "{method}: full pages {pages:?}");
            }
            assert!(
                (1..=page_size).contains(&last.len()),
                "{method}: last page {pages:?}"
            );
            let walked: Vec<String> = pages.concat();
            let mut expected: Vec<String> = NAMES.iter().map(|n| key_of(prefix, n)).collect();
            expected.sort();
            assert_eq!(walked, expected, "{method} with pages of {page_size}");
        }
    }
}

#[tokio::test]
async fn a_garbage_cursor_is_invalid_params() {
    let server = paged_server(2);
    let mut client = Client::initialized(&server).await;
    let tools_cursor =
        client.request("tools/list", json!({})).await["result"]["nextCursor"].clone();
    let mut truncated = tools_cursor.as_str().expect("cursor").to_owned();
    truncated.truncate(truncated.len() - 2);
    for (method, cursor) in [
        ("tools/list", json!("")),
        ("tools/list", json!("!!not base64!!")),
        ("tools/list", json!("bm90IGEgY3Vyc29y")), // "not a cursor"
        ("tools/list", json!(truncated)),
        ("tools/list", json!(42)),
        ("tools/list", json!({"offset": 2})),
        // A cursor of another list is not a cursor of this one.
        ("prompts/list", tools_cursor.clone()),
        ("resources/list", tools_cursor.clone()),
        ("resources/templates/list", tools_cursor.clone()),
    ] {
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), method, json!({ "cursor": cursor }))
            .await;
        assert_error(&response, &id, -32602);
    }
    // The cursor itself is still good.
    let response = client
        .request("tools/list", json!({ "cursor": tools_cursor }))
        .await;
    assert_eq!(
        response["result"]["tools"][0]["name"], "charlie",
        "{response}"
    );
}

#[tokio::test]
async fn a_stale_cursor_is_invalid_params_never_a_restart() {
    let server = paged_server(2);
    let mut client = Client::initialized(&server).await;
    let registry = server.registry();
    type Step<'a> = Box<dyn Fn() + 'a>;
    let changes: [(&str, Step<'_>, Step<'_>); 4] = [
        (
            "tools/list",
            Box::new(|| assert!(registry.add_tool(named_tool("aaa")).is_ok())),
            Box::new(|| assert!(registry.remove_tool("aaa"))),
        ),
        (
            "prompts/list",
            Box::new(|| assert!(registry.disable_prompt("echo"))),
            Box::new(|| assert!(registry.enable_prompt("echo"))),
        ),
        (
            "resources/list",
            Box::new(|| assert!(registry.remove_resource("test://r/golf"))),
            Box::new(|| {
                assert!(registry
                    .add_resource(Resource::text(
                        "test://r/golf",
                        "golf",
                        "text/plain",
                        "golf"
                    ))
                    .is_ok())
            }),
        ),
        (
            "resources/templates/list",
            Box::new(|| assert!(registry.disable_resource_template("test://t/alpha/{id}"))),
            Box::new(|| assert!(registry.enable_resource_template("test://t/alpha/{id}"))),
        ),
    ];
    for (method, change, undo) in changes {
        let first = client.request(method, json!({})).await;
        let cursor = first["result"]["nextCursor"].clone();
        assert!(cursor.is_string(), "{first}");
        change();
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), method, json!({ "cursor": cursor }))
            .await;
        let error = assert_error(&response, &id, -32602);
        assert!(
            error["message"]
                .as_str()
                .expect("message")
                .contains("changed"),
            "{response}"
        );
        // Listing from the start works, and its cursor is good.
        let again = client.request(method, json!({})).await;
        let next = again["result"]["nextCursor"].clone();
        let response = client.request(method, json!({ "cursor": next })).await;
        assert!(response.get("result").is_some(), "{response}");
        undo();
    }
}

/// A reader, renderer or completer that waits for the test to open its gate.
fn gated(builder: ServerBuilder, gate: Arc<Semaphore>) -> ServerBuilder {
    let read_gate = gate.clone();
    let render_gate = gate.clone();
    let complete_gate = gate;
    builder
        .resource(Resource::new("test://slow", "slow", move |_ctx| {
            let gate = read_gate.clone();
            async move {
                // Each release lets exactly one through: the permit is used up.
                gate.acquire()
                    .await
                    .map_err(|_| ResourceError::NotFound)?
                    .forget();
                Ok(ResourceContents::text(
                    "test://slow",
                    "text/plain",
                    "finally",
                ))
            }
        }))
        .prompt(
            Prompt::new("slow", "renders when released", move |_args, _ctx| {
                let gate = render_gate.clone();
                async move {
                    gate.acquire()
                        .await
                        .map_err(|_| mcp_ws::PromptError::Failed("closed".into()))?
                        .forget();
                    Ok(GetPromptResult::new(vec![PromptMessage::user("finally")]))
                }
            })
            .argument(PromptArgument::optional("x", "anything"))
            .complete(move |_request, _ctx| {
                let gate = complete_gate.clone();
                async move {
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    vec!["finally".to_owned()]
                }
            }),
        )
}

#[tokio::test]
async fn a_slow_read_render_or_completion_does_not_hold_up_the_session() {
    let gate = Arc::new(Semaphore::new(0));
    let server = start_with(settings(), |b| gated(b, gate.clone()));
    let mut client = Client::initialized(&server).await;
    let slow_requests = [
        ("resources/read", json!({"uri": "test://slow"})),
        ("prompts/get", json!({"name": "slow"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "slow"}, "argument": {"name": "x", "value": ""}}),
        ),
    ];
    for (method, params) in slow_requests {
        let id = client.fresh_id();
        client
            .send_json(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        wait_metric(&server, "mcp_pool_running", 1).await;
        // The session answers while the slow one waits: nothing else has come before the
        // ping's answer.
        let before = client.drain_until_barrier().await;
        assert!(before.is_empty(), "{method} answered early: {before:?}");
        let listed = client.request("tools/list", json!({})).await;
        assert!(listed.get("result").is_some());
        gate.add_permits(1);
        let response = client.recv_response(&id).await;
        let answer = response["result"].to_string();
        assert!(answer.contains("finally"), "{method}: {response}");
        wait_metric(&server, "mcp_pool_running", 0).await;
    }
}

#[tokio::test]
async fn a_panicking_read_render_or_completion_answers_internal_error_and_the_session_lives_on() {
    let server = start_with(settings(), |b| {
        b.resource(Resource::new("test://panic", "panics", |_ctx| async move {
            if std::hint::black_box(true) {
                panic!("secret detail in a read");
            }
            Ok(ResourceContents::text(
                "test://panic",
                "text/plain",
                "never",
            ))
        }))
        .resource_template(ResourceTemplate::new(
            "test://panics/{id}",
            "panics",
            |_uri, _vars, _ctx| async move {
                if std::hint::black_box(true) {
                    panic!("secret detail in a templated read");
                }
                Ok(ResourceContents::text("x", "text/plain", "never"))
            },
        ))
        .prompt(
            Prompt::new("panic", "panics", |_args, _ctx| async move {
                if std::hint::black_box(true) {
                    panic!("secret detail in a render");
                }
                Ok(GetPromptResult::new(Vec::new()))
            })
            .argument(PromptArgument::optional("x", "anything"))
            .complete(|_request, _ctx| async move {
                if std::hint::black_box(true) {
                    panic!("secret detail in a completion");
                }
                Vec::new()
            }),
        )
    });
    let mut client = Client::initialized(&server).await;
    let requests = [
        ("resources/read", json!({"uri": "test://panic"})),
        ("resources/read", json!({"uri": "test://panics/1"})),
        ("prompts/get", json!({"name": "panic"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "panic"}, "argument": {"name": "x", "value": ""}}),
        ),
    ];
    for (i, (method, params)) in requests.into_iter().enumerate() {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, params).await;
        let error = assert_error(&response, &id, -32603);
        assert!(
            !error.to_string().contains("secret"),
            "no detail reaches the client: {error}"
        );
        assert_eq!(metric(&server, "mcp_panicked_total").await, i as u64 + 1);
        // The session goes on: the next request is answered.
        let readme = client.read_resource("mcp-ws://demo/readme").await;
        assert!(read_text(&readme).starts_with("# mcp-ws demo"));
    }
    wait_metric(&server, "mcp_pool_running", 0).await;
}
