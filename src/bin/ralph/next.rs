//! What to do next, said in one place: `ralph status` and the end of every run (`construct`,
//! the demo, `plan`, `build`) take it from here. A next step is a command that makes
//! progress when run as printed, naming the actual ids (`ralph issue unblock i-1 && ralph
//! construct`) and repeating the flags that chose the workspace and the agent; what a person
//! must fix first is said before it. The command is the line's first text in backticks (the
//! fix has none), so a script can run it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::model::{Board, IssueStatus, Stage, TaskStatus};
use ralph::{Outcome, SpecsOutcome};

/// How to run ralph again the way this command was run: the workspace (`-C`) and, for the
/// run itself, the flags that chose the agent and the stage timeout, so that the printed
/// command goes on with the same agent.
#[derive(Clone, Debug)]
pub(crate) struct Again {
    /// The workspace as `-C` names it, `.` for none.
    workspace: PathBuf,
    /// `ralph`, or `ralph -C DIR`.
    ralph: String,
    /// The command that resumes the run: `ralph construct --agent mine`, `ralph demo --in DIR`.
    run: String,
}

impl Again {
    /// `ralph [-C workspace] MODE` (`construct`, `build`).
    pub(crate) fn new(workspace: &Path, mode: &str) -> Again {
        let ralph = match workspace == Path::new(".") {
            true => "ralph".to_owned(),
            false => format!("ralph -C {}", shell_word(&workspace.display().to_string())),
        };
        Again {
            workspace: workspace.to_path_buf(),
            run: format!("{ralph} {mode}"),
            ralph,
        }
    }

    /// Plan mode on `specs` (relative to the workspace, as the printed command's `-C` starts
    /// there): `ralph [-C workspace] plan [SPECS…]`.
    pub(crate) fn plan(workspace: &Path, specs: &[PathBuf]) -> Again {
        let mut again = Again::new(workspace, "plan");
        for spec in specs {
            again.run.push(' ');
            again.run.push_str(&shell_word(&spec.display().to_string()));
        }
        again
    }

    /// The demo in `dir`: `ralph demo --in DIR` resumes it.
    pub(crate) fn demo(dir: &Path) -> Again {
        let dir = shell_word(&dir.display().to_string());
        Again {
            workspace: PathBuf::from("."),
            ralph: format!("ralph -C {dir}"),
            run: format!("ralph demo --in {dir}"),
        }
    }

    /// With the flags that chose the agent (`--agent`, `--script`) and the stage timeout.
    pub(crate) fn flags(
        mut self,
        agent: Option<&str>,
        script: Option<&Path>,
        timeout: Option<Duration>,
    ) -> Again {
        if let Some(agent) = agent {
            self.run
                .push_str(&format!(" --agent {}", shell_word(agent)));
        }
        if let Some(script) = script {
            let script = shell_word(&self.seen_from_workspace(script).display().to_string());
            self.run.push_str(&format!(" --script {script}"));
        }
        if let Some(timeout) = timeout {
            let timeout = humantime::format_duration(timeout).to_string();
            self.run
                .push_str(&format!(" --timeout {}", shell_word(&timeout)));
        }
        self
    }

    /// `path` (as this process opens it) as the printed command, started in the workspace,
    /// reaches it: as it is without `-C` or when absolute, relative to the workspace when
    /// inside it, else absolute.
    fn seen_from_workspace(&self, path: &Path) -> PathBuf {
        if self.workspace == Path::new(".") || path.is_absolute() {
            return path.to_path_buf();
        }
        match path.strip_prefix(&self.workspace) {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        }
    }

    /// `git`, or `git -C DIR` for a workspace given with `-C`.
    fn git(&self) -> String {
        match self.workspace == Path::new(".") {
            true => "git".to_owned(),
            false => format!(
                "git -C {}",
                shell_word(&self.workspace.display().to_string())
            ),
        }
    }

    /// `ralph [-C DIR] MODE` and `more`, for a command printed on its own.
    pub(crate) fn command(&self, more: &str) -> String {
        self.run(more)
    }

    /// The run again, with `more` flags (` --once`).
    fn run(&self, more: &str) -> String {
        format!("{}{more}", self.run)
    }
}

/// A next step: what to fix first, if anything; the command; what running it does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Next {
    fix: Option<String>,
    command: String,
    does: Option<String>,
}

