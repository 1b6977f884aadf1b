//! `ralph schema ROLE`: the JSON Schema a structured role's answer must match, exactly as
//! ralph sends it to the agent ([`ralph::answer_schema`]), for the authors of command agents and
//! scripts.

use ralph::Role;

use crate::out::out;

/// The roles with a structured answer, by the names `ralph schema` takes (the first is the
/// one it shows).
const ROLES: [(&[&str], Role); 7] = [
    (&["investigate"], Role::Investigate),
    (&["verify"], Role::Verify),
    (&["gap_analysis", "gap-analysis"], Role::GapAnalysis),
    (&["decompose"], Role::Decompose),
    // Plan mode's role is `breakdown` everywhere; `plan` stays accepted (older scripts).
    (&["breakdown", "plan"], Role::Breakdown),
    (&["assess"], Role::Assess),
    (&["draft"], Role::Draft),
];

/// The exit code of `ralph schema` with no role or one it does not know: a usage error, as
/// every other command line ralph cannot make sense of.
const NO_ROLE: u8 = crate::USAGE;

/// Prints `role`'s schema (pretty JSON) and returns 0; without a role, or with one that has
/// no schema, says which roles have one on stderr and returns 64 (a usage error).
pub(crate) fn schema(role: Option<&str>) -> u8 {
    let names: Vec<&str> = ROLES.iter().map(|(names, _)| names[0]).collect();
    let names = names.join(", ");
    let Some(given) = role else {
        eprintln!("ralph schema: name a role; the roles with a structured answer: {names}");
        return NO_ROLE;
    };
    let found = ROLES
        .iter()
        .find(|(aliases, _)| aliases.contains(&given))
        .and_then(|(_, role)| ralph::answer_schema(*role));
    match found {
        Some(schema) => {
            let text = serde_json::to_string_pretty(&schema).unwrap_or_default();
            out!("{text}");
            0
        }
        None => {
            let why = match given {
                "build" => "answers in prose, ending with its marker: it has no schema",
                "planner" => {
                    "answers in prose: the plan, an optional section between the lines \
                     <SCRATCHPAD> and </SCRATCHPAD> (its notes for the next planning run), then \
                     its phrase; it has no schema (docs/answers.md)"
                }
                _ => "is not a role with a structured answer",
            };
            eprintln!("ralph schema: {given} {why}; the roles with a structured answer: {names}");
            NO_ROLE
        }
    }
}
