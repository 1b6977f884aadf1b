//! One CLI process: spawn it, stream its stdout through the parser, watch the clocks and the
//! context, stop it when needed, and leave nothing behind.

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, AgentEvent, AgentEvents};
use crate::config::ContextThresholds;
use crate::context::{ContextAction, ContextMonitor};
use crate::output::{BoundedOutput, truncate_middle};
use crate::process::{Drain, Exit, ProcessError, ProcessSpec, SupervisedChild, Termination};

use super::stream::{LineReader, StreamOptions, StreamParser, StreamSummary};

/// stderr kept for reports (the CLI writes there only on usage errors).
const STDERR_KEPT: usize = 2048;

/// The clocks of one process.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clocks {
    /// The whole run's wall-clock deadline.
    pub(super) deadline: Option<Instant>,
    /// Longest silence on stdout.
    pub(super) idle: Duration,
    /// How long the process may run on after its `result` line.
    pub(super) result_grace: Duration,
    /// SIGTERM → SIGKILL.
    pub(super) grace: Duration,
}

/// Why ralph stopped the process (or did not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Cut {
    /// It ended by itself.
    None,
    /// The request's stop token was cancelled.
    Stopped,
    /// The wall-clock deadline passed.
    Deadline,
    /// No stdout line for the idle timeout.
    Idle,
    /// It kept running after its `result` line.
    Lingered,
    /// The context reached the compact tier (at this ratio): interrupted for a compaction.
    Compact(f64),
    /// The context reached the kill tier (at this ratio).
    ContextLimit(f64),
}

/// What one process did.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) cut: Cut,
    pub(super) summary: StreamSummary,
    /// How the process ended, if it was seen to.
    pub(super) exit: Option<Exit>,
    /// The head and tail of its stderr.
    pub(super) stderr: String,
    /// Processes it left behind, killed after it ended.
    pub(super) leaked: usize,
}

/// The context tiers of a run, across its processes.
#[derive(Debug)]
pub(super) struct Pressure {
    thresholds: ContextThresholds,
    monitor: Option<ContextMonitor>,
}

impl Pressure {
    pub(super) fn new(thresholds: ContextThresholds) -> Self {
        Pressure {
            thresholds,
            monitor: None,
        }
    }

    /// The tier action for a usage report; the window is fixed by the first report.
    fn observe(&mut self, tokens: u64, window: u64) -> ContextAction {
        let thresholds = self.thresholds;
        self.monitor
            .get_or_insert_with(|| ContextMonitor::new(thresholds, window))
            .observe(tokens)
    }

    /// Continue or kill after a compaction left `tokens` in the window.
    pub(super) fn after_compaction(&mut self, tokens: u64, window: u64) -> ContextAction {
        let thresholds = self.thresholds;
        self.monitor
            .get_or_insert_with(|| ContextMonitor::new(thresholds, window))
            .after_compaction(tokens)
    }
}

/// One process's inputs besides its spec.
pub(super) struct Watch<'a> {
    pub(super) clocks: Clocks,
    pub(super) stop: &'a CancellationToken,
    pub(super) events: &'a AgentEvents,
    /// `None` while compacting: usage then is what is being compacted.
    pub(super) pressure: Option<&'a mut Pressure>,
    pub(super) options: StreamOptions,
    pub(super) max_line: usize,
}

type Log = Pin<Box<dyn AsyncWrite + Send>>;
type Lines = LineReader<tokio::process::ChildStdout, Log>;

/// Runs `spec` to its end, or until a clock, the stop token or the context cuts it.
pub(super) async fn run(
    spec: &ProcessSpec,
    log: Option<&Path>,
    mut watch: Watch<'_>,
) -> Result<Segment, AgentError> {
    let mut child = spec.spawn().map_err(spawn_error)?;
    let (Some(stdout), Some(stderr)) = (child.take_stdout(), child.take_stderr()) else {
        return Err(AgentError::Supervise {
            program: spec.program().to_string_lossy().into_owned(),
            source: std::io::Error::other("its stdout and stderr were not piped"),
        });
    };
    let stderr = tokio::spawn(keep_ends(stderr));
    let mut lines = LineReader::new(stdout)
        .max_line(watch.max_line)
        .tee(open_log(log).await?);
    let mut parser = StreamParser::new(watch.options.clone());
    let cut = watch_stream(&mut lines, &mut parser, &mut watch).await;
    let ended = end(
        &mut child,
        cut,
        &watch.clocks,
        &mut lines,
        &mut parser,
        watch.events,
    )
    .await;
    lines.flush().await;
    let mut summary = parser.finish();
    summary.bytes = lines.bytes_read();
    summary.log_error = lines.tee_error().map(ToString::to_string);
    // Everything that held stderr is dead by now; the drain covers a process that escaped.
    let mut stderr = stderr;
    let drain = Drain::begin();
    let stderr = tokio::select! {
        text = &mut stderr => text.unwrap_or_default(),
        () = Drain::over(Some(&drain)) => {
            stderr.abort();
            String::new()
        }
    };
    let ended = ended.map_err(process_error)?;
    if ended.leaked > 0 {
        watch.events.emit(AgentEvent::LeftoversKilled {
            count: ended.leaked,
        });
    }
    Ok(Segment {
        cut,
        summary,
        exit: ended.exit,
        stderr,
        leaked: ended.leaked,
    })
}

fn spawn_error(error: ProcessError) -> AgentError {
    process_error(error)
}

