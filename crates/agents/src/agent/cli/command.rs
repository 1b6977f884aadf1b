//! `CommandAgent`: any agent CLI from an argv template.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::kept::KeptStdout;
use super::live::{LiveLines, LiveMap};
use super::usage::{USAGE_FILE_VAR, UsageFile};
use crate::agent::cli_files::Cli;
use crate::agent::reach::Reach;
use crate::agent::{Agent, AgentError, AgentExit, AgentRequest, AgentRun, FailureKind};
use crate::config::{CommandConfig, Config};
use crate::output::BoundedOutput;
use crate::process::{Clocks, Listener, OwnClock, ProcessSpec, Streams};

/// How much of stdout is kept in memory for the final answer: its last bytes.
pub const ANSWER_KEPT: usize = 1024 * 1024;

/// How much of stderr is kept for a failure's reason.
const STDERR_KEPT: usize = 2048;

/// [`CommandAgent`]: any agent CLI that takes a prompt and prints its answer (Aider, Amp,
/// Cursor's agent, a script of your own), run under the same supervision as the Claude
/// agent: its own process group and cookie, the wall-clock and idle timeouts, SIGTERM then
/// SIGKILL after the grace, and a sweep of whatever it left running.
///
/// The command is an argv template. Its placeholders are replaced in every argument:
///
/// | placeholder | becomes |
/// |---|---|
/// | `{prompt_file}` | a file holding the prompt (written next to the run's log, removed after the run when there is no log) |
/// | `{workspace}` | the directory the agent works in (also its working directory) |
/// | `{role}` | the role of the run (`build`, `verify`, …) |
/// | `{subject}` | the task or issue the run is about (`t-3`, `i-1`), or nothing |
///
/// Without `{prompt_file}` the prompt goes to the command's stdin, which survives prompts of
/// any size. The final answer is the command's stdout (its last MiB), or,
/// with [`answer_pointer`](CommandAgent::answer_pointer), the value at that JSON pointer in
/// the last line of stdout that is a JSON object (a line longer than a MiB is cut
/// to the head and tail of its strings, so a huge answer is still read to its end, where the
/// marker is). The run is judged on how the command exited: an error it printed before its
/// answer line does not count. stdout and stderr go to the run's log in full; memory holds
/// only the bounded tail.
///
/// A command reports its usage by writing one JSON object to the file the variable
/// `RALPH_USAGE_FILE` names (a fresh one per run, writable in the sandbox, removed after
/// the run): `{"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.05}`, with
/// `cache_read_tokens` and `cache_creation_tokens` too, every field optional. Read when the
/// run has ended, it becomes the run's [`usage`](AgentRun::usage) and
/// [`cost_usd`](AgentRun::cost_usd), which the spend ledger and the run-wide limits count. A
/// file that cannot be used is an [`AgentEvent::Warning`](crate::agent::AgentEvent::Warning)
/// naming it, and the run stands. A command that writes nothing reports nothing, which
/// [`Agent::unmetered`] says.
///
/// Read-only roles (verify, investigate, plan…) get [`read_only_args`](CommandAgent::read_only_args)
/// appended: the CLI's own sandbox or approval flags. A command without such flags is trusted
/// to honour [`AgentRequest::role`].
///
/// In `ralph.toml`:
///
/// ```toml
/// [agent.aider]
/// command = ["aider", "--yes-always", "--no-git", "--message-file", "{prompt_file}"]
/// read_only_args = ["--dry-run"]
///
/// [agent.my-script]
/// command = ["./agent.sh", "{role}"]        # the prompt on stdin
/// answer_pointer = "/result"                 # from the last JSON line of stdout
/// idle_timeout = "2m"
/// ```
///
/// ```no_run
/// use ralph::agent::{Agent, AgentRequest, CommandAgent, Role};
///
/// # async fn demo() -> Result<(), ralph::AgentError> {
/// let aider = CommandAgent::new("aider", ["aider", "--yes-always", "--message-file", "{prompt_file}"])
///     .read_only_args(["--dry-run"]);
/// let run = aider.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// println!("{}", run.final_text);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CommandAgent {
    name: String,
    config: CommandConfig,
    grace: Duration,
    /// How much of stdout is kept: its last bytes.
    kept: usize,
    /// stdout is JSON lines, kept as lines (see [`keep_lines`](Self::keep_lines)).
    lines: bool,
    /// stdout goes to a file, not a pipe (see [`stdout_to_file`](Self::stdout_to_file)).
    stdout_file: bool,
    /// What stdout's JSON lines mean as live events, for a CLI agent (see [`live`](Self::live)).
    live: Option<LiveMap>,
    /// The agent CLI this runs, whose own files and variables its sandbox gives it (see
    /// [`cli_files`](Self::cli_files)); `None` for a command of the user's.
    cli: Option<Cli>,
}

