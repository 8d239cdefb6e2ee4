//! What a client resuming a WebSocket session says it is still waiting for, and the answers a
//! resume owes it.
//!
//! Without it, the node a session resumes on knows only what the session itself kept: the
//! requests still running, the answers kept while no socket was attached, and (taken up
//! from a dead node) the requests that node's record listed. That misses a request begun
//! within the record's 20 ms before the node died (no answer ever), lists one answered within
//! them (a second answer), and on any node misses an answer that was sent on the dropped
//! connection but never arrived. No order of writes closes these: only the client knows
//! what it got. So a resuming client may say so: [`HEADER`] (`Mcp-Awaiting-Ids`) on the
//! upgrade, a JSON array of the ids of its requests it has no answer for. Each of those the
//! session neither runs nor holds an answer for is answered -32031 as the socket attaches,
//! and nothing else is: every awaited request gets exactly one answer, and no other request
//! a second one.

use crate::perimeter::Refusal;
use crate::protocol::jsonrpc::{encode_error, RequestId};
use crate::protocol::mcp::Error;
use actix_web::HttpRequest;
use serde_json::value::RawValue;
use std::collections::HashSet;

/// The upgrade header a resuming client lists its unanswered request ids in.
pub const HEADER: &str = "mcp-awaiting-ids";

/// Most ids the header may list. Far more than a session may have in flight
/// (`limits.max_in_flight_per_session`), so that a client whose refusals were lost too can
/// list them, and few enough that a resume's work stays small.
pub const MAX_IDS: usize = 1024;

/// The ids a resuming client awaits, as it wrote them.
pub struct Awaited(Vec<RequestId>);

impl Awaited {
    /// The [`HEADER`] of `req`, if it has one.
    ///
    /// # Errors
    /// [`Refusal::BadAwaitingIds`] when it is not a JSON array of at most [`MAX_IDS`]
    /// strings and numbers.
    pub fn of(req: &HttpRequest) -> Result<Option<Self>, Refusal> {
        let Some(value) = req.headers().get(HEADER) else {
            return Ok(None);
        };
        let text = value.to_str().map_err(|_| Refusal::BadAwaitingIds)?;
        let raw: Vec<&RawValue> =
            serde_json::from_str(text).map_err(|_| Refusal::BadAwaitingIds)?;
        if raw.len() > MAX_IDS {
            return Err(Refusal::BadAwaitingIds);
        }
        raw.into_iter()
            .map(RequestId::from_raw)
            .collect::<Option<Vec<_>>>()
            .map(|ids| Some(Self(ids)))
            .ok_or(Refusal::BadAwaitingIds)
    }

    /// The answers a resume owes: `lost` (-32031) for each awaited id, once, that is not
    /// among `answered` (the ids of requests still running and of answers about to be
    /// delivered). Ids are compared as JSON values (`1.0` is not `1`, but `"\u0061"` is
    /// `"a"`); each answer carries the id as the client wrote it.
    pub fn owed<'a>(
        &self,
        answered: impl IntoIterator<Item = &'a str>,
        lost: &Error,
    ) -> Vec<String> {
        let mut settled: HashSet<String> = answered.into_iter().map(canonical).collect();
        self.0
            .iter()
            .filter(|id| settled.insert(canonical(id.as_json())))
            .map(|id| lost_answer(id, lost))
            .collect()
    }
}

/// The ids of the JSON-RPC responses in `frame` (messages with an `id` and no `method`):
/// the one of a single message, each of a batch's array of answers.
pub fn answer_ids(frame: &str) -> Vec<&str> {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        method: Option<serde::de::IgnoredAny>,
    }
    // By its first byte, not an untagged enum: a `RawValue` cannot be read from the
    // buffered content an untagged enum tries its variants on.
    let messages: Vec<Message<'_>> = if frame.trim_start().starts_with('[') {
        serde_json::from_str(frame).unwrap_or_default()
    } else {
        serde_json::from_str(frame).map_or_else(|_| Vec::new(), |message| vec![message])
    };
    messages
        .into_iter()
        .filter_map(|message| match message {
            Message {
                id: Some(id),
                method: None,
            } => Some(id.get()),
            _ => None,
        })
        .collect()
}

/// The answer to the request `id` whose answer was lost (`lost`: [`Error::NodeLost`] or
/// [`Error::ConnectionLost`]).
pub fn lost_answer(id: &RequestId, lost: &Error) -> String {
    encode_error(Some(id), &lost.to_wire())
}

