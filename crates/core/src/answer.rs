//! Structured answers: the JSON that investigate, verify, gap-analysis and decompose runs
//! return, with the JSON Schema each is checked against.
//!
//! The schema is generated from these types (and sent to agents that can enforce it, like the
//! Claude CLI's `--json-schema`); the answer is then deserialized strictly (unknown fields are
//! errors) and checked for what a schema cannot say well (non-empty names, dependency
//! references). An invalid answer is retried once with the error shown to the agent.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::agent::AgentRun;
use crate::model::{Complexity, Priority};

/// A dependency of a proposed task: the index of an earlier task in the same answer, or
/// the id of a task already on the board.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DepRef {
    /// 0-based index of an earlier task in the same list.
    Index(usize),
    /// An existing task id, e.g. `t-2`.
    Id(String),
}

/// A task an agent proposes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposedTask {
    /// One-line description.
    pub name: String,
    /// Acceptance criteria: how a verifier can tell it is done.
    pub accept: String,
    /// Context, hints, output to suppress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Tasks this one needs first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<DepRef>,
    /// An explicit priority, if the agent is sure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// An explicit size estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complexity: Option<Complexity>,
}

/// INVESTIGATE: an issue becomes tasks, or is out of scope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InvestigateAnswer {
    /// True when the issue is not part of the spec's work.
    #[serde(default)]
    pub out_of_scope: bool,
    /// Why (required when out of scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tasks that resolve the issue (at least one unless out of scope or already
    /// planned).
    #[serde(default)]
    pub tasks: Vec<ProposedTask>,
    /// Ids of tasks already on the board that cover the issue (or part of it: `tasks` then
    /// adds the rest). The spec's own issue, when a person planned tasks before the first
    /// run, is often covered this way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub already_planned: Vec<String>,
    /// A question for a person, when the issue cannot be turned into tasks without their
    /// decision: the issue then waits for the answer (`ralph answer`), which its next
    /// investigation gets; the other fields may be left empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

/// The question of a structured answer that may ask one, when it holds a real one.
pub fn asked(question: Option<&String>) -> Option<&str> {
    question.map(|q| q.trim()).filter(|q| !q.is_empty())
}

/// `accept` or `reject`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    /// The task meets its acceptance criteria.
    Accept,
    /// It does not.
    Reject,
}

/// VERIFY: one done task judged against its acceptance criteria (seed 000's verifier JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyAnswer {
    /// The task judged (optional; checked when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The verdict.
    pub verdict: VerdictKind,
    /// Why.
    pub reason: String,
    /// Spec gaps noticed while checking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
}

impl VerifyAnswer {
    /// Refuses an answer whose `task_id` names another task than `asked`, the one the
    /// verifier was asked about: its verdict is not about this task (it is asked again).
    pub fn check_task(&self, asked: &str) -> Result<(), String> {
        match self.task_id.as_deref() {
            Some(named) if named.trim() != asked => Err(format!(
                "task_id is {named:?}, but the task to judge is {asked:?}: give the verdict on {asked}"
            )),
            _ => Ok(()),
        }
    }
}

/// VERIFY's gap analysis: work the spec still needs, and an answer for each gap the
/// verifiers named (seed 000, fork/join step 5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GapAnswer {
    /// Missing work, as tasks.
    #[serde(default)]
    pub tasks: Vec<ProposedTask>,
    /// Problems needing investigation (bugs, ambiguities), as issue texts.
    #[serde(default)]
    pub issues: Vec<String>,
    /// One reply per gap the verifiers named, by its number in the prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_gaps: Vec<GapReply>,
}

/// How the gap analysis answers one gap a verifier named: with a task, an issue, or why no
/// new work is needed. Exactly one of the three.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GapReply {
    /// The gap's number, as listed in the prompt (1 is the first).
    pub gap: usize,
    /// The 0-based index in `tasks` of the task that covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<usize>,
    /// The 0-based index in `issues` of the issue that covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<usize>,
    /// Why no new work is needed (already done, already planned, not asked by the spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_work: Option<String>,
}

