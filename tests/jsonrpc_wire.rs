//! JSON-RPC 2.0 on the wire (seed 004): ids echoed byte-exact; `"id": null` is a request
//! answered with -32600 while a missing id is a notification that is never answered, not
//! even on error; `jsonrpc` must be exactly "2.0", `method` a string, `params` an object or
//! array; -32700 for unparsable text with a null id; -32601 for unknown and `rpc.` methods;
//! every response has exactly one of `result`/`error`; and after every bad input the
//! connection stays usable and the server accepts new connections.

mod common;
use common::*;
use serde_json::{json, Value};

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

#[tokio::test]
async fn positional_params_are_refused_with_invalid_params() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["echo"]}"#)
        .await;
    assert_error(&client.recv().await, &json!(1), -32602);
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
