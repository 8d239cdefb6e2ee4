//! `mcp_ws::client` as the official conformance suite drives a client: the suite starts a
//! scenario's server and runs this program with its URL; the program connects in the era of
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` (2025-11-25 when unset), then uses what the server
//! offers: it lists the tools and calls each (with the calls of `MCP_CONFORMANCE_CONTEXT`'s
//! `toolCalls` when the scenario gives them, else with arguments made from each tool's
//! schema), reads every resource and gets every prompt. A tool that takes a `schema` object
//! is given the other tools' input schemas as they were listed (what the suite's schema
//! preservation scenario checks). What the server asks of the client (elicitation,
//! sampling, roots) is answered. The suite judges what crossed the wire.
//!
//! ```sh
//! node tests/conformance/node_modules/conformance-0.2.0-alpha.12/dist/index.js client \
//!   --command target/debug/examples/conformance_client --scenario tools_call \
//!   --spec-version 2026-07-28
//! ```

use futures_util::future::BoxFuture;
use mcp_ws::client::{Client, ClientError, ClientHandler, ClientOptions, RpcError};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Answers the server's questions as an accommodating user would.
struct Answers;

impl ClientHandler for Answers {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        let params: Value = params
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or(Value::Null);
        let answer = match method {
            "elicitation/create" => Ok(json!({
                "action": "accept",
                "content": sample(&params["requestedSchema"]),
            })),
            "sampling/createMessage" => Ok(json!({
                "role": "assistant",
                "content": { "type": "text", "text": "A sample answer." },
                "model": "conformance-client",
            })),
            "roots/list" => Ok(json!({ "roots": [] })),
            other => Err(RpcError::new(-32601, format!("Method not found: {other}"))),
        };
        Box::pin(async move { answer })
    }
}

/// An object that satisfies `schema`'s properties: each property's default, else a value of
/// its type.
fn sample(schema: &Value) -> Value {
    let mut object = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, property) in properties.into_iter().flatten() {
        let value = match property.get("default") {
            Some(default) => default.clone(),
            None => match property.get("type").and_then(Value::as_str) {
                Some("boolean") => json!(true),
                Some("integer") | Some("number") => json!(1),
                Some("array") => json!([]),
                Some("object") => sample(property),
                _ => json!("sample"),
            },
        };
        object.insert(name.clone(), value);
    }
    Value::Object(object)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
        .ok_or("usage: conformance_client URL")?;
    let options = ClientOptions {
        name: "mcp-ws-conformance-client".into(),
        protocol_version: std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION")
            .unwrap_or_else(|_| "2025-11-25".into()),
        capabilities: json!({ "elicitation": {}, "sampling": {}, "roots": {} }),
        initialize_timeout: Duration::from_secs(10),
        handler: Arc::new(Answers),
        ..ClientOptions::default()
    };
    let client = Client::http(&url, &[], options).await?;
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);

    let tools = client.list_all("tools/list", "tools").await?;
    let calls: Vec<(String, Value)> = match context.get("toolCalls").and_then(Value::as_array) {
        Some(calls) => calls
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_owned(),
                    c["arguments"].clone(),
                )
            })
            .collect(),
        None => tools
            .iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap_or_default().to_owned();
                let takes_schema = t["inputSchema"]["properties"]["schema"]["type"] == "object";
                let arguments = match tools.iter().find(|other| other["name"] != t["name"]) {
                    Some(other) if takes_schema => json!({ "schema": other["inputSchema"] }),
                    _ => sample(&t["inputSchema"]),
                };
                (name, arguments)
            })
            .collect(),
    };
    for (name, arguments) in calls {
        report(&name, client.call_tool(&name, arguments).await);
    }

    let capabilities = client.server().capabilities.clone();
    if capabilities.get("resources").is_some() {
        for resource in client.list_all("resources/list", "resources").await? {
            let uri = resource["uri"].as_str().unwrap_or_default().to_owned();
            let read = client
                .request("resources/read", Some(json!({ "uri": uri })))
                .await
                .map(|_| json!("read"));
            report(&uri, read);
        }
    }
    if capabilities.get("prompts").is_some() {
        for prompt in client.list_all("prompts/list", "prompts").await? {
            let name = prompt["name"].as_str().unwrap_or_default().to_owned();
            let mut arguments = Map::new();
            for argument in prompt["arguments"].as_array().into_iter().flatten() {
                if let Some(argument) = argument["name"].as_str() {
                    arguments.insert(argument.to_owned(), json!("sample"));
                }
            }
            let params = json!({ "name": name, "arguments": arguments });
            let got = client
                .request("prompts/get", Some(params))
                .await
                .map(|_| json!("got"));
            report(&name, got);
        }
    }
    client.shutdown(Duration::from_secs(1)).await;
    Ok(())
}

/// One line per use, for the suite's log.
fn report(what: &str, outcome: Result<Value, ClientError>) {
    match outcome {
        Ok(_) => println!("ok {what}"),
        Err(error) => println!("error {what}: {error}"),
    }
}