impl GapAnswer {
    /// Checks that each of the `named` verifier gaps has exactly one reply.
    ///
    /// # Errors
    ///
    /// A message for the agent naming the gap left out, repeated or unknown.
    pub fn check_replies(&self, named: usize) -> Result<(), String> {
        let mut seen = vec![false; named];
        for (i, reply) in self.verifier_gaps.iter().enumerate() {
            let slot = reply
                .gap
                .checked_sub(1)
                .and_then(|n| seen.get_mut(n))
                .ok_or_else(|| {
                    format!(
                        "verifier_gaps[{i}].gap is {}; the gaps are numbered 1 to {named}",
                        reply.gap
                    )
                })?;
            if std::mem::replace(slot, true) {
                return Err(format!(
                    "verifier_gaps[{i}] answers gap {} again: one reply per gap",
                    reply.gap
                ));
            }
        }
        match seen.iter().position(|answered| !answered) {
            Some(n) => Err(format!(
                "gap {} has no reply in verifier_gaps: answer each with a task, an issue or \
                 `no_work` saying why none is needed",
                n + 1
            )),
            None => Ok(()),
        }
    }
}

/// DECOMPOSE: a killed task split into smaller ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecomposeAnswer {
    /// 2–5 subtasks, each completable in one iteration.
    #[schemars(length(min = 2, max = 5))]
    pub subtasks: Vec<ProposedTask>,
}

#[cfg(feature = "specs")]
/// Plan mode: the freeform specs as structured work (seed 004's `implementation.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanAnswer {
    /// One entry per spec.
    #[serde(default)]
    pub specs: Vec<PlannedSpec>,
    /// A question for a person, when the specs cannot be broken down without their
    /// decision: plan mode then waits for the answer (`ralph answer plan-mode "…"`), which
    /// the next breakdown gets; `specs` may be left empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

#[cfg(feature = "specs")]
/// One spec, as plan mode extracted it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlannedSpec {
    /// A stable kebab-case id.
    pub id: String,
    /// A human name (the commit message of the spec).
    pub name: String,
    /// The spec's file, as given in the prompt.
    pub file: String,
    /// 1 is built first.
    pub priority: i64,
    /// What an implementer of any of its tasks should know.
    #[serde(default)]
    pub context: String,
    /// Tasks in build order, each one agent session's worth.
    pub tasks: Vec<PlannedTask>,
    /// The spec's acceptance criteria.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
}

#[cfg(feature = "specs")]
/// One task of a planned spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlannedTask {
    /// What to do.
    pub description: String,
    /// How a verifier can tell it is done.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
}

#[cfg(feature = "specs")]
impl Answer for PlanAnswer {
    fn check(&self) -> Result<(), String> {
        if asked(self.question.as_ref()).is_some() {
            return Ok(());
        }
        let mut ids = std::collections::HashSet::new();
        for (i, spec) in self.specs.iter().enumerate() {
            let id = spec.id.trim();
            if id.is_empty() || id.contains(['/', '\\']) || id.chars().any(char::is_whitespace) {
                return Err(format!(
                    "specs[{i}].id {:?} must be a non-empty kebab-case id",
                    spec.id
                ));
            }
            if !ids.insert(id) {
                return Err(format!("specs[{i}].id repeats {:?}", spec.id));
            }
            if let Some(j) = spec
                .tasks
                .iter()
                .position(|t| t.description.trim().is_empty())
            {
                return Err(format!("specs[{i}].tasks[{j}].description is empty"));
            }
        }
        Ok(())
    }
}

/// A structured answer type: its schema and the checks beyond it.
pub trait Answer: DeserializeOwned + JsonSchema + 'static {
    /// Checks what the schema cannot express.
    ///
    /// # Errors
    ///
    /// A message for the agent saying what to fix.
    fn check(&self) -> Result<(), String>;

    /// The JSON Schema sent to the agent: made once per type (every structured run sends
    /// it), then copied.
    fn schema() -> serde_json::Value {
        use std::any::TypeId;
        use std::collections::HashMap;
        use std::sync::{LazyLock, Mutex, PoisonError};
        static MADE: LazyLock<Mutex<HashMap<TypeId, serde_json::Value>>> =
            LazyLock::new(Mutex::default);
        MADE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(TypeId::of::<Self>())
            .or_insert_with(|| {
                serde_json::to_value(schemars::schema_for!(Self)).unwrap_or(serde_json::Value::Null)
            })
            .clone()
    }
}

