//! Prompt templates: minijinja templates embedded in the crate, each replaceable by a file
//! named in `[prompts]` of the config.
//!
//! Every template gets `spec` (`name`, `path`, `text`). Then:
//!
//! | template | variables |
//! |---|---|
//! | `build` | `task` (a [`Task`](crate::model::Task) as in `plan.jsonl`: `id`, `name`, `accept`, `notes`, `tombstones`…), `completed` (the last 10 finished tasks' names), `completed_earlier` (how many finished before those), `gates` (names), `attempts` (recent [`RecentAttempt`](crate::model::RecentAttempt)s: `iteration`, `task`, `tried`, `result`, `next`, `at`), `branch` (where ralph commits the task: `branch main`; absent outside git) |
//! | `retry` | as `build`, plus `attempt` (this attempt's number in the round) and `failure` (the previous attempt's failure, bounded) |
//! | `investigate` | `issue` (`id`, `text`), `tasks` (planned tasks: `id`, `name`) |
//! | `verify` | `task` |
//! | `gap_analysis` | `done`, `remaining` (task summaries), `gaps` (verifier notes) |
//! | `decompose` | `task` (its `kill_reason` is `timeout`, `context_limit` or `rejected`; a rejected one has `rejections`, the count), `log` (head and tail of the killed run's log, or of the last build's for a rejected task), `head`, `tail` (line counts), `rejections` (the reasons of its latest rejections, oldest first, bounded) |
//! | `thread` | `title`, `iteration`, `max_iterations`, `promise`, `attempts` (the last few: `iteration`, `summary`, `failed`), `failed` (criteria that failed last time), `feedback` (the reviewer's latest text from `send-back`, if any) — `spec.text` is the thread's spec |
//! | `thread_verify` | `title`, `criterion` — `spec.text` is the thread's spec |
//! | `thread_assess` | `title`, `spec_version`, `problems` (what ralph's own parse of the spec found) — `spec.text` is the thread's spec |
//! | `thread_polish` | `title`, `promise`, `criteria` (their texts), `failed` (what the last polish or round left failing) — `spec.text` is the thread's spec |
//! | `thread_draft` | `title`, `spec_version`, `problems`, `turns` (the last 20 of the conversation: `by`, `text`), `earlier` (how many older turns are not shown), `message` (the person's) — `spec.text` is the thread's spec |
//!
//! Build mode over `implementation.json` (seeds 004 and 002) has its own templates; there
//! `spec` is a [`SpecEntry`](https://docs.rs/ralph-loop/latest/ralph/specs/struct.SpecEntry.html) as in the file (`id`,
//! `name`, `file`, `context`, `tasks`, `acceptanceCriteria`…):
//!
//! | template | variables |
//! |---|---|
//! | `task` | `spec`, `task` (a [`TaskEntry`](https://docs.rs/ralph-loop/latest/ralph/specs/struct.TaskEntry.html): `id`, `description`…), `criteria` (the task's acceptance criteria, or a default), `completed` (the spec's last 10 completed tasks), `completed_earlier` (how many it completed before those), `plan` (the active plan's text), `gates` (names) |
//! | `task_retry` | as `task`, plus `attempt` (this session's number for the task) and `failure` (the previous failure, bounded) |
//! | `planner` | `spec`, `spec_text`, `workspace`, `spec_path`, `ralph_home` (`.ralph`), `log_dir` (the spec's run logs), `plan_path`, `scratchpad_path` (`.ralph/SCRATCHPAD.md`), `phrase` (the magic phrase), `scratchpad` (its content, bounded), `scratchpad_bytes` (the bound), `previous_plan` and `reason` (when re-planning) |
//! | `spec_verify` | `spec`, `spec_text`, `plan`, `changes` (`git status` lines of the uncommitted work) |
//! | `plan_mode` | `specs` (`file`, `text`), `existing` (`id`, `file`, `status`, `completed`: descriptions) |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::Environment;
use serde::Serialize;

use crate::config::TEMPLATES;

/// The line a template writes where the stable part of its prompt ends: above it what every
/// call of the role in a run shares (the instructions, the spec, its plan), below it this
/// call's own (the task, its feedback). The runtime takes the line out before the agent
/// sees the prompt ([`split_stable`]) and tells the agent where the stable part ends, so that
/// a provider's prompt cache can reuse it. A template without it has no stable part.
pub const STABLE_END: &str = "<!-- ralph: what follows is this call's own -->";

