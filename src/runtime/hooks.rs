//! `[[hooks]]`: a command run on an event, in every mode, under a gate's supervision.
//!
//! The [`Emitter`] offers each event it sends to the run's [`Hooks`]; each hook `on` that
//! event (or `on = ["needs_person"]` and a [`Finished`](Event::Finished) that needs one, or
//! an agent's [`QuestionAsked`](Event::QuestionAsked)) is
//! queued with the event's JSON, as `--json` prints it, for its stdin.

//!
//! **Beside the run, in order, awaited.** The emitter is synchronous and called from deep
//! inside every pipeline, and a hook may take its whole timeout (a webhook that hangs): run
//! inline, every event would hold the loop up for as long. So one worker task runs the
//! queued hooks one at a time, in the order of the events (a `task_blocked` notification
//! never arrives after the `finished` one), while the run goes on. A run ends through
//! [`Emitter::finish`]: it waits for the hooks queued so far, emits the `Finished` event,
//! then waits for the hooks on it. Nothing a hook started outlives the run: each command is
//! a [`ProcessSpec`] with a timeout, killed with its process group and swept, and tagged
//! as the workspace's, so that a later run sweeps what a killed ralph left.
//!
//! **Failures.** A hook that cannot start, exits non-zero or times out is a
//! [`Warning`](Event::Warning) naming it, sent by an emitter without hooks (a hook on
//! `warning` never runs on a hook's own failure, which could loop). A `required` hook's
//! failure is also kept, and [`Emitter::finish`] returns it: the run's call fails with an
//! error naming the hook. The run is not cut short in the middle (the hook ran beside it);
//! a required hook that failed before the end makes the `Finished` event say so.
//!
//! [`Emitter`]: super::logs::Emitter
//! [`Emitter::finish`]: super::logs::Emitter::finish

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, HOOK_EVENT_VAR, HookConfig, NEEDS_PERSON};
use crate::event::Event;
use crate::process::{ProcessReport, ProcessSpec};

/// Where a hook's failure is told: the run's emitter, without hooks.
pub(crate) type Warn = Arc<dyn Fn(Event) + Send + Sync>;

/// Output a hook's failure message may quote from: its head and tail.
const OUTPUT_KEPT: usize = 2048;

/// A required hook failed: the run's call fails with this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HookFailed {
    /// The hook, as messages name it (`notify`, `hooks[1]`).
    pub(crate) hook: String,
    /// The event it ran on.
    pub(crate) event: String,
    /// How it failed.
    pub(crate) reason: String,
}

impl std::fmt::Display for HookFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "required hook {} failed on {}: {}",
            self.hook, self.event, self.reason
        )
    }
}

/// The hooks of a workspace, and the queue that runs them. Cheap to clone: every emitter of
/// a context shares one queue.
#[derive(Clone)]
pub(crate) struct Hooks(Arc<Shared>);

struct Shared {
    hooks: Vec<Arc<Hook>>,
    workspace: PathBuf,
    grace: Duration,
    /// The worker's queue, started at the first hook to run (an emitter can be made outside
    /// an async runtime; a hook only runs inside one).
    queue: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    /// Required hooks that failed since [`Hooks::flush`] last reported.
    failed: Arc<Mutex<Vec<HookFailed>>>,
}

/// One `[[hooks]]` entry, ready to run.
#[derive(Debug)]
struct Hook {
    /// How messages name it: its `name`, or `hooks[<index>]`.
    label: String,
    on: Vec<String>,
    command: Vec<String>,
    timeout: Duration,
    required: bool,
}

impl Hook {
    fn from_config(index: usize, config: &HookConfig) -> Hook {
        Hook {
            label: config
                .name
                .clone()
                .unwrap_or_else(|| format!("hooks[{index}]")),
            on: config.on.clone(),
            command: config.command.clone(),
            timeout: config.timeout,
            required: config.required,
        }
    }

    /// Whether `event`, whose tag is `tag`, runs it.
    fn runs_on(&self, tag: &str, event: &Event) -> bool {
        // A finished run that only a person can move on from, or an agent's question.
        let needs_person = matches!(
            event,
            Event::Finished {
                needs_person: true,
                ..
            } | Event::QuestionAsked { .. }
        );
        self.on
            .iter()
            .any(|on| on == tag || (needs_person && on == NEEDS_PERSON))
    }

    /// The hook and its command, for a message: `notify (notify-send ralph)`, a long
    /// command cut at 60 characters.
    fn describe(&self) -> String {
        let command = self.command.join(" ");
        let command = match command.char_indices().nth(60) {
            Some((cut, _)) => format!("{}…", &command[..cut]),
            None => command,
        };
        format!("{} ({command})", self.label)
    }
}