impl Answer for InvestigateAnswer {
    fn check(&self) -> Result<(), String> {
        if asked(self.question.as_ref()).is_some() {
            return Ok(());
        }
        if self.out_of_scope {
            return match self.reason.as_deref().map(str::trim) {
                Some(r) if !r.is_empty() => Ok(()),
                _ => Err("`reason` is required when `out_of_scope` is true".into()),
            };
        }
        if self.tasks.is_empty() && self.already_planned.is_empty() {
            return Err(
                "give at least one task, list the tasks already planned that cover it in \
                 `already_planned`, or set `out_of_scope` with a `reason`"
                    .into(),
            );
        }
        check_tasks("tasks", &self.tasks)
    }
}

impl Answer for VerifyAnswer {
    fn check(&self) -> Result<(), String> {
        if self.reason.trim().is_empty() {
            return Err("`reason` must say why".into());
        }
        Ok(())
    }
}

impl Answer for GapAnswer {
    fn check(&self) -> Result<(), String> {
        if let Some(i) = self.issues.iter().position(|t| t.trim().is_empty()) {
            return Err(format!("issues[{i}] is empty"));
        }
        check_tasks("tasks", &self.tasks)?;
        for (i, reply) in self.verifier_gaps.iter().enumerate() {
            let no_work = reply.no_work.as_deref().map(str::trim);
            let given = usize::from(reply.task.is_some())
                + usize::from(reply.issue.is_some())
                + usize::from(no_work.is_some());
            if given != 1 {
                return Err(format!(
                    "verifier_gaps[{i}] must give exactly one of `task`, `issue` and `no_work`"
                ));
            }
            if reply.task.is_some_and(|t| t >= self.tasks.len()) {
                return Err(format!("verifier_gaps[{i}].task names no task in `tasks`"));
            }
            if reply.issue.is_some_and(|t| t >= self.issues.len()) {
                return Err(format!(
                    "verifier_gaps[{i}].issue names no issue in `issues`"
                ));
            }
            if no_work == Some("") {
                return Err(format!("verifier_gaps[{i}].no_work must say why"));
            }
        }
        Ok(())
    }
}

impl Answer for DecomposeAnswer {
    fn check(&self) -> Result<(), String> {
        if !(2..=5).contains(&self.subtasks.len()) {
            return Err(format!("give 2 to 5 subtasks, not {}", self.subtasks.len()));
        }
        check_tasks("subtasks", &self.subtasks)
    }
}

fn check_tasks(field: &str, tasks: &[ProposedTask]) -> Result<(), String> {
    for (i, task) in tasks.iter().enumerate() {
        if task.name.trim().is_empty() {
            return Err(format!("{field}[{i}].name is empty"));
        }
        for dep in &task.deps {
            if let DepRef::Index(d) = dep
                && *d >= i
            {
                return Err(format!(
                    "{field}[{i}].deps refers to index {d}; an index must name an earlier task in the list"
                ));
            }
        }
    }
    Ok(())
}

/// Reads a structured answer from a run: its structured output, else a final text that is
/// exactly one JSON object. Prose is never parsed as an answer.
///
/// # Errors
///
/// A message for the agent: what was missing or wrong, with serde's line and column.
pub fn parse<T: Answer>(run: &AgentRun) -> Result<T, String> {
    let value = match &run.structured {
        Some(value) => value.clone(),
        None => {
            let text = run.final_text.trim();
            if !text.starts_with('{') {
                return Err(format!(
                    "no structured answer: it starts with {:?} where a JSON object matching the schema was asked for",
                    start_of(text)
                ));
            }
            serde_json::from_str(text).map_err(|e| format!("the answer is not valid JSON: {e}"))?
        }
    };
    let answer: T = serde_json::from_value(value)
        .map_err(|e| format!("the answer does not match the schema: {e}"))?;
    answer.check()?;
    Ok(answer)
}