/// `prompt` without its [`STABLE_END`] line, and the length in bytes of what came before
/// that line (0 when there is none): the stable part.
///
/// ```
/// use ralph_loop_core::prompt::{STABLE_END, split_stable};
///
/// let (text, stable) = split_stable(&format!("# Rules\nspec\n{STABLE_END}\n# Task: t-1\n"));
/// assert_eq!(text, "# Rules\nspec\n# Task: t-1\n");
/// assert_eq!(&text[..stable], "# Rules\nspec\n");
/// assert_eq!(split_stable("no marker"), ("no marker".to_owned(), 0));
/// ```
pub fn split_stable(prompt: &str) -> (String, usize) {
    let at = match prompt.strip_prefix(STABLE_END) {
        Some(_) => Some(0),
        None => prompt
            .find(&format!("\n{STABLE_END}"))
            .map(|newline| newline + 1),
    };
    let Some(at) = at else {
        return (prompt.to_owned(), 0);
    };
    let after = &prompt[at + STABLE_END.len()..];
    let after = after.strip_prefix('\n').unwrap_or(after);
    (format!("{}{after}", &prompt[..at]), at)
}

/// How many recently finished tasks a build prompt names (`completed`); the earlier ones
/// are a count (`completed_earlier`), so the prompt stays the same size however long the
/// board grows.
pub const RECENT_COMPLETED: usize = 10;

/// The built-in templates, by name.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("build", include_str!("templates/build.md")),
    ("retry", include_str!("templates/retry.md")),
    ("investigate", include_str!("templates/investigate.md")),
    ("verify", include_str!("templates/verify.md")),
    ("gap_analysis", include_str!("templates/gap_analysis.md")),
    ("decompose", include_str!("templates/decompose.md")),
    ("thread", include_str!("templates/thread.md")),
    ("thread_verify", include_str!("templates/thread_verify.md")),
    ("thread_assess", include_str!("templates/thread_assess.md")),
    ("thread_draft", include_str!("templates/thread_draft.md")),
    ("thread_polish", include_str!("templates/thread_polish.md")),
    ("task", include_str!("templates/task.md")),
    ("task_retry", include_str!("templates/task_retry.md")),
    ("planner", include_str!("templates/planner.md")),
    ("spec_verify", include_str!("templates/spec_verify.md")),
    ("plan_mode", include_str!("templates/plan_mode.md")),
];

/// A template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
#[error("prompt template {name}{}: {message}", origin.as_ref().map(|p| format!(" ({p})")).unwrap_or_default())]
#[non_exhaustive]
pub struct PromptError {
    /// The template's name (`build`).
    pub name: String,
    /// The override file it came from, if any.
    pub origin: Option<String>,
    /// What is wrong, with the line when minijinja knows it.
    pub message: String,
}

/// The loaded templates.
#[derive(Debug)]
pub struct Prompts {
    env: Environment<'static>,
    origins: Vec<(String, String)>,
}

impl Prompts {
    /// The built-in templates.
    pub fn builtin() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
        env.set_keep_trailing_newline(true);
        for (name, source) in DEFAULTS {
            // The built-in templates are tested to compile; see `builtin_templates_compile`.
            let _ = env.add_template(name, source);
        }
        Prompts {
            env,
            origins: Vec::new(),
        }
    }

    /// The built-in templates, with the overrides `paths` names (`[prompts]`: template name
    /// → file, relative to `workspace`).
    ///
    /// # Errors
    ///
    /// [`PromptError`] naming the file that cannot be read or does not compile (with its
    /// line), or a name that is no template.
    pub fn load(workspace: &Path, paths: &BTreeMap<String, PathBuf>) -> Result<Self, PromptError> {
        let mut prompts = Self::builtin();
        for (name, path) in paths {
            let Some(&(name, _)) = DEFAULTS.iter().find(|(n, _)| n == name) else {
                return Err(PromptError {
                    name: name.clone(),
                    origin: Some(path.display().to_string()),
                    message: format!("no such template; the templates: {}", TEMPLATES.join(", ")),
                });
            };
            prompts.replace(name, &workspace.join(path))?;
        }
        Ok(prompts)
    }

    /// Where template `name` comes from: the override file named in `[prompts]`, or `None`
    /// for the built-in one.
    pub fn origin(&self, name: &str) -> Option<&str> {
        self.origins
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, o)| o.as_str())
    }

    fn replace(&mut self, name: &'static str, path: &Path) -> Result<(), PromptError> {
        let origin = path.display().to_string();
        let error = |message: String| PromptError {
            name: name.to_owned(),
            origin: Some(origin.clone()),
            message,
        };
        let source = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        self.env
            .add_template_owned(name, source)
            .map_err(|e| error(describe(&e)))?;
        self.origins.push((name.to_owned(), origin));
        Ok(())
    }

    /// Renders template `name` with `ctx`.
    ///
    /// # Errors
    ///
    /// [`PromptError`] when the template fails at render time.
    pub fn render(&self, name: &str, ctx: &impl Serialize) -> Result<String, PromptError> {
        let origin = self
            .origins
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, o)| o.clone());
        let error = |message: String| PromptError {
            name: name.to_owned(),
            origin: origin.clone(),
            message,
        };
        let template = self
            .env
            .get_template(name)
            .map_err(|e| error(describe(&e)))?;
        template
            .render(ctx)
            .map(|text| text.trim_end().to_owned() + "\n")
            .map_err(|e| error(describe(&e)))
    }
}

fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!("line {line}: {e}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    #[test]
    fn every_built_in_template_is_one_prompts_can_name() {
        let mut built_in: Vec<&str> = super::DEFAULTS.iter().map(|(name, _)| *name).collect();
        let mut named = super::TEMPLATES.to_vec();
        built_in.sort_unstable();
        named.sort_unstable();
        assert_eq!(built_in, named);
    }

    use super::*;
    use serde_json::json;

    fn spec() -> serde_json::Value {
        json!({"name": "Greeter", "path": "specs/greeter.md", "text": "Say hello."})
    }

    #[test]
    fn builtin_templates_compile() {
        let env_check = {
            let mut env = Environment::new();
            DEFAULTS
                .iter()
                .map(|(n, s)| env.add_template(n, s).map_err(|e| format!("{n}: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        env_check.unwrap();
    }

    #[test]
    fn build_prompt_follows_seed_004() {
        let p = Prompts::builtin();
        let text = p
            .render(
                "build",
                &json!({
                    "spec": spec(),
                    "task": {"id": "t-1", "name": "Add greeting", "accept": "prints hello"},
                    "completed": ["Create project"],
                    "gates": ["test"],
                }),
            )
            .unwrap();
        for part in [
            "# Task: Add greeting",
            "You are working on: **Greeter**",
            "- [x] Create project",
            "Complete ONLY this task:",
            "- [ ] prints hello",
            "Do NOT commit",
            "<TASK_DONE>",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
        // The marker is never a whole line of the prompt, so an echoed prompt is not a claim.
        assert!(text.lines().all(|l| l.trim() != "<TASK_DONE>"));
    }

    /// Audit row 000-R28: the six gap types of seed 000, each with what it becomes.
    #[test]
    fn gap_analysis_names_every_gap_type_of_the_seed() {
        let text = Prompts::builtin()
            .render(
                "gap_analysis",
                &json!({"spec": spec(), "done": [], "remaining": [], "gaps": []}),
            )
            .unwrap();
        for gap in [
            "a missing feature | a task",
            "an incomplete implementation | a follow-up task",
            "a bug discovered | an issue",
            "an edge case not handled | a task when the fix is clear, else an issue",
            "a test coverage gap | a task",
            "a spec ambiguity | an issue",
        ] {
            assert!(text.contains(gap), "missing {gap:?} in\n{text}");
        }
    }

    /// Audit rows 000-R60 to 000-R63: what seed 000's DECOMPOSE asks of the decomposer —
    /// the killed run's log, head and tail only; what was attempted, where it got stuck,
    /// what flooded the context; 2 to 5 tasks, each one session, with notes on output to
    /// suppress — and, for a task verifiers rejected, their reasons instead of a kill.
    #[test]
    fn decompose_prompt_asks_what_seed_000_asks() {
        let p = Prompts::builtin();
        let ctx = |reason: &str| {
            json!({
                "task": {"id": "t-3", "name": "Write the parser", "accept": "parses",
                         "kill_reason": reason, "rejections": 2},
                "kind": "task", "log": "cargo build\n[… 900 lines omitted …]\nerror[E0308]",
                "head": 50, "tail": 50, "rejections": ["rejected by v1: no tests"],
            })
        };
        let killed = p.render("decompose", &ctx("context_limit")).unwrap();
        for part in [
            "The task 'Write the parser' was stopped (context_limit) before it finished.",
            "Acceptance criteria: parses",
            "## The Stopped Run's Log (first 50 and last 50 lines only)\n\n```\ncargo build\n\
             [… 900 lines omitted …]\nerror[E0308]\n```",
            "Analyze what was attempted, where it got stuck, and what output flooded the context.",
            "Split the task into 2 to 5 smaller tasks, each completable in one agent session.",
            "Put notes\nabout verbose output to suppress into each subtask's `notes`.",
            "Do not change any file.",
            r#"{"subtasks": [{"name": "...", "accept": "...", "notes": "...", "deps": []}]}"#,
        ] {
            assert!(killed.contains(part), "missing {part:?} in\n{killed}");
        }
        assert!(!killed.contains("rejected by v1"), "{killed}");

        let rejected = p.render("decompose", &ctx("rejected")).unwrap();
        for part in [
            "verifiers rejected it\n2 times",
            "## Why It Was Rejected\n\n- rejected by v1: no tests",
            "## Its Last Build's Log (first 50 and last 50 lines only)",
            "Analyze what the verifiers found missing or wrong each time, and what the build \
             attempted.",
            "Split the task into 2 to 5 smaller tasks, each completable in one agent session.",
        ] {
            assert!(rejected.contains(part), "missing {part:?} in\n{rejected}");
        }
    }

    #[test]
    fn build_prompt_shows_recent_attempts_only_when_there_are_some() {
        let p = Prompts::builtin();
        let task = json!({"id": "t-2", "name": "x"});
        let none = p
            .render(
                "build",
                &json!({"spec": spec(), "task": task, "attempts": []}),
            )
            .unwrap();
        assert!(!none.contains("Recent Attempts"));
        let attempts = json!([{"iteration": 3, "task": "t-1", "tried": "ran the migration",
                               "result": "gates failed: test", "at": "now"}]);
        let text = p
            .render(
                "retry",
                &json!({"spec": spec(), "task": task, "attempts": attempts, "attempt": 2, "failure": "f"}),
            )
            .unwrap();
        assert!(text.contains("## Recent Attempts"), "{text}");
        assert!(
            text.contains(
                "- Iteration 3, t-1: tried: ran the migration — result: gates failed: test"
            ),
            "{text}"
        );
    }

    #[test]
    fn retry_prompt_carries_the_failure() {
        let p = Prompts::builtin();
        let text = p
            .render(
                "retry",
                &json!({"spec": spec(), "task": {"id": "t-1", "name": "x"}, "attempt": 2,
                        "failure": "Gate `test` failed (exit 1): assertion failed"}),
            )
            .unwrap();
        assert!(text.contains("# Task: x"));
        assert!(text.contains("Attempt 1 of this task did not pass"));
        assert!(text.contains("assertion failed"));
    }

    #[test]
    fn overrides_replace_templates_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.md"), "Custom {{ task.name }}").unwrap();
        std::fs::write(dir.path().join("bad.md"), "line one\n{% if %}").unwrap();
        let paths = BTreeMap::from([("build".to_owned(), "b.md".into())]);
        let p = Prompts::load(dir.path(), &paths).unwrap();
        let text = p.render("build", &json!({"task": {"name": "T"}})).unwrap();
        assert_eq!(text, "Custom T\n");
        // retry includes the overridden build template
        let retry = p
            .render(
                "retry",
                &json!({"task": {"name": "T"}, "attempt": 2, "failure": "f"}),
            )
            .unwrap();
        assert!(retry.starts_with("Custom T"));

        let bad = BTreeMap::from([("verify".to_owned(), "bad.md".into())]);
        let msg = Prompts::load(dir.path(), &bad).unwrap_err().to_string();
        assert!(msg.contains("bad.md") && msg.contains("line 2"), "{msg}");
        let missing = BTreeMap::from([("verify".to_owned(), "nope.md".into())]);
        let msg = Prompts::load(dir.path(), &missing).unwrap_err().to_string();
        assert!(msg.contains("nope.md"), "{msg}");
    }
}
