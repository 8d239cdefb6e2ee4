//! JSON-RPC 2.0 on the wire (seed 004): ids echoed byte-exact; `"id": null` is a request
//! answered with -32600 while a missing id is a notification that is never answered, not
//! even on error; `jsonrpc` must be exactly "2.0", `method` a string, `params` an object or
//! array; -32700 for unparsable text with a null id; -32601 for unknown and `rpc.` methods;
//! every response has exactly one of `result`/`error`; and after every bad input the
//! connection stays usable and the server accepts new connections.

use crate::support::ws::assert_server_alive;
use crate::support::*;
use serde_json::{json, Value};
use std::collections::HashMap;

#[tokio::test]
async fn ids_are_echoed_byte_exact() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for id in [
        r#""abc""#,
        r#""""#,
        r#""caf\u00e9 \"q\"""#,
        "0",
        "-12",
        "9007199254740993",
        "18446744073709551616",
        "340282366920938463463374607431768211457",
        "1.50",
        "1e3",
    ] {
        client
            .send_text(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .await;
        let text = client.recv_text().await;
        assert_eq!(
            text,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
}

/// Ids and progress tokens are at most 1024 bytes (their JSON text): a longer id is -32600
/// with a null id (echoing it would copy what the bound refuses), a longer progress token
/// -32602 under the request's id; 1024 bytes are served. (Unbounded, a progress token was
/// copied into a progress notification every 50 ms for as long as its request ran.)
#[tokio::test]
async fn ids_and_progress_tokens_longer_than_1024_bytes_are_refused() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let string_of = |bytes: usize| format!("\"{}\"", "i".repeat(bytes - 2));
    let at_bound = string_of(1024);
    client
        .send_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{at_bound},"method":"ping"}}"#
        ))
        .await;
    let text = client.recv_text().await;
    assert_eq!(
        text,
        format!(r#"{{"jsonrpc":"2.0","id":{at_bound},"result":{{}}}}"#)
    );
    let over = string_of(1025);
    client
        .send_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{over},"method":"ping"}}"#
        ))
        .await;
    let response = client.recv().await;
    let error = assert_error(&response, &Value::Null, -32600);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("1024 bytes")),
        "{response}"
    );
    for (token, served) in [
        (json!("t".repeat(1022)), true),
        (json!("t".repeat(1023)), false),
    ] {
        let response = client
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": token}}),
            )
            .await;
        if served {
            assert_eq!(tool_text(&response), "x");
        } else {
            let error = assert_error(&response, &response["id"], -32602);
            assert!(
                error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("progressToken")),
                "{response}"
            );
        }
    }
    client.expect_nothing_pending().await;
}