impl Next {
    fn run(command: impl Into<String>) -> Next {
        Next {
            fix: None,
            command: command.into(),
            does: None,
        }
    }

    fn after(mut self, fix: impl Into<String>) -> Next {
        self.fix = Some(fix.into());
        self
    }

    fn doing(mut self, does: impl Into<String>) -> Next {
        self.does = Some(does.into());
        self
    }

    /// The command alone, for a script to run.
    pub(crate) fn command(&self) -> &str {
        &self.command
    }
}

/// `fix what blocked it (the reason above), then `ralph task unblock t-1 && ralph
/// construct``, or `` `ralph construct` runs up to 10 more iterations ``.
impl fmt::Display for Next {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(fix) = &self.fix {
            write!(f, "{fix}, then ")?;
        }
        write!(f, "`{}`", self.command)?;
        if let Some(does) = &self.does {
            write!(f, " {does}")?;
        }
        Ok(())
    }
}

/// After a construct run that ended with `outcome`, leaving `board`; `max_iterations` is the
/// workspace's setting (what the run's command runs without `--max-iterations`). A complete
/// spec has a next step too: the board, to read what was accepted.
pub(crate) fn after_construct(
    outcome: &Outcome,
    board: &Board,
    max_iterations: u32,
    again: &Again,
) -> Next {
    let resume = again.run("");
    match outcome {
        Outcome::Complete { .. } => Next::run(format!("{} status", again.ralph))
            .doing("lists the accepted tasks; the spec is complete"),
        Outcome::Blocked { .. } => {
            unblock_then(board, again, &resume).unwrap_or_else(|| waiting(again))
        }
        Outcome::AwaitingAnswer { questions } => match questions.first() {
            Some(asked) => answer_then(again, &asked.id, &resume),
            None => Next::run(resume).doing("resumes where the work stood"),
        },
        Outcome::GateBroken { gate, .. } => {
            let fix = format!("fix the gate {gate} (ralph.toml)");
            match unblock_then(board, again, &resume) {
                Some(next) => next.after(fix),
                None => Next::run(resume).after(fix),
            }
        }
        Outcome::MaxIterations { limit, .. } => {
            let more = match *limit == max_iterations {
                true => String::new(),
                false => format!(" --max-iterations {limit}"),
            };
            Next::run(again.run(&more))
                .doing(format!("runs up to {limit} more {}", iterations(*limit)))
        }
        Outcome::Once { .. } => Next::run(again.run(" --once")).doing("runs the next iteration"),
        Outcome::Planned { .. } => Next::run(format!("{} status", again.ralph)).doing(format!(
            "lists the tasks to review (change them with `{} task …`); then `{resume}` builds them",
            again.ralph
        )),
        Outcome::Unverified { .. } => unverified(resume),
        Outcome::Declared { .. } => declared(resume),
        Outcome::BudgetExhausted { spent_usd, .. } => over_budget(again, *spent_usd),
        _ => Next::run(resume).doing("resumes where the work stood"),
    }
}

/// `ralph answer ID "ANSWER" && <resume>`: a person's answer to `id`'s question, then the
/// run again, which goes on with it.
pub(crate) fn answer_then(again: &Again, id: &str, resume: &str) -> Next {
    Next::run(format!(
        "{} answer {} \"ANSWER\" && {resume}",
        again.ralph,
        shell_word(id)
    ))
    .after(format!("read {id}'s question above"))
    .doing(format!("gives {id} your ANSWER and goes on"))
}

/// For `ralph status`: from the board alone. `None` when the spec is complete.
pub(crate) fn for_board(board: &Board, max_iterations: u32, again: &Again) -> Option<Next> {
    let resume = again.run("");
    if let Some(next) = unblock_then(board, again, &resume) {
        return Some(next);
    }
    Some(match (board.stage(), &board.run.spec) {
        (_, None) => Next::run(again.run(" SPEC.md")).doing("starts on a spec"),
        (Stage::Complete, _) if board.declared_complete && remaining(board) > 0 => declared(resume),
        (Stage::Complete, _) => return None,
        (Stage::Unverified, _) => unverified(resume),
        (Stage::Blocked, _) => waiting(again),
        (stage, _) => Next::run(resume).doing(format!(
            "resumes the work with {stage}, for up to {max_iterations} {}",
            iterations(max_iterations)
        )),
    })
}