/// What the worker does next.
enum Job {
    /// Runs `hook` on the event `tag` with `stdin`, telling a failure to `warn`.
    Run {
        hook: Arc<Hook>,
        tag: String,
        stdin: Vec<u8>,
        workspace: PathBuf,
        grace: Duration,
        warn: Warn,
        failed: Arc<Mutex<Vec<HookFailed>>>,
    },
    /// Says when every job queued before it is done.
    Flush(oneshot::Sender<()>),
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.hooks.iter().map(|h| &h.label))
            .finish()
    }
}

impl Hooks {
    /// The hooks `config` sets for runs in `workspace`; `None` when it sets none.
    pub(crate) fn new(config: &Config, workspace: &Path) -> Option<Hooks> {
        if config.hooks.is_empty() {
            return None;
        }
        Some(Hooks(Arc::new(Shared {
            hooks: config
                .hooks
                .iter()
                .enumerate()
                .map(|(i, h)| Arc::new(Hook::from_config(i, h)))
                .collect(),
            workspace: workspace.to_path_buf(),
            grace: config.grace,
            queue: Mutex::new(None),
            failed: Arc::new(Mutex::new(Vec::new())),
        })))
    }

    /// Queues every hook `event` runs; a failure is told to the `Warn` that `warn` makes
    /// (called only when a hook runs).
    pub(crate) fn offer(&self, event: &Event, warn: impl FnOnce() -> Warn) {
        let tag = event.tag();
        let hooks: Vec<&Arc<Hook>> = self
            .0
            .hooks
            .iter()
            .filter(|h| h.runs_on(&tag, event))
            .collect();
        if hooks.is_empty() {
            return;
        }
        let stdin = stdin(event);
        let warn = warn();
        for hook in hooks {
            self.send(Job::Run {
                hook: hook.clone(),
                tag: tag.clone(),
                stdin: stdin.clone(),
                workspace: self.0.workspace.clone(),
                grace: self.0.grace,
                warn: warn.clone(),
                failed: self.0.failed.clone(),
            });
        }
    }

