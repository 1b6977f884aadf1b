//! `ralph schema ROLE` (issue 26 item 8): each structured role's JSON Schema parses, and the
//! answers the bundled FakeAgent scripts give for that role validate against it; without a
//! role, or with one that has no schema, the command names the roles and exits 64.

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;

/// The roles `ralph schema` takes, by the names the scripts key their entries by too.
const ROLES: [&str; 7] = [
    "investigate",
    "verify",
    "gap_analysis",
    "decompose",
    "breakdown",
    "assess",
    "draft",
];

/// The FakeAgent scripts shipped with the crate.
const SCRIPTS: [&str; 4] = [
    "fixtures/demo/script.toml",
    "fixtures/demo-plan/script.toml",
    "fixtures/thread/script.toml",
    "fixtures/scripts/example-flow.toml",
];

/// Every `json` step of the bundled scripts, by the role of its entry.
fn fixture_answers() -> BTreeMap<String, Vec<Value>> {
    let mut answers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for script in SCRIPTS {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        let text = std::fs::read_to_string(&path).unwrap();
        let file: toml::Table = toml::from_str(&text).unwrap();
        for entry in file["run"].as_array().unwrap() {
            let Some(role) = entry.get("role").and_then(|r| r.as_str()) else {
                continue;
            };
            let steps = entry.get("steps").and_then(|s| s.as_array());
            for step in steps.into_iter().flatten() {
                if let Some(json) = step.get("json") {
                    let json = serde_json::to_value(json).unwrap();
                    answers.entry(role.to_owned()).or_default().push(json);
                }
            }
        }
    }
    answers
}

/// `ralph schema ROLE`, parsed.
fn schema(role: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = ralph(dir.path(), &["schema", role], &[]);
    assert_eq!(out.status.code(), Some(0), "{role}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{role}: {e}"))
}

/// The problems of `value` against `schema` (the keywords schemars writes: `$ref` into
/// `$defs`, `type`, `const`, `enum`, `oneOf`, `anyOf`, `properties`, `required`,
/// `additionalProperties: false`, `items`, `minItems`, `maxItems`, `minimum`), each with
/// its place in `value`.
fn problems(root: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        let name = target.trim_start_matches("#/$defs/");
        return problems(root, &root["$defs"][name], value, at);
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let is = |t: &str| match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            _ => true,
        };
        if !types.iter().any(|t| is(t)) {
            found.push(format!("{at}: {value} is not of type {types:?}"));
            return found;
        }
    }
    if let Some(expected) = schema.get("const")
        && expected != value
    {
        found.push(format!("{at}: {value} is not {expected}"));
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        found.push(format!("{at}: {value} is none of {options:?}"));
    }
    for (keyword, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(Value::Array(options)) = schema.get(keyword) {
            let matching = options
                .iter()
                .filter(|o| problems(root, o, value, at).is_empty())
                .count();
            if matching == 0 || (exactly_one && matching > 1) {
                found.push(format!("{at}: {value} matches {matching} of {keyword}"));
            }
        }
    }
    if let (Some(Value::Object(properties)), Some(object)) =
        (schema.get("properties"), value.as_object())
    {
        for required in schema["required"].as_array().into_iter().flatten() {
            let key = required.as_str().unwrap();
            if !object.contains_key(key) {
                found.push(format!("{at}: the required key {key:?} is missing"));
            }
        }
        for (key, member) in object {
            match properties.get(key) {
                Some(property) => {
                    found.extend(problems(root, property, member, &format!("{at}.{key}")));
                }
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    found.push(format!("{at}: the key {key:?} is not in the schema"));
                }
                None => {}
            }
        }
    }
    if let Some(items) = value.as_array() {
        let count = items.len() as u64;
        if schema
            .get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|n| count < n)
        {
            found.push(format!("{at}: {count} items are too few"));
        }
        if schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|n| count > n)
        {
            found.push(format!("{at}: {count} items are too many"));
        }
        if let Some(item) = schema.get("items") {
            for (i, member) in items.iter().enumerate() {
                found.extend(problems(root, item, member, &format!("{at}[{i}]")));
            }
        }
    }
    if let (Some(minimum), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < minimum
    {
        found.push(format!("{at}: {number} is below {minimum}"));
    }
    found
}