/// A string with a lone surrogate escape (`"\udc00"`) is JSON, but no text: in the params
/// of a method whose params are read eagerly (`tools/call`'s `name`), the request is still
/// answered under its id, with -32602. (It was -32700 with a null id: the client never had
/// an answer to its request.)
#[tokio::test]
async fn a_lone_surrogate_in_the_params_is_invalid_params_under_the_requests_id() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"\udc00x","arguments":{}}}"#,
        )
        .await;
    let response = client.recv().await;
    assert_error(&response, &json!(7), -32602);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn null_id_is_answered_with_invalid_request() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
        .await;
    let response = client.recv().await;
    assert_error(&response, &Value::Null, -32600);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn notifications_are_never_answered_even_on_error() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for text in [
        r#"{"jsonrpc":"2.0","method":"no/such/method"}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"nope"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never-sent"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"bad":true}}"#,
        r#"{"jsonrpc":"2.0","method":"logging/setLevel","params":{"level":"loud"}}"#,
        r#"{"jsonrpc":"2.0","method":"rpc.discover"}"#,
    ] {
        client.send_text(text).await;
    }
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn invalid_envelopes_get_invalid_request_with_their_id() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let cases = [
        (r#"{"id":1,"method":"ping"}"#, json!(1)),
        (r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#, json!(2)),
        (r#"{"jsonrpc":2.0,"id":3,"method":"ping"}"#, json!(3)),
        (r#"{"jsonrpc":"2.0","id":4,"method":42}"#, json!(4)),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":"x"}"#,
            json!(5),
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":7}"#,
            json!(6),
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","result":{}}"#,
            json!(7),
        ),
        (r#"{"jsonrpc":"2.0","id":"s8"}"#, json!("s8")),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, Value::Null),
        (
            r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"id":10,"method":"ping"}"#,
            Value::Null,
        ),
        ("42", Value::Null),
        (r#""just a string""#, Value::Null),
        ("null", Value::Null),
    ];
    for (text, id) in cases {
        client.send_text(text).await;
        let response = client.recv().await;
        let error = assert_error(&response, &id, -32600);
        assert!(
            error["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("Invalid Request"),
            "{text}: {response}"
        );
    }
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn unparsable_text_gets_parse_error_with_null_id() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for text in [
        "",
        "   ",
        "{",
        r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
        r#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#,
        "[1,2",
        "nul",
        "{'single':'quotes'}",
    ] {
        client.send_text(text).await;
        let response = client.recv().await;
        assert_error(&response, &Value::Null, -32700);
    }
    // The connection is still fine.
    let response = client.request("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn unknown_and_reserved_methods_get_method_not_found() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for method in [
        "no/such/method",
        "rpc.discover",
        "Tools/List",
        "tools/list ",
        "",
    ] {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, json!({})).await;
        let error = assert_error(&response, &id, -32601);
        assert_eq!(error["data"]["method"], method);
    }
}

#[tokio::test]
async fn escaped_method_names_are_unescaped() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":1,"method":"p\u0069ng"}"#)
        .await;
    assert_eq!(
        client.recv().await,
        json!({"jsonrpc":"2.0","id":1,"result":{}})
    );
}

/// `tools/call` params are parsed in the envelope's pass when `method` comes first, and in
/// a pass of their own otherwise: both must give the same answers, errors included.
#[tokio::test]
async fn member_order_does_not_change_the_answer() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\u00e9"}}}"#,
            r#"{"params":{"arguments":{"text":"a\u00e9"},"name":"echo"},"id":1,"method":"tools/call","jsonrpc":"2.0"}"#,
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","params":{"arguments":{}},"id":2,"method":"tools/call"}"#,
            Some(-32602),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":[1]}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"params":{"name":"echo","_meta":{"progressToken":[1]}},"method":"tools/call"}"#,
            Some(-32602),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope"},"x":1}"#,
            r#"{"x":1,"params":{"name":"nope"},"jsonrpc":"2.0","id":4,"method":"tools/call"}"#,
            Some(-32602),
        ),
    ];
    for (method_first, params_first, error_code) in cases {
        client.send_text(method_first).await;
        let expected = client.recv().await;
        match error_code {
            None => assert_eq!(expected["result"]["content"][0]["text"], "a\u{e9}"),
            Some(code) => assert_eq!(expected["error"]["code"], code, "{expected}"),
        }
        client.send_text(params_first).await;
        assert_eq!(client.recv().await, expected, "{params_first}");
    }
}

#[tokio::test]
async fn positional_params_are_refused_with_invalid_params() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["echo"]}"#)
        .await;
    assert_error(&client.recv().await, &json!(1), -32602);
    // `ping` too, which reads nothing of its params (it answered `{}`).
    client
        .send_text(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}"#)
        .await;
    assert_error(&client.recv().await, &json!(2), -32602);
}