    /// Waits until every hook queued so far has run; the first required one that failed
    /// since the last call, if any.
    pub(crate) async fn flush(&self) -> Result<(), HookFailed> {
        let (done, wait) = oneshot::channel();
        if self.send(Job::Flush(done)) {
            // A worker that is gone (its runtime shut down) ran nothing more.
            let _ = wait.await;
        }
        let mut failed = self.0.failed.lock().unwrap_or_else(|e| e.into_inner());
        match failed.drain(..).next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Hands `job` to the worker, starting one when there is none (or it is gone with the
    /// runtime that ran it). False when there is no async runtime to run it on.
    fn send(&self, job: Job) -> bool {
        let mut queue = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        let job = match queue.as_ref() {
            Some(q) => match q.send(job) {
                Ok(()) => return true,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(target: "ralph", "hooks not run: no async runtime");
            return false;
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        runtime.spawn(work(receiver));
        let sent = sender.send(job).is_ok();
        *queue = Some(sender);
        sent
    }
}

/// The worker: runs the jobs in order until every sender is gone.
async fn work(mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = queue.recv().await {
        match job {
            Job::Flush(done) => {
                let _ = done.send(());
            }
            Job::Run {
                hook,
                tag,
                stdin,
                workspace,
                grace,
                warn,
                failed,
            } => {
                let Some(reason) = run(&hook, &tag, stdin, &workspace, grace).await else {
                    continue;
                };
                let hook_name = hook.describe();
                let message = if hook.required {
                    format!("required hook {hook_name} failed on {tag}: {reason}; the run fails")
                } else {
                    format!("hook {hook_name} failed on {tag}: {reason}")
                };
                warn(Event::Warning { message });
                if hook.required {
                    failed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(HookFailed {
                            hook: hook.label.clone(),
                            event: tag,
                            reason,
                        });
                }
            }
        }
    }
}

/// Runs `hook` on the event `tag`; why it failed, if it did.
async fn run(
    hook: &Hook,
    tag: &str,
    stdin: Vec<u8>,
    workspace: &Path,
    grace: Duration,
) -> Option<String> {
    let (program, args) = hook.command.split_first()?;
    let spec = ProcessSpec::new(program)
        .args(args)
        .cwd(workspace)
        .owner(crate::process::owner_of(workspace))
        .env(HOOK_EVENT_VAR, tag)
        .stdin(stdin)
        .timeout(hook.timeout)
        .grace(grace)
        .output_limits(OUTPUT_KEPT, OUTPUT_KEPT);
    let span = tracing::info_span!(target: "ralph", "hook", hook = %hook.label, event = tag);
    let report = tracing::Instrument::instrument(spec.run(), span).await;
    match report {
        Err(e) => Some(format!("could not run: {e}")),
        Ok(report) => failure(&report, hook.timeout),
    }
}

/// Why a hook's run failed, with its output's last line; `None` when it passed.
fn failure(report: &ProcessReport, timeout: Duration) -> Option<String> {
    let how = if report.timed_out {
        format!(
            "timed out after {} and was killed",
            humantime::format_duration(timeout)
        )
    } else if report.success() {
        return None;
    } else if let Some(code) = report.code() {
        format!("exited with code {code}")
    } else if let Some(signal) = report.signal() {
        format!("was killed by signal {signal}")
    } else {
        "did not finish".to_owned()
    };
    let output = report.output.to_string();
    Some(match output.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(line) => format!("{how}: {}", crate::output::first_line(line.trim())),
        None => how,
    })
}

/// The event as the hook reads it: the line `--json` prints, with its `ts`.
fn stdin(event: &Event) -> Vec<u8> {
    let mut value = serde_json::to_value(event).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("ts".into(), jiff::Timestamp::now().to_string().into());
    }
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of `Event`'s variants, read from its source, in snake case: what their
    /// `event` tags are (`#[serde(tag = "event", rename_all = "snake_case")]`).
    fn event_tags() -> Vec<String> {
        let source = include_str!("../../crates/core/src/event.rs");
        let start = source
            .find("pub enum Event {")
            .expect("the Event enum is in event.rs");
        let body = &source[start..];
        let body = &body[..body.find("\n}\n").expect("the enum ends")];
        body.lines()
            .filter_map(|line| {
                let name = line.strip_prefix("    ")?;
                let name = name.split([' ', ',', '{']).next()?;
                name.starts_with(|c: char| c.is_ascii_uppercase())
                    .then(|| snake(name))
            })
            .collect()
    }

    fn snake(name: &str) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() {
                if i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn every_event_is_a_name_a_hook_may_be_on() {
        let tags = event_tags();
        assert!(tags.len() > 20, "{tags:?}");
        for tag in &tags {
            assert!(
                crate::config::HOOK_EVENTS.contains(&tag.as_str()),
                "{tag} is missing from HOOK_EVENTS"
            );
        }
        let warning = Event::Warning {
            message: "x".into(),
        };
        assert_eq!(warning.tag(), "warning");
        assert!(tags.contains(&warning.tag()));
    }

    #[test]
    fn a_hook_on_needs_person_runs_on_a_finished_event_that_needs_one() {
        let hook = Hook::from_config(
            0,
            &HookConfig {
                on: vec![NEEDS_PERSON.into()],
                command: vec!["true".into()],
                name: None,
                timeout: Duration::from_secs(1),
                required: false,
            },
        );
        assert_eq!(hook.label, "hooks[0]");
        let blocked = Event::construct_finished(crate::Outcome::Blocked { items: vec![] });
        assert!(hook.runs_on(&blocked.tag(), &blocked));
        let complete = Event::finished("plan", "saved".into(), 0, false);
        assert!(!hook.runs_on(&complete.tag(), &complete));
        let failed = Event::failed("plan", "plan mode", &crate::Error::NoSpec);
        assert!(hook.runs_on(&failed.tag(), &failed));
        let asked = Event::QuestionAsked {
            id: "q-1".into(),
            subject: "t-3".into(),
            role: crate::agent::Role::Build,
            question: "Postgres or SQLite?".into(),
        };
        assert!(hook.runs_on(&asked.tag(), &asked), "an agent's question");
    }

    #[test]
    fn the_stdin_of_a_hook_is_the_json_line_of_its_event() {
        // An error and its causes, each once (the error's own message names none).
        let spawn = crate::agent::AgentError::Spawn {
            program: "claude".into(),
            source: std::io::Error::other("no such file"),
        };
        let event = Event::failed("build", "build mode", &crate::Error::Agent(spawn));
        let line = String::from_utf8(stdin(&event)).unwrap();
        assert!(line.ends_with('\n'));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["event"], "finished");
        assert_eq!(value["mode"], "build");
        let said = "agent could not run: could not start claude: no such file";
        assert_eq!(value["error"], said);
        assert_eq!(value["message"], format!("build mode stopped: {said}"));
        assert_eq!(value["exit_code"], 1);
        assert!(value["ts"].is_string());
        assert!(value.get("outcome").is_none());
    }
}