/// After build mode; when every spec is complete, the commits it made.
pub(crate) fn after_build(outcome: &SpecsOutcome, again: &Again) -> Next {
    let resume = again.run("");
    match outcome {
        SpecsOutcome::Complete { .. } => {
            Next::run("git log --oneline").doing("shows each spec's commit; every spec is complete")
        }
        SpecsOutcome::Blocked { spec, items } => match items.first() {
            // Running again alone builds nothing of it: a blocked task waits for a person.
            Some(item) => {
                let unblock = Again {
                    run: format!("{} task unblock", again.ralph),
                    ..again.clone()
                };
                let task = format!("{spec}/{}", item.id);
                Next::run(format!(
                    "{} && {resume}",
                    unblock.run(&format!("{} --restore", shell_words(&[&task])))
                ))
                .after(format!(
                    "fix what blocked {task}: {}",
                    item.reason.lines().next().unwrap_or_default()
                ))
                .doing("gives back its work, if it was set aside, and builds it again")
            }
            None => Next::run(resume).after("fix what blocked the spec (see implementation.json)"),
        },
        SpecsOutcome::AwaitingAnswer { questions, .. } => match questions.first() {
            Some(asked) => answer_then(again, &asked.id, &resume),
            None => Next::run(resume).doing("resumes where the work stood"),
        },
        SpecsOutcome::AttemptsExhausted { .. } => Next::run(resume).after(
            "read the task's feedback in implementation.json and adjust the spec or the gates",
        ),
        SpecsOutcome::Once { .. } => Next::run(again.run(" --once")).doing("runs the next session"),
        SpecsOutcome::Unverified { .. } => Next::run(resume)
            .after("read why in the verifier's log (build/ralph-logs)")
            .doing("asks the verifier again"),
        SpecsOutcome::BudgetExhausted { spent_usd, .. } => over_budget(again, *spent_usd),
        _ => Next::run(resume).doing("resumes where the work stood"),
    }
}

/// After a run stopped at the budget: the same command with a higher limit (twice what was
/// spent, at least a dollar more), which goes on where the work stood, the spend so far
/// counted.
pub(crate) fn over_budget(again: &Again, spent_usd: f64) -> Next {
    let raised = (spent_usd * 2.0).max(spent_usd + 1.0).ceil();
    Next::run(again.run(&format!(" --max-cost {raised}")))
        .after("raise the limit (`max_cost_usd` in ralph.toml, or --max-cost)")
        .doing("goes on where the work stood; what was spent counts")
}

/// After a run that ended with `error`, when a person can act on it and run again: the
/// agent could not reach its API, or said that no retry can fix its failure. `None` for
/// other errors, whose message says what is wrong.
pub(crate) fn after_error(error: &ralph::Error, again: &Again) -> Option<Next> {
    let resume = again.run("");
    match error {
        ralph::Error::AgentUnreachable { agent, .. } => Some(
            Next::run(resume)
                .after(format!(
                    "once {agent} can reach its API again (check the network and its endpoint)"
                ))
                .doing("resumes where the work stood; the attempt was not counted"),
        ),
        ralph::Error::AgentFatal { agent, .. } => Some(
            Next::run(resume)
                .after(format!("fix what {agent} said (above)"))
                .doing("resumes where the work stood"),
        ),
        ralph::Error::SpecMismatch { recorded, given } => Some(
            Next::run(again.run(&format!(" {} --switch", shell_word(given)))).doing(format!(
                "archives the board of {recorded} (the same with {recorded} brings it back) and \
                 works on {given}"
            )),
        ),
        ralph::Error::ChangedDuringRun { .. } => Some(
            Next::run(resume)
                .doing("runs again, judged with the files as they are now; no retry was spent"),
        ),
        ralph::Error::Git(ralph::GitError::CommitRefused {
            hook, sandboxed, ..
        }) => Some(refused_commit(hook.as_deref(), *sandboxed, again)),
        ralph::Error::Uncommitted { paths, since, .. } => {
            let git = again.git();
            // git names them from the top of the work tree: `:/` says so to any folder.
            let named: Vec<String> = paths.iter().map(|p| format!(":/{p}")).collect();
            let named: Vec<&str> = named.iter().map(String::as_str).collect();
            let untracked = since.as_ref().map_or("", |_| " --include-untracked");
            Some(
                Next::run(format!(
                    "{git} stash push{untracked} -m 'set aside for ralph' --{} && {resume}",
                    shell_words(&named)
                ))
                .doing(
                    "sets those changes aside (`git stash pop` brings them back) and runs again",
                ),
            )
        }
        _ => None,
    }
}

