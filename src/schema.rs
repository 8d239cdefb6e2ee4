//! JSON Schema checks, with the `jsonschema` crate: an accepted elicitation form must match
//! the schema the server requested, and a tool's structured result the `outputSchema` set by
//! hand (`tool::OutputChecked`).

use serde_json::Value;

/// Checks `instance` against `schema`; the error names the first violation and where.
pub fn check(schema: &Value, instance: &Value) -> Result<(), String> {
    let validator =
        jsonschema::validator_for(schema).map_err(|e| format!("invalid schema: {e}"))?;
    match first_violation(&validator, instance, "the answer") {
        None => Ok(()),
        Some(error) => Err(error),
    }
}

/// The first place where `instance` breaks `validator`'s schema, and why: `<path>: <why>`,
/// the path `whole` when it is the instance itself.
pub(crate) fn first_violation(
    validator: &jsonschema::Validator,
    instance: &Value,
    whole: &str,
) -> Option<String> {
    validator.iter_errors(instance).next().map(|error| {
        let path = error.instance_path().to_string();
        let place = if path.is_empty() { whole } else { &path };
        format!("{place}: {error}")
    })
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