/// The supervisor's error, as the agent's: the program, or the file, it is about.
fn process_error(error: ProcessError) -> AgentError {
    match error {
        ProcessError::Spawn { program, source } => AgentError::Spawn { program, source },
        ProcessError::Cwd { cwd: path, source } | ProcessError::Log { path, source } => {
            AgentError::Io { path, source }
        }
        ProcessError::Io { program, source } => AgentError::Supervise { program, source },
    }
}

async fn open_log(path: Option<&Path>) -> Result<Log, AgentError> {
    let Some(path) = path else {
        return Ok(Box::pin(tokio::io::sink()));
    };
    let io_error = |source| AgentError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await.map_err(io_error)?;
    }
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(io_error)?;
    Ok(Box::pin(file))
}

/// Reads stdout until it ends or something cuts the run.
async fn watch_stream(lines: &mut Lines, parser: &mut StreamParser, watch: &mut Watch<'_>) -> Cut {
    let clocks = watch.clocks;
    let mut last_output = Instant::now();
    let mut result_at: Option<Instant> = None;
    loop {
        let idle_at = last_output + clocks.idle;
        let linger_until = result_at.map(|at| at + clocks.result_grace);
        let piece = tokio::select! {
            biased;
            () = watch.stop.cancelled() => return Cut::Stopped,
            () = sleep_until_some(clocks.deadline) => return Cut::Deadline,
            () = sleep_until_some(linger_until) => return Cut::Lingered,
            // After the result line, silence is expected: only the linger clock runs.
            () = sleep_until(idle_at), if result_at.is_none() => return Cut::Idle,
            piece = lines.next() => piece,
        };
        let Ok(Some(piece)) = piece else {
            // EOF, or a read error (kept out of the summary: the outcome is what was read).
            return Cut::None;
        };
        last_output = Instant::now();
        let mut cut = Cut::None;
        let pressure = &mut watch.pressure;
        let events = watch.events;
        parser.feed(piece, |event| {
            if let (
                AgentEvent::Usage {
                    context_tokens,
                    window,
                    ..
                },
                Some(pressure),
            ) = (&event, pressure.as_deref_mut())
            {
                let window = window.unwrap_or(super::stream::ContextWindows::DEFAULT_WINDOW);
                cut = react(pressure.observe(*context_tokens, window), events).unwrap_or(cut);
            }
            events.emit(event);
        });
        if result_at.is_none() && parser.has_result() {
            result_at = Some(last_output);
        }
        if cut != Cut::None && !parser.has_result() {
            return cut;
        }
    }
}

/// Reports a tier crossing; returns the cut it calls for.
fn react(action: ContextAction, events: &AgentEvents) -> Option<Cut> {
    let (ratio, tier, cut) = match action {
        ContextAction::Continue => return None,
        ContextAction::Warn(ratio) => (ratio, "warn", None),
        ContextAction::Compact(ratio) => (ratio, "compact", Some(Cut::Compact(ratio))),
        ContextAction::Kill(ratio) => (ratio, "kill", Some(Cut::ContextLimit(ratio))),
    };
    events.emit(AgentEvent::ContextPressure {
        ratio,
        tier: tier.to_owned(),
    });
    cut
}

/// Ends the process as `cut` asks, while draining what it still writes, then kills whatever
/// it left behind.
async fn end(
    child: &mut SupervisedChild,
    cut: Cut,
    clocks: &Clocks,
    lines: &mut Lines,
    parser: &mut StreamParser,
    events: &AgentEvents,
) -> Result<Termination, ProcessError> {
    let done = CancellationToken::new();
    let (ended, ()) = tokio::join!(
        async {
            let ended = stop_process(child, cut, clocks).await;
            done.cancel();
            ended
        },
        drain(lines, parser, events, &done)
    );
    ended
}

async fn stop_process(
    child: &mut SupervisedChild,
    cut: Cut,
    clocks: &Clocks,
) -> Result<Termination, ProcessError> {
    let patience = match cut {
        // stdout closed: the process is exiting.
        Cut::None => clocks.result_grace,
        // SIGINT: the CLI ends its turn, writes a result line and keeps the session.
        Cut::Compact(_) => {
            child.interrupt();
            clocks.grace
        }
        _ => Duration::ZERO,
    };
    if !patience.is_zero()
        && let Ok(exit) = timeout(patience, child.wait()).await
    {
        let exit = exit?;
        let leaked = child.kill_all().await;
        return Ok(Termination {
            exit: Some(exit),
            leaked,
        });
    }
    // SIGTERM: the CLI kills its tool processes and exits 143; SIGKILL after the grace.
    child.terminate(clocks.grace).await
}

/// Feeds what stdout still brings to the parser, until EOF or the drain after `done` is
/// over (see [`Drain`]).
async fn drain(
    lines: &mut Lines,
    parser: &mut StreamParser,
    events: &AgentEvents,
    done: &CancellationToken,
) {
    let mut drain: Option<Drain> = None;
    loop {
        let piece = tokio::select! {
            biased;
            () = done.cancelled(), if drain.is_none() => {
                drain = Some(Drain::begin());
                continue;
            }
            () = Drain::over(drain.as_ref()) => return,
            piece = lines.next() => piece,
        };
        match piece {
            Ok(Some(piece)) => {
                if let Some(drain) = &mut drain {
                    drain.heard();
                }
                parser.feed(piece, |event| events.emit(event));
            }
            _ => return,
        }
    }
}

/// Reads all of stderr, keeping its head and tail.
async fn keep_ends(mut stderr: impl AsyncRead + Unpin) -> String {
    let mut kept = BoundedOutput::new(STDERR_KEPT / 2, STDERR_KEPT / 2);
    let mut buf = vec![0; 8192];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.push(&buf[..n]);
    }
    truncate_middle(kept.to_string().trim(), STDERR_KEPT)
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
