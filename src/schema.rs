//! JSON Schema checks of what a client sends back, with the `jsonschema` crate: an accepted
//! elicitation form must match the schema the server requested.

use serde_json::Value;

/// Checks `instance` against `schema`; the error names the first violation and where.
pub fn check(schema: &Value, instance: &Value) -> Result<(), String> {
    let validator =
        jsonschema::validator_for(schema).map_err(|e| format!("invalid schema: {e}"))?;
    let first = validator.iter_errors(instance).next().map(|error| {
        let path = error.instance_path().to_string();
        let place = if path.is_empty() {
            "the answer".to_owned()
        } else {
            path
        };
        format!("{place}: {error}")
    });
    match first {
        None => Ok(()),
        Some(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_checked_against_the_requested_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name"]
        });
        assert!(check(&schema, &json!({"name": "Ada", "age": 36})).is_ok());
        let missing = check(&schema, &json!({"age": 3})).expect_err("missing name");
        assert!(missing.contains("name"), "{missing}");
        let negative = check(&schema, &json!({"name": "x", "age": -1})).expect_err("negative age");
        assert!(negative.contains("/age"), "{negative}");
    }
}