impl CommandAgent {
    /// An agent named `name` running `command` (the program, then its arguments).
    pub fn new<I, S>(name: impl Into<String>, command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = CommandConfig::default();
        config.command = command.into_iter().map(Into::into).collect();
        CommandAgent {
            name: name.into(),
            config,
            grace: Config::default().grace,
            kept: ANSWER_KEPT,
            lines: false,
            stdout_file: false,
            live: None,
            cli: None,
        }
    }

    /// The agent `[agent.<name>]` of `config` describes.
    ///
    /// # Errors
    ///
    /// [`AgentError::UnknownAgent`] when there is no such table, [`AgentError::NoCommand`]
    /// when its `command` is empty.
    pub fn from_config(name: &str, config: &Config) -> Result<Self, AgentError> {
        let table = config
            .agent
            .get(name)
            .ok_or_else(|| AgentError::UnknownAgent {
                name: name.to_owned(),
            })?;
        if table.command.is_empty() {
            return Err(AgentError::NoCommand {
                agent: name.to_owned(),
            });
        }
        Ok(CommandAgent {
            name: name.to_owned(),
            config: table.clone(),
            grace: config.grace,
            kept: ANSWER_KEPT,
            lines: false,
            stdout_file: false,
            live: None,
            cli: None,
        })
    }

    /// Arguments appended for read-only roles.
    #[must_use]
    pub fn read_only_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.read_only_args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The final answer is the value at this JSON pointer (`/result`) in the last line of
    /// stdout that is a JSON object.
    #[must_use]
    pub fn answer_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.config.answer_pointer = Some(pointer.into());
        self
    }

    /// Longest silence on the command's output before the run is cut as timed out.
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.config.idle_timeout = Some(idle);
        self
    }

    /// Sets an environment variable for the command.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.env.insert(key.into(), value.into());
        self
    }

    /// Sends the live events stdout's JSON lines mean, as each line arrives.
    pub(super) fn live(mut self, map: LiveMap) -> Self {
        self.live = Some(map);
        self
    }

    /// Runs `cli`: its sandbox lets it write its own state and read its key, and passes its
    /// variables.
    pub(super) fn cli_files(mut self, cli: Cli) -> Self {
        self.cli = Some(cli);
        self
    }

    /// The sandbox of a run of `argv` for `request`, which also reads `reads` (its prompt
    /// or schema file): the request's, with what this CLI needs, or a command agent's
    /// network setting; its program readable where it lies.
    pub(super) fn sandbox(
        &self,
        request: &AgentRequest,
        argv: &[String],
        reads: &[&Path],
        usage: Option<&UsageFile>,
    ) -> crate::process::Sandbox {
        let sandbox = request.sandbox.clone();
        if !sandbox.confines() {
            return sandbox;
        }
        let sandbox = match self.cli {
            Some(cli) => cli.sandbox(sandbox, |k| self.config.env.get(k).cloned()),
            None => sandbox.network(self.config.network),
        };
        // Even a read-only role may report what it spent.
        let sandbox = match usage {
            Some(usage) => sandbox.write(usage.dir()),
            None => sandbox,
        };
        let program = argv
            .first()
            .filter(|p| p.contains('/'))
            .map(|p| request.workspace.join(p));
        program
            .iter()
            .map(PathBuf::as_path)
            .chain(reads.iter().copied())
            .fold(sandbox, |sandbox, path| sandbox.read(path))
    }

    /// Keeps the last `bytes` of stdout's JSON lines instead of the last MiB of its
    /// text, a line larger than that shrunk (see [`KeptStdout`]): for an agent whose answer
    /// is one long event line.
    pub(super) fn keep_lines(mut self, bytes: usize) -> Self {
        self.kept = bytes;
        self.lines = true;
        self
    }

    /// What is kept of stdout: lines when they are JSON (an agent's events, or an answer
    /// pointer's line), else text.
    fn kept_stdout(&self) -> KeptStdout {
        KeptStdout::new(
            self.kept,
            self.lines || self.config.answer_pointer.is_some(),
        )
    }

    /// stdout goes to a file beside the log (`<log>.stdout`, else a temporary one), read
    /// after the run: for a program that exits before a pipe has taken everything it wrote
    /// (Node's `process.exit` drops output still queued for a pipe, never for a file). The
    /// idle clock then follows the file's growth.
    pub(super) fn stdout_to_file(mut self) -> Self {
        self.stdout_file = true;
        self
    }

    /// SIGTERM → SIGKILL when ralph stops the command. Default: `grace` of the config.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The argv for `request`, and whether the prompt goes on stdin.
    fn argv(&self, request: &AgentRequest, prompt_file: &Path) -> (Vec<String>, bool) {
        let workspace = request.workspace.display().to_string();
        let prompt_path = prompt_file.display().to_string();
        let mut on_stdin = true;
        let mut argv: Vec<String> = self
            .config
            .command
            .iter()
            .chain(
                (!request.role.may_write())
                    .then_some(&self.config.read_only_args)
                    .into_iter()
                    .flatten(),
            )
            .map(|arg| {
                if arg.contains("{prompt_file}") {
                    on_stdin = false;
                }
                arg.replace("{prompt_file}", &prompt_path)
                    .replace("{workspace}", &workspace)
                    .replace("{role}", request.role.as_str())
                    .replace("{subject}", request.subject.as_deref().unwrap_or(""))
            })
            .collect();
        argv.shrink_to_fit();
        (argv, on_stdin)
    }

    /// Where the prompt file goes: beside the log, else in the temp folder.
    fn prompt_file(request: &AgentRequest) -> (PathBuf, bool) {
        match &request.log_path {
            Some(log) => (log.with_extension("prompt.md"), false),
            None => {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let unique = format!("ralph-prompt-{}-{n}.md", std::process::id());
                (std::env::temp_dir().join(unique), true)
            }
        }
    }
}

