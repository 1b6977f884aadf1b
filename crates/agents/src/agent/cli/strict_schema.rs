//! A JSON Schema rewritten into the subset OpenAI's structured outputs accept in strict
//! mode (the Codex CLI sends `--output-schema` with `strict: true`), and the answers to it
//! read back as ralph's answer types expect.
//!
//! Strict mode wants every property listed in `required` and `additionalProperties: false`
//! on every object, and refuses `oneOf` and most `format`s. ralph's schemas (schemars, from
//! the answer types) have optional properties, `oneOf` for documented enums and
//! `format: "uint"`. So: an optional property becomes required but nullable, `oneOf` becomes
//! `anyOf`, `const` becomes a one-value `enum`, and unknown formats are dropped. The model
//! then answers `null` for what it would have left out; [`without_nulls`] removes those
//! members, so the answer reads as if they were absent.

use serde_json::{Map, Value};

/// The `format` values strict mode accepts.
const FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// `schema` in strict mode's subset, with the same meaning once [`without_nulls`] is
/// applied to the answer.
pub(super) fn strict(schema: &Value) -> Value {
    let mut schema = schema.clone();
    rewrite(&mut schema);
    schema
}

/// `answer` without object members whose value is `null`, at any depth.
pub(super) fn without_nulls(answer: Value) -> Value {
    match answer {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn rewrite(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    map.remove("$schema");
    if let Some(one_of) = map.remove("oneOf") {
        map.insert("anyOf".into(), one_of);
    }
    if let Some(value) = map.remove("const") {
        map.insert("enum".into(), Value::Array(vec![value]));
    }
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !FORMATS.contains(&f))
    {
        map.remove("format");
    }
    for keyword in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(named)) = map.get_mut(keyword) {
            named.values_mut().for_each(rewrite);
        }
    }
    if let Some(items) = map.get_mut("items") {
        rewrite(items);
    }
    if let Some(Value::Array(options)) = map.get_mut("anyOf") {
        options.iter_mut().for_each(rewrite);
    }
    // After the properties themselves are rewritten, so that making one nullable sees its
    // final form.
    if map.contains_key("properties") {
        require_all(map);
    }
}

/// Every property required, the optional ones nullable; nothing else allowed.
fn require_all(object: &mut Map<String, Value>) {
    let required: Vec<String> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(properties)) = object.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if !required.contains(name) {
            nullable(property);
        }
    }
    let all: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
    object.insert("required".into(), Value::Array(all));
    object.insert("additionalProperties".into(), Value::Bool(false));
}

/// Lets `schema` also be `null`.
fn nullable(schema: &mut Value) {
    let null = || serde_json::json!({"type": "null"});
    let Value::Object(map) = schema else { return };
    if map.contains_key("enum") || map.contains_key("$ref") {
        let inner = std::mem::take(map);
        map.insert(
            "anyOf".into(),
            Value::Array(vec![Value::Object(inner), null()]),
        );
        return;
    }
    match map.get_mut("type") {
        Some(Value::String(one)) if one != "null" => {
            let one = Value::String(std::mem::take(one));
            map.insert("type".into(), Value::Array(vec![one, "null".into()]));
        }
        Some(Value::Array(types)) if !types.contains(&"null".into()) => types.push("null".into()),
        Some(_) => {}
        None => match map.get_mut("anyOf") {
            Some(Value::Array(options)) if !options.contains(&null()) => options.push(null()),
            Some(_) => {}
            None => {
                let inner = std::mem::take(map);
                map.insert(
                    "anyOf".into(),
                    Value::Array(vec![Value::Object(inner), null()]),
                );
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Answer as _;
    use serde_json::json;

    /// What the tests' fake Responses API refuses, as OpenAI does: a property missing from
    /// `required`, additional properties allowed, `oneOf`, an unknown format.
    fn strict_problems(schema: &Value, at: &str, out: &mut Vec<String>) {
        match schema {
            Value::Array(items) => items.iter().for_each(|i| strict_problems(i, at, out)),
            Value::Object(map) => {
                if map.contains_key("oneOf") || map.contains_key("const") {
                    out.push(format!("{at}: oneOf or const"));
                }
                if let Some(f) = map
                    .get("format")
                    .and_then(Value::as_str)
                    .filter(|f| !FORMATS.contains(f))
                {
                    out.push(format!("{at}: format {f}"));
                }
                if let Some(props) = map.get("properties").and_then(Value::as_object) {
                    let required = map
                        .get("required")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    for key in props.keys() {
                        if !required.contains(&Value::String(key.clone())) {
                            out.push(format!("{at}: {key} not required"));
                        }
                    }
                    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                        out.push(format!("{at}: additional properties"));
                    }
                }
                for (key, inner) in map {
                    strict_problems(inner, &format!("{at}/{key}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_answer_schema_becomes_strict() {
        for schema in [
            crate::answer::InvestigateAnswer::schema(),
            crate::answer::VerifyAnswer::schema(),
            crate::answer::GapAnswer::schema(),
            crate::answer::DecomposeAnswer::schema(),
            crate::answer::PlanAnswer::schema(),
        ] {
            let mut problems = Vec::new();
            strict_problems(&schema, "", &mut problems);
            assert!(!problems.is_empty(), "the schema was already strict");
            problems.clear();
            strict_problems(&strict(&schema), "", &mut problems);
            assert!(problems.is_empty(), "{problems:?}");
        }
    }

    #[test]
    fn a_strict_answer_with_nulls_reads_as_one_without_them() {
        let answer = json!({"out_of_scope": null, "reason": null, "tasks": [
            {"name": "a", "accept": "b", "notes": null, "deps": null, "priority": "high",
             "complexity": null},
        ]});
        let parsed: crate::answer::InvestigateAnswer =
            serde_json::from_value(without_nulls(answer)).expect("it parses");
        assert_eq!(parsed.tasks.len(), 1);
        assert!(parsed.tasks[0].deps.is_empty());
    }

    #[test]
    fn optional_properties_become_nullable_and_required() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "string"}},
            "c": {"$ref": "#/$defs/C"},
            "d": {"oneOf": [{"const": "x", "type": "string"}]},
            "e": {"type": "integer", "format": "uint", "minimum": 0},
        }, "required": ["a"]});
        let strict = strict(&schema);
        assert_eq!(strict["required"], json!(["a", "b", "c", "d", "e"]));
        assert_eq!(strict["additionalProperties"], json!(false));
        let p = &strict["properties"];
        assert_eq!(p["a"], json!({"type": "string"}));
        assert_eq!(p["b"]["type"], json!(["array", "null"]));
        assert_eq!(
            p["c"],
            json!({"anyOf": [{"$ref": "#/$defs/C"}, {"type": "null"}]})
        );
        assert_eq!(
            p["d"],
            json!({"anyOf": [{"enum": ["x"], "type": "string"}, {"type": "null"}]})
        );
        assert_eq!(p["e"], json!({"type": ["integer", "null"], "minimum": 0}));
    }
}
