//! Tool arguments mirrored in HTTP headers (2026-07-28, SEP-2243): a property of a tool's
//! `inputSchema` annotated `"x-mcp-header": "Region"` is sent by clients as the header
//! `Mcp-Param-Region` on `tools/call`, so that intermediaries can route on it without
//! reading the body; the server checks that the header says what the body says.
//!
//! Here: reading and checking the annotations (a server refuses to register a tool with an
//! invalid one; a client drops such a tool from what it lists), comparing a header with its
//! argument (the server's side), and writing the header of an argument (the client's side).

use base64::Engine;
use serde_json::Value;
use std::borrow::Cow;

/// One annotated argument.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderParam {
    /// The header's name after `Mcp-Param-`.
    pub suffix: String,
    /// The argument's path from the root of `arguments`, through `properties` only.
    pub path: Vec<String>,
    /// What the property holds.
    pub kind: ParamKind,
}

/// The types an annotated property may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `"type": "string"`.
    String,
    /// `"type": "integer"`.
    Integer,
    /// `"type": "boolean"`.
    Boolean,
}

/// The largest integer a client can carry exactly (2^53 − 1).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The annotated arguments of `schema`, checked: each annotation a non-empty RFC 9110
/// token, unique (ignoring case) within the schema, on a string, integer or boolean
/// property reached from the root through `properties` only.
///
/// # Errors
/// What is wrong with the first invalid annotation.
pub fn header_params(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut found = Vec::new();
    collect(schema, &mut Vec::new(), &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for param in &found {
        if !seen.insert(param.suffix.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} is used twice (header names ignore case)",
                param.suffix
            ));
        }
    }
    Ok(found)
}

fn collect(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<HeaderParam>,
) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (name, property) in properties {
        path.push(name.clone());
        if let Some(annotation) = property.get("x-mcp-header") {
            let suffix = annotation
                .as_str()
                .filter(|s| !s.is_empty() && s.bytes().all(is_token_byte))
                .ok_or_else(|| {
                    format!(
                        "x-mcp-header of {} must be a non-empty header token",
                        path.join(".")
                    )
                })?;
            let kind = match property.get("type").and_then(Value::as_str) {
                Some("string") => ParamKind::String,
                Some("integer") => ParamKind::Integer,
                Some("boolean") => ParamKind::Boolean,
                _ => {
                    return Err(format!(
                        "x-mcp-header on {}: only string, integer and boolean properties may be headers",
                        path.join(".")
                    ))
                }
            };
            found.push(HeaderParam {
                suffix: suffix.to_owned(),
                path: path.clone(),
                kind,
            });
        }
        collect(property, path, found)?;
        path.pop();
    }
    Ok(())
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl HeaderParam {
    /// The argument's value in `arguments`, if present and not null.
    pub fn value<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        let mut value = arguments;
        for key in &self.path {
            value = value.get(key)?;
        }
        (!value.is_null()).then_some(value)
    }

    /// The header value that mirrors this argument of `arguments`: `None` when the argument
    /// is absent or null (the header is then left out) or not of the declared type.
    pub fn header_value(&self, arguments: &Value) -> Option<String> {
        match (self.kind, self.value(arguments)?) {
            (ParamKind::String, Value::String(s)) => Some(encode(s)),
            (ParamKind::Integer, Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Some(i.to_string()),
                (None, Some(f)) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER => {
                    Some(format!("{f:.0}"))
                }
                _ => Some(n.to_string()),
            },
            (ParamKind::Boolean, Value::Bool(b)) => Some(b.to_string()),
            _ => None,
        }
    }

    /// Whether the header (as sent, before decoding) says what `value` says.
    ///
    /// # Errors
    /// Why not: an undecodable header, or a different value.
    pub fn check(&self, header: &str, value: &Value) -> Result<(), String> {
        let decoded = decode(header.trim()).ok_or_else(|| {
            format!(
                "Mcp-Param-{} header is not a valid =?base64?…?= value",
                self.suffix
            )
        })?;
        let matches = match (self.kind, value) {
            (ParamKind::String, Value::String(s)) => decoded == *s,
            (ParamKind::Integer, Value::Number(n)) => decoded
                .parse::<f64>()
                .ok()
                .filter(|h| h.abs() <= MAX_SAFE_INTEGER)
                .zip(n.as_f64())
                .is_some_and(|(h, b)| h == b),
            (ParamKind::Boolean, Value::Bool(b)) => decoded == if *b { "true" } else { "false" },
            // The body's value is not of the declared type: the arguments are checked
            // against the schema later; the header cannot match it.
            _ => false,
        };
        if matches {
            Ok(())
        } else {
            Err(format!(
                "Mcp-Param-{} header does not match the argument {}",
                self.suffix,
                self.path.join(".")
            ))
        }
    }
}