#[tokio::test]
async fn responses_from_the_client_are_dropped_silently() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#)
        .await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":98,"error":{"code":1,"message":"x"}}"#)
        .await;
    // An error about a message the client could not read, whose id it could not tell
    // (JSON-RPC 2.0 §5: then the id is null): a response too, not a request to refuse.
    client
        .send_text(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#)
        .await;
    // A response that is not a valid one: its id is of the server's numbering, and an error
    // under it would be taken for the answer to the client's own request of that id.
    client
        .send_text(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#)
        .await;
    client.send_text(r#"{"id":2,"result":{}}"#).await;
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn every_response_has_exactly_one_of_result_and_error() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let requests = [
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        json!({"jsonrpc":"2.0","id":3,"method":"nope"}),
        json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fail","arguments":{"message":"m"}}}),
        json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}),
        json!({"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"nope://x"}}),
    ];
    for request in requests {
        let id = request["id"].clone();
        client.send_json(request).await;
        let response = client.recv_response(&id).await;
        let object = response.as_object().expect("object");
        assert_eq!(object["jsonrpc"], "2.0");
        assert_eq!(
            object.contains_key("result") as u8 + object.contains_key("error") as u8,
            1,
            "{response}"
        );
    }
}

/// Counts the ids of the objects in a frame that parses as JSON (an invalid request with a
/// readable id is answered with that id too).
fn count_request_ids(text: &str, sent: &mut HashMap<String, usize>) {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let objects = match &value {
        Value::Array(entries) => entries.iter().collect(),
        other => vec![other],
    };
    for object in objects {
        if let Some(id) = object.get("id") {
            *sent.entry(id.to_string()).or_default() += 1;
        }
    }
}

/// Deterministic xorshift, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Hostile input: hundreds of mutated frames (bytes replaced, deleted, duplicated). Whatever
/// comes back is well-formed JSON-RPC (a response with exactly one of result/error, or a
/// notification), no id is answered twice, and the server keeps serving.
#[tokio::test]
async fn mutated_frames_never_break_the_server() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let seeds = [
        r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"echo","arguments":{"text":"abc"}}}"#,
        r#"[{"jsonrpc":"2.0","id":"ID","method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"ID"}}]"#,
        r#"{"jsonrpc":"2.0","id":ID,"method":"prompts/get","params":{"name":"greet","arguments":{"name":"Ada"}}}"#,
        r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"_meta":{"progressToken":7}}}"#,
    ];
    let alphabet = br#"{}[]":,0123456789-.eE truefalsn\u"#;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // How many requests carried each id (mutations can make two rounds' ids equal).
    let mut sent: HashMap<String, usize> = HashMap::new();
    for round in 0..400 {
        // A distinct id per round, so "answered twice" means what it says.
        let seed = seeds[round % seeds.len()].replace("ID", &(1_000_000 + round).to_string());
        let mut bytes = seed.into_bytes();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] = alphabet[rng.below(alphabet.len())],
                1 => {
                    bytes.remove(at);
                }
                _ => {
                    let byte = bytes[at];
                    bytes.insert(at, byte);
                }
            }
            if bytes.is_empty() {
                bytes.push(b'{');
            }
        }
        // Mutations use ASCII only, so the frame stays valid UTF-8 text.
        let text = String::from_utf8(bytes).expect("ascii mutations");
        count_request_ids(&text, &mut sent);
        client.send_text(&text).await;
    }
    let frames = client.drain_until_barrier().await;
    let mut answered: HashMap<String, usize> = HashMap::new();
    let mut responses = 0;
    let mut check = |message: &Value| {
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        if message.get("method").is_some() {
            assert!(
                message.get("id").is_none(),
                "server sends notifications only: {message}"
            );
            return;
        }
        let has_result = message.get("result").is_some();
        let has_error = message.get("error").is_some();
        assert!(
            has_result != has_error,
            "exactly one of result/error: {message}"
        );
        if has_error {
            assert!(message["error"]["code"].is_i64(), "{message}");
            assert!(message["error"]["message"].is_string(), "{message}");
        }
        let id = &message["id"];
        // A null id (unreadable request) may repeat; any other id is answered at most as
        // often as requests carried it.
        if !id.is_null() {
            let count = answered.entry(id.to_string()).or_default();
            *count += 1;
            let limit = sent.get(&id.to_string()).copied().unwrap_or(0);
            assert!(
                *count <= limit,
                "answered {count} times, sent {limit}: {message}"
            );
        }
        responses += 1;
    };
    for frame in &frames {
        match frame.as_array() {
            Some(entries) => entries.iter().for_each(&mut check),
            None => check(frame),
        }
    }
    assert!(
        responses > 100,
        "most mutated frames are answered: {responses}"
    );
    assert_server_alive(&server).await;
}