/// The first 60 characters of `text` (an empty answer is said to be empty).
fn start_of(text: &str) -> String {
    match text.char_indices().nth(60) {
        _ if text.is_empty() => "(nothing)".to_owned(),
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_with(value: serde_json::Value) -> AgentRun {
        AgentRun::completed("").with_structured(value)
    }

    #[test]
    fn verify_answer_parses_seed_format() {
        let v: VerifyAnswer = parse(&run_with(json!({
            "task_id": "t-1", "verdict": "reject", "reason": "edge case", "gaps": ["error handling"]
        })))
        .unwrap();
        assert_eq!(v.verdict, VerdictKind::Reject);
        assert_eq!(v.gaps, ["error handling"]);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_named() {
        let e = parse::<VerifyAnswer>(&run_with(json!({"verdict": "maybe", "reason": "x"})))
            .unwrap_err();
        assert!(e.contains("maybe"), "{e}");
        let e = parse::<VerifyAnswer>(&run_with(
            json!({"verdict": "accept", "reason": "x", "score": 3}),
        ))
        .unwrap_err();
        assert!(e.contains("score"), "{e}");
    }

    #[test]
    fn prose_is_not_an_answer_but_a_bare_json_text_is() {
        let e = parse::<VerifyAnswer>(&AgentRun::completed("I accept this task.")).unwrap_err();
        assert!(e.contains("no structured answer"), "{e}");
        let v: VerifyAnswer = parse(&AgentRun::completed(
            r#" {"verdict":"accept","reason":"ok"} "#,
        ))
        .unwrap();
        assert_eq!(v.verdict, VerdictKind::Accept);
        let e = parse::<VerifyAnswer>(&AgentRun::completed("{\"verdict\":")).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn decompose_needs_two_to_five() {
        let one = json!({"subtasks": [{"name": "a", "accept": "x"}]});
        assert!(
            parse::<DecomposeAnswer>(&run_with(one))
                .unwrap_err()
                .contains("2 to 5")
        );
        let two = json!({"subtasks": [{"name": "a", "accept": "x"}, {"name": "b", "accept": "y", "deps": [0]}]});
        assert_eq!(
            parse::<DecomposeAnswer>(&run_with(two))
                .unwrap()
                .subtasks
                .len(),
            2
        );
    }

    #[test]
    fn forward_index_deps_are_refused() {
        let a = json!({"tasks": [{"name": "a", "accept": "x", "deps": [1]}, {"name": "b", "accept": "y"}]});
        let e = parse::<InvestigateAnswer>(&run_with(a)).unwrap_err();
        assert!(e.contains("tasks[0].deps"), "{e}");
        let ids = json!({"tasks": [{"name": "a", "accept": "x", "deps": ["t-9"]}]});
        let ok = parse::<InvestigateAnswer>(&run_with(ids)).unwrap();
        assert_eq!(ok.tasks[0].deps, [DepRef::Id("t-9".into())]);
    }

    #[test]
    fn out_of_scope_needs_a_reason() {
        let e = parse::<InvestigateAnswer>(&run_with(json!({"out_of_scope": true}))).unwrap_err();
        assert!(e.contains("reason"), "{e}");
        let empty = parse::<InvestigateAnswer>(&run_with(json!({}))).unwrap_err();
        assert!(empty.contains("at least one task"), "{empty}");
    }

    #[test]
    fn every_verifier_gap_gets_exactly_one_reply() {
        let answer = |replies: serde_json::Value| {
            parse::<GapAnswer>(&run_with(json!({
                "tasks": [{"name": "a", "accept": "x"}],
                "issues": ["why"],
                "verifier_gaps": replies,
            })))
        };
        let good = answer(json!([
            {"gap": 1, "task": 0},
            {"gap": 2, "issue": 0},
            {"gap": 3, "no_work": "t-4 covers it"}
        ]))
        .unwrap();
        good.check_replies(3).unwrap();
        let missing = good.check_replies(4).unwrap_err();
        assert!(missing.contains("gap 4 has no reply"), "{missing}");
        let unknown = good.check_replies(2).unwrap_err();
        assert!(unknown.contains("numbered 1 to 2"), "{unknown}");
        let twice = answer(json!([{"gap": 1, "task": 0}, {"gap": 1, "issue": 0}])).unwrap();
        assert!(twice.check_replies(1).unwrap_err().contains("again"));
        for bad in [
            json!([{"gap": 1}]),
            json!([{"gap": 1, "task": 0, "issue": 0}]),
            json!([{"gap": 1, "task": 5}]),
            json!([{"gap": 1, "no_work": " "}]),
        ] {
            let e = answer(bad.clone()).unwrap_err();
            assert!(e.contains("verifier_gaps[0]"), "{bad}: {e}");
        }
    }

    #[test]
    fn schemas_are_objects() {
        for schema in [
            InvestigateAnswer::schema(),
            VerifyAnswer::schema(),
            GapAnswer::schema(),
            DecomposeAnswer::schema(),
        ] {
            assert_eq!(schema["type"], "object", "{schema}");
        }
        let d = DecomposeAnswer::schema();
        assert_eq!(d["properties"]["subtasks"]["minItems"], 2, "{d}");
    }
}