/// How a string travels in a header: as itself when it is visible ASCII (inner spaces
/// allowed) with no space at either end, else as `=?base64?…?=` of its UTF-8, which is what
/// keeps non-ASCII text, control characters and significant edge spaces intact.
pub fn encode(text: &str) -> String {
    let plain = text.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.starts_with("=?base64?");
    if plain {
        text.to_owned()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        format!("=?base64?{encoded}?=")
    }
}

/// A header value as sent: `=?base64?…?=` (UTF-8, padded base64) or the value itself.
fn decode(header: &str) -> Option<String> {
    decode_header_value(header).map(Cow::into_owned)
}

/// A 2026-07-28 header value as the body has it (`Mcp-Name`, `Mcp-Param-*`): a value in
/// the `=?base64?…?=` form (what is not plain visible ASCII, or has edge spaces, or looks
/// like that form) decoded, any other as it is; `None` when the form holds no UTF-8 base64.
pub fn decode_header_value(header: &str) -> Option<Cow<'_, str>> {
    match header
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok().map(Cow::Owned)
        }
        None => Some(Cow::Borrowed(header)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn region() -> HeaderParam {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "other": {"type": "string"}
        }});
        header_params(&schema).expect("valid").remove(0)
    }

    #[test]
    fn annotations_are_found_through_properties() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer", "x-mcp-header": "A"},
            "nested": {"type": "object", "properties": {
                "b": {"type": "boolean", "x-mcp-header": "B"}
            }}
        }});
        let params = header_params(&schema).expect("valid");
        assert_eq!(params.len(), 2);
        assert_eq!(params[1].path, ["nested", "b"]);
        assert_eq!(params[1].kind, ParamKind::Boolean);
    }

    #[test]
    fn invalid_annotations_are_refused() {
        for bad in [
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": 7}}}),
            json!({"properties": {
                "a": {"type": "string", "x-mcp-header": "X"},
                "b": {"type": "string", "x-mcp-header": "x"}
            }}),
        ] {
            assert!(header_params(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn what_a_client_writes_the_server_reads_back() {
        let param = region();
        for text in [
            "us-west1",
            "us west 1",
            "",
            " padded ",
            "Hello, 世界",
            "line1\r\nline2",
            "\tindented",
            "=?base64?SGVsbG8=?=",
        ] {
            let arguments = json!({ "region": text });
            let header = param.header_value(&arguments).expect("a string");
            assert!(
                header.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
                "{header:?}"
            );
            assert!(
                param.check(&header, &json!(text)).is_ok(),
                "{text:?} as {header:?}"
            );
        }
        assert_eq!(
            param
                .header_value(&json!({ "region": "us west 1" }))
                .as_deref(),
            Some("us west 1")
        );
        assert_eq!(param.header_value(&json!({ "region": null })), None);
        assert_eq!(param.header_value(&json!({})), None);
        let schema = json!({"properties": {
            "n": {"type": "integer", "x-mcp-header": "N"},
            "b": {"type": "boolean", "x-mcp-header": "B"}
        }});
        let params = header_params(&schema).expect("valid");
        let param = |suffix: &str| {
            params
                .iter()
                .find(|p| p.suffix == suffix)
                .expect("annotated")
        };
        let arguments = json!({ "n": 42, "b": false });
        assert_eq!(param("N").header_value(&arguments).as_deref(), Some("42"));
        assert_eq!(
            param("B").header_value(&arguments).as_deref(),
            Some("false")
        );
        assert_eq!(
            param("N").header_value(&json!({ "n": 42.0 })).as_deref(),
            Some("42")
        );
    }

    #[test]
    fn headers_are_decoded_before_they_are_compared() {
        let param = region();
        let hello = json!("Hello");
        assert!(param.check("=?base64?SGVsbG8=?=", &hello).is_ok());
        assert!(param.check(" Hello ", &hello).is_ok());
        assert!(
            param.check("=?base64?SGVsbG8?=", &hello).is_err(),
            "padding"
        );
        assert!(param.check("=?base64?SGVs!!!bG8=?=", &hello).is_err());
        assert!(param.check("Hallo", &hello).is_err());
        // Only the whole sentinel is an encoding.
        assert!(param
            .check("=?base64?SGVsbG8=", &json!("=?base64?SGVsbG8="))
            .is_ok());
    }

    #[test]
    fn integers_compare_numerically_and_booleans_literally() {
        let int = HeaderParam {
            suffix: "N".into(),
            path: vec!["n".into()],
            kind: ParamKind::Integer,
        };
        assert!(int.check("42", &json!(42)).is_ok());
        assert!(int.check("42.0", &json!(42)).is_ok());
        assert!(int.check("43", &json!(42)).is_err());
        let flag = HeaderParam {
            suffix: "F".into(),
            path: vec!["f".into()],
            kind: ParamKind::Boolean,
        };
        assert!(flag.check("true", &json!(true)).is_ok());
        assert!(flag.check("True", &json!(true)).is_err());
        assert_eq!(flag.value(&json!({"f": null})), None);
    }
}