#[async_trait::async_trait]
impl Agent for CommandAgent {
    /// The CLI runs in its own process, in the request's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.stop.is_stopped() {
            return Ok(AgentRun::new(AgentExit::Stopped));
        }
        let (prompt_file, temporary) = Self::prompt_file(&request);
        let (argv, on_stdin) = self.argv(&request, &prompt_file);
        if !on_stdin {
            write_file(&prompt_file, request.prompt.as_bytes()).await?;
        }
        let reads: Vec<&Path> = if on_stdin {
            Vec::new()
        } else {
            vec![prompt_file.as_path()]
        };
        let usage = UsageFile::create()?;
        let ran = self
            .supervise(&request, &argv, on_stdin, &reads, Some(&usage))
            .await;
        if temporary && !on_stdin {
            let _ = tokio::fs::remove_file(&prompt_file).await;
        }
        let raw = ran?;
        let mut run = raw.finish(self.judge(&raw), &request);
        // Read whatever way the run ended: a run cut short spent what it reported.
        if let Err(message) = usage.apply(&mut run) {
            request
                .events
                .emit(crate::agent::AgentEvent::Warning { message });
        }
        Ok(run)
    }

    async fn check(&self) -> Result<(), AgentError> {
        let program = self
            .config
            .command
            .first()
            .ok_or_else(|| AgentError::NoCommand {
                agent: self.name.clone(),
            })?;
        let found = if program.contains('/') {
            // A relative path is resolved in the workspace, unknown here.
            !Path::new(program).is_absolute() || Path::new(program).is_file()
        } else {
            which(program).is_some()
        };
        if found {
            Ok(())
        } else {
            Err(AgentError::NotFound {
                agent: self.name.clone(),
                program: program.clone(),
                from: format!("agent.{}.command", self.name),
                help: "install it, put it on PATH, or give its path in the agent's `command`",
            })
        }
    }

    fn configure(&mut self, config: &Config) {
        self.grace = config.grace;
    }

    /// A command reports its usage only by writing the file `RALPH_USAGE_FILE` names.
    fn unmetered(&self) -> Vec<String> {
        vec![self.name.clone()]
    }
}

