//! One fake run in progress: its steps carried out, in the workspace, under the request's
//! stop token and timeout, with a transcript in the run's log.

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::script::Step;
use crate::agent::{AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, Usage};
use crate::context::{ContextAction, ContextMonitor};

/// The state of one fake run in progress.
pub(super) struct FakeRun {
    started: Instant,
    deadline: Option<tokio::time::Instant>,
    log: Option<std::fs::File>,
    log_path: Option<PathBuf>,
    final_text: Option<String>,
    structured: Option<serde_json::Value>,
    usage: Usage,
    /// Dollars the script spent, if it said.
    cost_usd: Option<f64>,
}

/// Why a wait ended early.
enum Interrupted {
    Stopped,
    TimedOut,
}

impl FakeRun {
    pub(super) fn new(request: &AgentRequest) -> Result<Self, AgentError> {
        let log = match &request.log_path {
            Some(path) => Some(open_log(path)?),
            None => None,
        };
        Ok(FakeRun {
            started: Instant::now(),
            deadline: request.timeout.map(|t| tokio::time::Instant::now() + t),
            log,
            log_path: request.log_path.clone(),
            final_text: None,
            structured: None,
            usage: Usage::default(),
            cost_usd: None,
        })
    }

    fn log(&mut self, line: &str) {
        if let Some(file) = &mut self.log {
            // The transcript is a diagnostic copy; a full disk must not fail the run itself.
            // One write per line (`writeln!` would make two).
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }

    pub(super) async fn execute(
        &mut self,
        request: &AgentRequest,
        steps: &[Step],
    ) -> Result<AgentExit, AgentError> {
        self.log(&format!(
            "[fake] {} {} attempt {}",
            request.role,
            request.subject.as_deref().unwrap_or("-"),
            request.attempt
        ));
        for step in steps {
            if let Some(exit) = self.step(request, step).await? {
                return Ok(exit);
            }
        }
        Ok(AgentExit::Completed)
    }

    /// Runs one step; `Some(exit)` ends the run.
    async fn step(
        &mut self,
        request: &AgentRequest,
        step: &Step,
    ) -> Result<Option<AgentExit>, AgentError> {
        match step {
            Step::Answer(text) => {
                self.log(text);
                self.final_text = Some(text.clone());
            }
            Step::Ask(question) => {
                let escaped = question.replace('&', "&amp;").replace('"', "&quot;");
                let text = format!(
                    "I need a person's decision to go on.\n<TASK_QUESTION question=\"{escaped}\">"
                );
                self.log(&text);
                self.final_text = Some(text);
            }
            Step::Json(value) => {
                self.log(&value.to_string());
                self.structured = Some(value.clone());
            }
            Step::Write { path, content } => {
                self.write_step(&request.workspace, path, content, false)?
            }
            Step::Append { path, content } => {
                self.write_step(&request.workspace, path, content, true)?
            }
            Step::Remove(path) => self.remove_step(&request.workspace, path)?,
            Step::Prompt(path) => {
                self.write_step(&request.workspace, path, &request.prompt, false)?
            }
            Step::Print { line, times } => {
                for _ in 0..*times {
                    self.log(line);
                }
            }
            Step::Hang {} => return Ok(Some(self.hang(request).await)),
            Step::Delay(duration) => {
                if let Some(why) = self.wait(request, Some(*duration)).await {
                    return Ok(Some(self.interrupted_exit(Some(why))));
                }
            }
            Step::Usage {
                context,
                window,
                after_compaction,
            } => return Ok(self.usage_step(request, *context, *window, *after_compaction)),
            Step::Spend {
                input_tokens,
                output_tokens,
                cost_usd,
            } => self.spend_step(request, *input_tokens, *output_tokens, *cost_usd),
            Step::Fail { reason, kind } => {
                self.log(&format!("[fake] fail: {reason}"));
                return Ok(Some(AgentExit::Failed {
                    reason: reason.clone(),
                    kind: *kind,
                }));
            }
            Step::RateLimit { secs } => {
                self.log(&format!("[fake] rate limited for {secs}s"));
                return Ok(Some(AgentExit::RateLimited {
                    until: SystemTime::now() + Duration::from_secs(*secs),
                }));
            }
        }
        Ok(None)
    }

    /// Writes `content` to `path` in `workspace`, or appends it (`append`), and says so in
    /// the transcript.
    fn write_step(
        &mut self,
        workspace: &Path,
        path: &Path,
        content: &str,
        append: bool,
    ) -> Result<(), AgentError> {
        let full = workspace_path(workspace, path)?;
        self.log(&format!(
            "[fake] {} {} ({} bytes)",
            if append { "append" } else { "write" },
            path.display(),
            content.len()
        ));
        write_file(&full, content, append)
    }

    /// Removes the file at `path` in `workspace`, and says so in the transcript.
    fn remove_step(&mut self, workspace: &Path, path: &Path) -> Result<(), AgentError> {
        let full = workspace_path(workspace, path)?;
        self.log(&format!("[fake] remove {}", path.display()));
        std::fs::remove_file(&full).map_err(|source| AgentError::Io { path: full, source })
    }

    /// Adds the tokens and dollars of a `spend` step to the run's usage, and reports the
    /// run's spend so far.
    fn spend_step(
        &mut self,
        request: &AgentRequest,
        input_tokens: u64,
        output_tokens: u64,
        cost_usd: Option<f64>,
    ) {
        self.usage.input_tokens += input_tokens;
        self.usage.output_tokens += output_tokens;
        if let Some(cost) = cost_usd {
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
        self.log(&format!(
            "[fake] spent {input_tokens} in, {output_tokens} out{}",
            cost_usd.map(|c| format!(", ${c:.2}")).unwrap_or_default()
        ));
        // As a CLI reports usage while it runs: the run's spend so far.
        request.events.emit(AgentEvent::Spend {
            usage: self.usage,
            cost_usd: self.cost_usd,
        });
    }

    /// Waits for `duration` (forever if `None`); returns why it ended early, if it did.
    async fn wait(
        &self,
        request: &AgentRequest,
        duration: Option<Duration>,
    ) -> Option<Interrupted> {
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => None,
            () = request.stop.stopped() => Some(Interrupted::Stopped),
            () = deadline => Some(Interrupted::TimedOut),
        }
    }

    /// A `hang` step: waits until the run is stopped or times out, and exits as it was.
    async fn hang(&mut self, request: &AgentRequest) -> AgentExit {
        self.log("[fake] hanging until stopped");
        let why = self.wait(request, None).await;
        self.interrupted_exit(why)
    }

    fn interrupted_exit(&mut self, why: Option<Interrupted>) -> AgentExit {
        match why {
            Some(Interrupted::TimedOut) => {
                self.log("[fake] timed out");
                AgentExit::TimedOut
            }
            // A hang that ends without stop or deadline cannot happen; treat it as stopped.
            Some(Interrupted::Stopped) | None => {
                self.log("[fake] stopped");
                AgentExit::Stopped
            }
        }
    }

    fn usage_step(
        &mut self,
        request: &AgentRequest,
        context: u64,
        window: u64,
        after_compaction: Option<u64>,
    ) -> Option<AgentExit> {
        self.usage.context_tokens = context;
        self.usage.context_window = Some(window);
        self.usage.input_tokens += context;
        request.events.emit(AgentEvent::Usage {
            context_tokens: context,
            window: Some(window),
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
        });
        let mut monitor = ContextMonitor::new(request.context, window);
        match monitor.observe(context) {
            ContextAction::Warn(ratio) => {
                self.log(&format!("[fake] context pressure {:.0}%", ratio * 100.0));
                emit_pressure(request, ratio, "warn");
                None
            }
            ContextAction::Compact(ratio) => {
                emit_pressure(request, ratio, "compact");
                // A failed compaction leaves the context where it was.
                let after = after_compaction.unwrap_or(context);
                let verdict = monitor.after_compaction(after);
                request.events.emit(AgentEvent::Compacted {
                    before: ratio,
                    after: monitor.ratio(),
                });
                self.usage.context_tokens = after;
                self.log(&format!(
                    "[fake] compacted {:.0}% -> {:.0}%",
                    ratio * 100.0,
                    monitor.ratio() * 100.0
                ));
                match verdict {
                    ContextAction::Kill(r) => Some(self.context_kill(request, r)),
                    _ => None,
                }
            }
            ContextAction::Kill(ratio) => Some(self.context_kill(request, ratio)),
            _ => None,
        }
    }

    fn context_kill(&mut self, request: &AgentRequest, ratio: f64) -> AgentExit {
        self.log(&format!(
            "[fake] context limit {:.0}%: stopping",
            ratio * 100.0
        ));
        emit_pressure(request, ratio, "kill");
        AgentExit::ContextLimit
    }

    pub(super) fn finish(self, exit: AgentExit) -> AgentRun {
        let final_text = match (&self.final_text, &self.structured) {
            (Some(text), _) => text.clone(),
            (None, Some(value)) => value.to_string(),
            (None, None) => String::new(),
        };
        let mut run = AgentRun::new(exit);
        run.final_text = final_text;
        run.structured = self.structured;
        run.usage = self.usage;
        run.cost_usd = self.cost_usd;
        run.log_path = self.log_path;
        run.duration = self.started.elapsed();
        run.turns = Some(1);
        run
    }
}

fn emit_pressure(request: &AgentRequest, ratio: f64, tier: &str) {
    request.events.emit(AgentEvent::ContextPressure {
        ratio,
        tier: tier.to_owned(),
    });
}

#[allow(clippy::disallowed_methods)] // a run's log, not a state file
fn open_log(path: &Path) -> Result<std::fs::File, AgentError> {
    if let Some(dir) = path.parent() {
        crate::files::own::create_own_dir(dir).map_err(|source| AgentError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| AgentError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// Joins `rel` to the workspace, refusing absolute paths and `..`.
fn workspace_path(workspace: &Path, rel: &Path) -> Result<PathBuf, AgentError> {
    let escapes = rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes || rel.as_os_str().is_empty() {
        return Err(AgentError::OutsideWorkspace {
            path: rel.to_path_buf(),
        });
    }
    Ok(workspace.join(rel))
}

#[allow(clippy::disallowed_methods)] // the fake agent's hands: a file of the workspace
fn write_file(path: &Path, content: &str, append: bool) -> Result<(), AgentError> {
    let io = |source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        crate::files::own::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .map_err(io)?;
    file.write_all(content.as_bytes()).map_err(io)
}