#[test]
fn every_roles_schema_parses_and_the_fixture_answers_validate_against_it() {
    let answers = fixture_answers();
    for role in ROLES {
        let schema = schema(role);
        assert_eq!(schema["type"], "object", "{role}: {schema}");
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        let fixtures = answers
            .get(role)
            .unwrap_or_else(|| panic!("no fixture answers {role}"));
        for answer in fixtures {
            for key in &required {
                assert!(
                    answer.get(key.as_str().unwrap()).is_some(),
                    "{role}: {answer} lacks the required {key}"
                );
            }
            let found = problems(&schema, &schema, answer, role);
            assert!(found.is_empty(), "{role}: {answer}\n{}", found.join("\n"));
        }
    }
}

/// Plan mode's role is `breakdown`; `plan`, its name before, is the same schema.
#[test]
fn plan_is_an_alias_of_breakdown() {
    assert_eq!(schema("plan"), schema("breakdown"));
}

#[test]
fn the_validator_refuses_what_the_schema_refuses() {
    let verify = schema("verify");
    for bad in [
        serde_json::json!({"verdict": "accept"}),
        serde_json::json!({"verdict": "maybe", "reason": "x"}),
        serde_json::json!({"verdict": "accept", "reason": "x", "score": 3}),
    ] {
        assert!(
            !problems(&verify, &verify, &bad, "verify").is_empty(),
            "{bad}"
        );
    }
    let decompose = schema("decompose");
    let one = serde_json::json!({"subtasks": [{"name": "a", "accept": "b"}]});
    assert!(!problems(&decompose, &decompose, &one, "decompose").is_empty());
}

#[test]
fn without_a_known_role_schema_names_the_roles_and_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    for (args, said) in [
        (&["schema"][..], "name a role"),
        (
            &["schema", "nope"],
            "nope is not a role with a structured answer",
        ),
        (&["schema", "build"], "build answers in prose"),
        (&["schema", "planner"], "<SCRATCHPAD> and </SCRATCHPAD>"),
    ] {
        let out = ralph(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(64), "{args:?}",);
        let text = stderr(&out);
        assert!(text.contains(said), "{args:?}: {text}");
        for role in ROLES {
            assert!(text.contains(role), "{args:?} does not name {role}: {text}");
        }
        assert_eq!(stdout(&out), "", "{args:?}");
    }
    // What the docs say of it: the page of answers and `ralph schema --help`.
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/answers.md"))
            .unwrap();
    assert!(
        page.contains("names the\nroles (and exits 64"),
        "docs/answers.md"
    );
    let help = crate::command(Path::new("."), &["schema", "--help"])
        .output()
        .unwrap();
    assert!(stdout(&help).contains("exits 64"), "{}", stdout(&help));
}

/// `docs/answers.md`: the example under each role's heading (`` ## `role` ``) validates
/// against that role's schema, and every role has one.
#[test]
fn the_documented_examples_validate_against_their_schemas() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/answers.md");
    let page = std::fs::read_to_string(path).unwrap();
    let mut shown = Vec::new();
    for section in page.split("\n## `").skip(1) {
        let role = &section[..section.find('`').unwrap()];
        let schema = schema(role);
        for block in section.split("```json\n").skip(1) {
            let json = &block[..block.find("```").unwrap()];
            let answer: Value =
                serde_json::from_str(json).unwrap_or_else(|e| panic!("{role}: {e}\n{json}"));
            let found = problems(&schema, &schema, &answer, role);
            assert!(found.is_empty(), "{role}: {answer}\n{}", found.join("\n"));
            shown.push(role.to_owned());
        }
    }
    for role in ROLES {
        assert!(
            shown.iter().any(|r| r == role),
            "docs/answers.md shows no {role}"
        );
    }
}