/// What one supervised run of a command did.
#[derive(Debug)]
pub(super) struct Raw {
    /// How the run ended when ralph ended it (stopped, timed out, unreachable); `None` when
    /// the process exited, to be judged by its exit and output.
    pub(super) cut: Option<AgentExit>,
    pub(super) exit: Option<crate::process::Exit>,
    /// What was kept of stdout: its last bytes (a MiB unless the agent keeps
    /// more), or its last lines, a longer one shrunk (see [`KeptStdout`]).
    pub(super) stdout: String,
    /// Lines of stdout shrunk because they were longer than all that is kept.
    pub(super) oversized_lines: u64,
    /// The head and tail of stderr.
    pub(super) stderr: String,
    pub(super) leaked: usize,
    pub(super) duration: Duration,
}

impl Raw {
    /// A process that exited with `code` after printing `stdout`: how the tests replay a
    /// recorded transcript (`fixtures/<cli>/`) through an agent's parser.
    #[cfg(test)]
    pub(super) fn exited(code: i32, stdout: &str) -> Raw {
        Raw {
            cut: None,
            exit: Some(crate::process::Exit::Code(code)),
            stdout: stdout.to_owned(),
            oversized_lines: 0,
            stderr: String::new(),
            leaked: 0,
            duration: Duration::ZERO,
        }
    }

    /// `run` with the facts every process agent reports: duration, log, leftovers, exit.
    pub(super) fn finish(&self, mut run: AgentRun, request: &AgentRequest) -> AgentRun {
        run.duration = self.duration;
        run.log_path = request.log_path.clone();
        run.leaked = self.leaked;
        run.oversized_lines = self.oversized_lines;
        run.exit_code = self.exit.and_then(crate::process::Exit::code);
        run.exit_signal = self.exit.and_then(crate::process::Exit::signal);
        run
    }

    /// How the process exited, in words: `exited with code 3`.
    pub(super) fn how(&self) -> String {
        match (
            self.exit.and_then(crate::process::Exit::code),
            self.exit.and_then(crate::process::Exit::signal),
        ) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => "ended".to_owned(),
        }
    }
}

impl CommandAgent {
    /// Runs the command to its end under supervision and returns what it did, for
    /// [`judge`](Self::judge) or another agent's parser of the output. With `usage`, the
    /// command is told where it may report its usage, and may write there.
    pub(super) async fn supervise(
        &self,
        request: &AgentRequest,
        argv: &[String],
        on_stdin: bool,
        reads: &[&Path],
        usage: Option<&UsageFile>,
    ) -> Result<Raw, AgentError> {
        let mut spec = ProcessSpec::new(&argv[0])
            .sandbox(self.sandbox(request, argv, reads, usage))
            .args(&argv[1..])
            .owner(crate::process::owner_of(&request.workspace))
            .cwd(&request.workspace)
            // Some CLIs (opencode) take their directory from `PWD`, which would otherwise
            // be ralph's own.
            .env("PWD", &request.workspace)
            .envs(self.config.env.iter())
            .stop(request.stop.clone())
            .grace(self.grace);
        if let Some(usage) = usage {
            spec = spec.env(USAGE_FILE_VAR, usage.path());
        }
        if on_stdin {
            spec = spec.stdin(request.prompt.as_bytes().to_vec());
        }
        if let Some(log) = &request.log_path {
            spec = spec.log_path(log);
        }
        let clocks = Clocks {
            deadline: request.timeout.and_then(|t| Instant::now().checked_add(t)),
            idle: self.config.idle_timeout,
            ..Clocks::default()
        };
        let mut heard = Heard {
            stdout: self.kept_stdout(),
            live: self.live.map(|map| {
                let reach = Reach::new(
                    &self.name,
                    request.unreachable_after,
                    request.events.clone(),
                );
                LiveLines::new(map, request.events.clone(), reach)
            }),
            stderr: BoundedOutput::new(STDERR_KEPT / 2, STDERR_KEPT / 2),
            idle: self.config.idle_timeout,
        };
        let stdout_file = self.stdout_file.then(|| stdout_file(request));
        let streams = match &stdout_file {
            Some((path, _)) => Streams::StdoutToFile(path.clone()),
            None => Streams::Separate,
        };
        let ran = spec.supervise(streams, clocks, &mut heard).await;
        if let Some((path, true)) = &stdout_file {
            let _ = std::fs::remove_file(path);
        }
        let ran = ran.map_err(AgentError::from_process)?;
        if ran.leaked > 0 {
            request
                .events
                .emit(crate::agent::AgentEvent::LeftoversKilled { count: ran.leaked });
        }
        let (stdout, oversized_lines) = heard.stdout.finish();
        Ok(Raw {
            cut: ran.cut,
            exit: ran.exit,
            stdout,
            oversized_lines,
            stderr: heard.stderr.to_string(),
            leaked: ran.leaked,
            duration: ran.duration,
        })
    }