/// An id's JSON text in one spelling, so that ids written differently compare equal
/// (`"\u0061"` and `"a"`, `1.50` and `1.5`), without making distinct ids equal: an integer
/// beyond 64 bits (which `serde_json` reads as a float, `18446744073709551617` and
/// `18446744073709551618` alike), a number beyond a float's range or a string it cannot
/// read (`1e400`, a lone surrogate `"\udc00"`) keeps its own text.
fn canonical(id: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(id) {
        Ok(serde_json::Value::Number(n))
            if !(n.is_i64() || n.is_u64() || id.contains(['.', 'e', 'E'])) =>
        {
            id.trim().to_owned()
        }
        Ok(value) => value.to_string(),
        Err(_) => id.trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn awaited(header: &str) -> Result<Option<Awaited>, Refusal> {
        Awaited::of(
            &TestRequest::default()
                .insert_header((HEADER, header))
                .to_http_request(),
        )
    }

    #[test]
    fn the_header_is_a_json_array_of_ids() {
        assert!(Awaited::of(&TestRequest::default().to_http_request())
            .expect("no header is fine")
            .is_none());
        let ids = awaited(r#"[1, "a", 2.50]"#)
            .expect("valid")
            .expect("present");
        let texts: Vec<&str> = ids.0.iter().map(RequestId::as_json).collect();
        assert_eq!(texts, ["1", r#""a""#, "2.50"]);
        for bad in ["1", "[null]", "[true]", "[[1]]", "{}", "[1,", ""] {
            assert!(
                matches!(awaited(bad), Err(Refusal::BadAwaitingIds)),
                "{bad:?} is refused"
            );
        }
        let many = format!("[{}]", vec!["1"; MAX_IDS + 1].join(","));
        assert!(matches!(awaited(&many), Err(Refusal::BadAwaitingIds)));
        let most = format!("[{}]", vec!["1"; MAX_IDS].join(","));
        assert!(awaited(&most).is_ok());
        let refusal = Refusal::BadAwaitingIds.to_string();
        assert!(
            refusal.contains(&format!("at most {MAX_IDS} ")),
            "{refusal}"
        );
    }

    #[test]
    fn a_resume_owes_each_awaited_id_not_answered_one_answer() {
        let ids = awaited(r#"[1, "a", 3, 3, "\u0062", 4]"#)
            .expect("valid")
            .expect("present");
        let owed = ids.owed(["1", r#""b""#, "7"], &Error::ConnectionLost);
        let owed: Vec<serde_json::Value> = owed
            .iter()
            .map(|frame| serde_json::from_str(frame).expect("JSON"))
            .collect();
        let ids: Vec<&serde_json::Value> = owed.iter().map(|answer| &answer["id"]).collect();
        assert_eq!(
            ids,
            [
                &serde_json::json!("a"),
                &serde_json::json!(3),
                &serde_json::json!(4)
            ]
        );
        for answer in &owed {
            assert_eq!(answer["error"]["code"], -32031);
            assert_eq!(answer["error"]["data"]["reason"], "connectionLost");
        }
    }

    #[test]
    fn ids_a_float_cannot_hold_keep_their_own_text() {
        assert_eq!(canonical("18446744073709551617"), "18446744073709551617");
        assert_ne!(
            canonical("18446744073709551617"),
            canonical("18446744073709551618")
        );
        assert_eq!(canonical("1e400"), "1e400");
        assert_eq!(canonical(r#""\udc00""#), r#""\udc00""#);
        // Spellings of one value still meet.
        assert_eq!(canonical("1.50"), canonical("1.5"));
        assert_eq!(canonical(r#""\u0061""#), canonical(r#""a""#));
        assert_ne!(canonical("1.0"), canonical("1"));
    }

    #[test]
    fn a_lost_answer_keeps_the_id_as_written() {
        let id = awaited("[1.50]").expect("valid").expect("present");
        let answer = lost_answer(&id.0[0], &Error::NodeLost);
        assert!(answer.contains(r#""id":1.50,"#), "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["error"]["code"], -32031);
        assert_eq!(answer["error"]["data"]["reason"], "nodeLost");
    }

    #[test]
    fn only_responses_have_an_answer_id() {
        assert_eq!(
            answer_ids(
                r#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":"b","error":{"code":1,"message":""}}]"#
            ),
            ["1", r#""b""#]
        );
        assert_eq!(answer_ids(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), ["7"]);
        assert_eq!(
            answer_ids(r#"{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":""}}"#),
            [r#""x""#]
        );
        assert_eq!(
            answer_ids(r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#),
            Vec::<&str>::new()
        );
        assert_eq!(
            answer_ids(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            Vec::<&str>::new()
        );
    }
}