/// After git refused ralph's commit of a task's work: fix the hook that refused it (named
/// as git finds it, `core.hooksPath` followed) and resume; or, when git could not sign it,
/// turn signing off in this repository and resume. The work is in the tree, uncounted.
fn refused_commit(hook: Option<&Path>, sandboxed: bool, again: &Again) -> Next {
    let resume = again.run("");
    let taken_up = "resumes the task with its work as it is in the work tree; the attempt was \
                    not counted";
    let Some(hook) = hook else {
        // No backticks in the fix: the command is the line's first text in them.
        let why = match sandboxed {
            // gpg cannot reach its keys in the hooks' sandbox, whatever the key.
            true => {
                "commits made in the hooks' sandbox cannot be signed (sign them afterwards, \
                     or set mode = \"off\" under [sandbox] in ralph.toml); or turn \
                     commit.gpgsign off here"
            }
            false => {
                "git could not sign with the key user.signingkey names (give it one gpg \
                      has); or turn commit.gpgsign off here"
            }
        };
        return Next::run(format!(
            "{} config commit.gpgsign false && {resume}",
            again.git()
        ))
        .after(why)
        .doing(taken_up);
    };
    let name = hook
        .file_name()
        .map_or_else(|| "commit".into(), |n| n.to_string_lossy().into_owned());
    let path = hook.display();
    Next::run(resume)
        .after(format!(
            "fix what the {name} hook ({path}) said (above), in the work or in the hook"
        ))
        .doing(taken_up)
}

/// After plan mode: build mode, with the same agent.
pub(crate) fn after_plan(again: &Again) -> Next {
    Next::run(again.run("")).doing("builds the planned specs")
}

/// Unblocking every blocked issue and task, then `then`; `None` when nothing is blocked.
fn unblock_then(board: &Board, again: &Again, then: &str) -> Option<Next> {
    let issues: Vec<String> = board
        .issues()
        .filter(|i| i.status == IssueStatus::Blocked)
        .map(|i| shell_word(i.id.as_str()))
        .collect();
    let tasks: Vec<String> = board
        .tasks()
        .filter(|t| t.status == TaskStatus::Blocked)
        .map(|t| shell_word(t.id.as_str()))
        .collect();
    if issues.is_empty() && tasks.is_empty() {
        return None;
    }
    let mut steps = Vec::new();
    if !issues.is_empty() {
        steps.push(format!(
            "{} issue unblock {}",
            again.ralph,
            issues.join(" ")
        ));
    }
    if !tasks.is_empty() {
        steps.push(format!("{} task unblock {}", again.ralph, tasks.join(" ")));
    }
    steps.push(then.to_owned());
    let fix = match issues.len() + tasks.len() {
        1 => "fix what blocked it (the reason above)",
        _ => "fix what blocked them (the reasons above)",
    };
    Some(Next::run(steps.join(" && ")).after(fix))
}

/// Work that waits on work nothing will do, with nothing blocked to unblock (a task waiting
/// on one that was replaced, say): what it waits on is in the status.
fn waiting(again: &Again) -> Next {
    Next::run(format!("{} status", again.ralph)).doing(
        "shows what the remaining tasks wait on; add that work with `ralph task add`, then run \
         again",
    )
}

fn unverified(resume: String) -> Next {
    Next::run(resume)
        .after("read why the gap analysis gave no valid answer in its log (build/ralph-logs)")
        .doing("asks the gap analysis again")
}

fn declared(resume: String) -> Next {
    Next::run(resume)
        .after("remove RALPH_DONE from the Status section of the progress file")
        .doing("builds the tasks left")
}

fn remaining(board: &Board) -> usize {
    board.remaining_tasks().count() + board.open_issues().count()
}

fn iterations(n: u32) -> &'static str {
    if n == 1 { "iteration" } else { "iterations" }
}

/// `words` as shell words, each after a space (` t-1 'has space'`), for a command's
/// arguments.
pub(crate) fn shell_words(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!(" {}", shell_word(w)))
        .collect()
}