    /// The run's exit and final answer from how it ended and what it printed.
    fn judge(&self, raw: &Raw) -> AgentRun {
        if let Some(cut) = &raw.cut {
            return AgentRun::new(cut.clone());
        }
        if !raw.exit.is_some_and(crate::process::Exit::success) {
            let detail = if raw.stderr.trim().is_empty() {
                last_line(&raw.stdout)
            } else {
                raw.stderr.trim().to_owned()
            };
            return AgentRun::new(AgentExit::Failed {
                reason: format!("{} {}: {detail}", self.name, raw.how()),
                kind: FailureKind::Attempt,
            });
        }
        match &self.config.answer_pointer {
            None => AgentRun::completed(raw.stdout.trim_end()),
            Some(pointer) => match pointed(&raw.stdout, pointer) {
                Ok(text) => AgentRun::completed(text),
                Err(reason) => AgentRun::new(AgentExit::Failed {
                    reason: format!("{}: {reason}", self.name),
                    kind: FailureKind::Attempt,
                }),
            },
        }
    }
}

/// The answer at `pointer` in the last line of `stdout` that is a JSON object: a string as
/// it is, any other value as JSON.
fn pointed(stdout: &str, pointer: &str) -> Result<String, String> {
    let value = stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .ok_or_else(|| {
            format!("no JSON object line on stdout for the answer pointer {pointer:?}")
        })?;
    match value.pointer(pointer) {
        Some(serde_json::Value::String(text)) => Ok(text.clone()),
        Some(other) => Ok(other.to_string()),
        None => Err(format!(
            "the last JSON line of stdout has nothing at {pointer:?}"
        )),
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .to_owned()
}

// The prompt and output files a command agent is handed: its input, not state.
#[allow(clippy::disallowed_methods)]
async fn write_file(path: &Path, bytes: &[u8]) -> Result<(), AgentError> {
    let io = |source| AgentError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
    }
    tokio::fs::write(path, bytes).await.map_err(io)
}

/// Where stdout goes when it goes to a file: beside the log, else a temporary file (the
/// `true`), removed after the run.
fn stdout_file(request: &AgentRequest) -> (PathBuf, bool) {
    match &request.log_path {
        Some(log) => (log.with_extension("stdout"), false),
        None => {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("ralph-stdout-{}-{n}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    }
}

/// What a command's run printed, as the supervisor hands it over: the kept stdout, its
/// live events, and the ends of stderr.
struct Heard {
    stdout: KeptStdout,
    live: Option<LiveLines>,
    stderr: BoundedOutput,
    /// The idle timeout, which a cut for silence names.
    idle: Option<Duration>,
}

/// A command's run is cut by the stop token, its timeouts, and when it printed only
/// connection errors for the request's [`unreachable_after`](AgentRequest::unreachable_after)
/// (a CLI agent whose lines say so). Otherwise a command is judged only when it has ended.
impl Listener for Heard {
    type Cut = AgentExit;

    fn stopped(&mut self) -> AgentExit {
        AgentExit::Stopped
    }

    fn past_deadline(&mut self) -> AgentExit {
        AgentExit::TimedOut
    }

    fn silent(&mut self) -> AgentExit {
        AgentExit::Silent {
            after: self.idle.unwrap_or_default(),
        }
    }

    fn stdout(&mut self, bytes: &[u8]) -> Option<Self::Cut> {
        self.stdout.push(bytes);
        if let Some(live) = &mut self.live {
            live.push(bytes);
        }
        None
    }

    fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.push(bytes);
    }

    fn closed(&mut self) {
        if let Some(live) = &mut self.live {
            live.finish();
        }
    }

    /// The unreachable clock, once connection errors began: the cut names the agent and
    /// its last error.
    fn clock(&self) -> OwnClock<AgentExit> {
        let reach = self.live.as_ref().map(LiveLines::reach);
        OwnClock {
            cut_at: reach.and_then(|reach| {
                let at = reach.cut_at()?;
                Some((at, crate::agent::reach::unreachable(reach.reason())))
            }),
            idle_counts: true,
        }
    }
}

/// `program` found on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}