/// `word` as one shell word: as it is when it needs no quoting (every id ralph makes or
/// accepts), else in single quotes (an id written by hand before ralph checked them, a path
/// with a space).
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,:/+=@".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph::model::{Change, Issue, Task};

    fn board(changes: Vec<Change>) -> Board {
        let mut board = Board::new();
        board.run.spec = Some("spec.md".into());
        board.run.seeded = true;
        board.apply_all(changes);
        board
    }

    #[test]
    fn the_script_is_named_as_the_printed_command_reaches_it() {
        let script = |workspace: &str, opened: &str| {
            Again::new(Path::new(workspace), "build")
                .flags(None, Some(Path::new(opened)), None)
                .command("")
        };
        assert_eq!(script(".", "s.toml"), "ralph build --script s.toml");
        assert_eq!(
            script("ws", "ws/s.toml"),
            "ralph -C ws build --script s.toml"
        );
        assert_eq!(
            script("..", "../s.toml"),
            "ralph -C .. build --script s.toml"
        );
        assert_eq!(
            script("ws", "/abs/s.toml"),
            "ralph -C ws build --script /abs/s.toml"
        );
        let outside = script("ws/sub/..", "ws/sub/s.toml");
        let absolute = std::path::absolute("ws/sub/s.toml").unwrap();
        assert!(
            outside.ends_with(&format!("--script {}", absolute.display())),
            "{outside}"
        );
    }

    #[test]
    fn plan_mode_again_names_its_specs_as_shell_words() {
        let specs = [PathBuf::from("specs/a.md"), PathBuf::from("specs/my b.md")];
        let again = Again::plan(Path::new("ws"), &specs).flags(Some("mine"), None, None);
        assert_eq!(
            again.command(""),
            "ralph -C ws plan specs/a.md 'specs/my b.md' --agent mine"
        );
    }

    #[test]
    fn blocked_work_is_unblocked_by_its_ids_then_built() {
        let mut issue = Issue::new("i-1", "the spec");
        issue.status = IssueStatus::Blocked;
        let tasks = ["t-3", "has space"]
            .map(|id| Change::Task(Task::new(id, "x").with_status(TaskStatus::Blocked)));
        let board = board([Change::Issue(issue)].into_iter().chain(tasks).collect());
        let again = Again::new(Path::new("."), "construct");
        let next = for_board(&board, 10, &again).unwrap();
        assert_eq!(
            next.to_string(),
            "fix what blocked them (the reasons above), then `ralph issue unblock i-1 && ralph \
             task unblock t-3 'has space' && ralph construct`"
        );
        let outcome = Outcome::Blocked { items: Vec::new() };
        assert_eq!(after_construct(&outcome, &board, 10, &again), next);
    }

    #[test]
    fn the_iteration_limit_says_how_many_more_the_command_runs() {
        let board = board(vec![Change::Task(Task::new("t-1", "x"))]);
        let again = Again::new(Path::new("."), "construct");
        let stopped = |limit| Outcome::MaxIterations {
            limit,
            remaining: 1,
        };
        assert_eq!(
            after_construct(&stopped(10), &board, 10, &again).to_string(),
            "`ralph construct` runs up to 10 more iterations"
        );
        assert_eq!(
            after_construct(&stopped(1), &board, 10, &again).to_string(),
            "`ralph construct --max-iterations 1` runs up to 1 more iteration"
        );
        assert_eq!(
            for_board(&board, 10, &again).unwrap().to_string(),
            "`ralph construct` resumes the work with BUILD, for up to 10 iterations"
        );
    }

    #[test]
    fn the_command_repeats_the_workspace_and_the_agent() {
        let mut issue = Issue::new("i-1", "the spec");
        issue.status = IssueStatus::Blocked;
        let board = board(vec![Change::Issue(issue)]);
        let again = Again::new(Path::new("my repo"), "construct").flags(
            Some("mine"),
            None,
            Some(Duration::from_secs(90)),
        );
        let outcome = Outcome::Blocked { items: Vec::new() };
        assert_eq!(
            after_construct(&outcome, &board, 10, &again).command,
            "ralph -C 'my repo' issue unblock i-1 && ralph -C 'my repo' construct --agent mine \
             --timeout '1m 30s'"
        );
        let demo = Again::demo(Path::new("/tmp/ws"));
        assert_eq!(
            after_construct(&Outcome::Interrupted, &board, 10, &demo).to_string(),
            "`ralph demo --in /tmp/ws` resumes where the work stood"
        );
    }

    #[test]
    fn shell_words_quote_only_what_needs_it() {
        assert_eq!(shell_word("t-3a"), "t-3a");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
