//! One CLI process under the supervisor (`process/supervise.rs`): its stdout streamed through
//! the parser, the context watched, and the CLI's own clocks (idle until its answer, then a
//! short linger).

use std::time::Duration;

use tokio::time::Instant;

use crate::agent::reach::{ApiSign, Reach};
use crate::agent::{AgentError, AgentEvent, AgentEvents};
use crate::config::ContextThresholds;
use crate::context::{ContextAction, ContextMonitor};
use crate::output::{BoundedOutput, truncate_middle};
use crate::process::lines::Piece;
use crate::process::{
    Clocks as ProcessClocks, Exit, LineListener, Lines, OwnClock, ProcessSpec, Streams,
};

use super::stream::{StreamOptions, StreamParser, StreamSummary};

/// stderr kept for reports (the CLI writes there only on usage errors).
const STDERR_KEPT: usize = 2048;

/// The clocks of one process.
#[derive(Clone, Copy, Debug)]
pub(super) struct SegmentClocks {
    /// The whole run's wall-clock deadline.
    pub(super) deadline: Option<Instant>,
    /// Longest silence on stdout.
    pub(super) idle: Duration,
    /// How long the process may run on after its `result` line.
    pub(super) result_grace: Duration,
    /// How long the CLI may print only connection errors (see [`Reach`]); `None`: for ever.
    pub(super) unreachable_after: Option<Duration>,
}

/// Why ralph stopped the process (or did not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Halt {
    /// It ended by itself.
    None,
    /// The request's stop token has stopped.
    Stopped,
    /// The wall-clock deadline passed.
    Deadline,
    /// No stdout line for the idle timeout, this long.
    Idle(Duration),
    /// It kept running after its `result` line.
    Lingered,
    /// The context reached the compact tier (at this ratio): interrupted for a compaction.
    Compact(f64),
    /// The context reached the kill tier (at this ratio).
    ContextLimit(f64),
    /// Only connection errors for [`SegmentClocks::unreachable_after`] (see
    /// [`Segment::unreachable`]).
    Unreachable,
}

/// What one process did.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) cut: Halt,
    pub(super) summary: StreamSummary,
    /// How the process ended, if it was seen to.
    pub(super) exit: Option<Exit>,
    /// The head and tail of its stderr.
    pub(super) stderr: String,
    /// Processes it left behind, killed after it ended.
    pub(super) leaked: usize,
    /// Why it was cut as [`Halt::Unreachable`]: the agent and its last error.
    pub(super) unreachable: Option<String>,
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

/// One process's inputs besides its spec (which carries the stop token and the log).
pub(super) struct Inputs<'a> {
    pub(super) clocks: SegmentClocks,
    pub(super) events: &'a AgentEvents,
    /// `None` while compacting: usage then is what is being compacted.
    pub(super) pressure: Option<&'a mut Pressure>,
    pub(super) options: StreamOptions,
    pub(super) max_line: usize,
}

/// Runs `spec` to its end, or until a clock, the stop token or the context cuts it.
pub(super) async fn run(spec: &ProcessSpec, watch: Inputs<'_>) -> Result<Segment, AgentError> {
    let clocks = watch.clocks;
    let stream = CliOutput {
        parser: StreamParser::new(watch.options.clone()),
        events: watch.events,
        pressure: watch.pressure,
        ending: false,
        stderr: BoundedOutput::new(STDERR_KEPT / 2, STDERR_KEPT / 2),
        result_at: None,
        result_grace: clocks.result_grace,
        idle: clocks.idle,
        reach: Reach::new("claude", clocks.unreachable_after, watch.events.clone()),
    };
    let mut lines = Lines::new(watch.max_line, stream);
    let process_clocks = ProcessClocks {
        deadline: clocks.deadline,
        idle: Some(clocks.idle),
        // stdout closed: the process is exiting, and has this long to.
        exit_after_close: Some(clocks.result_grace),
        // Its last lines (the usage, the result) count as much as the first.
        read_to_close: true,
    };
    let ran = spec
        .supervise(Streams::Separate, process_clocks, &mut lines)
        .await
        .map_err(AgentError::from_process)?;
    if ran.leaked > 0 {
        watch
            .events
            .emit(AgentEvent::LeftoversKilled { count: ran.leaked });
    }
    let summary_bytes = lines.bytes_read();
    let stream = lines.listener;
    let mut summary = stream.parser.finish();
    summary.bytes = summary_bytes;
    summary.log_error = ran.log_error.map(|e| e.to_string());
    let cut = ran.cut.unwrap_or(Halt::None);
    Ok(Segment {
        unreachable: (cut == Halt::Unreachable).then(|| stream.reach.reason()),
        cut,
        summary,
        exit: ran.exit,
        stderr: truncate_middle(stream.stderr.to_string().trim(), STDERR_KEPT),
        leaked: ran.leaked,
    })
}

/// The CLI's output as the supervisor hands it over: stdout's lines through the parser,
/// whose usage reports move the context tiers; the ends of stderr.
struct CliOutput<'a> {
    parser: StreamParser,
    events: &'a AgentEvents,
    pressure: Option<&'a mut Pressure>,
    /// The run is ending: lines are still parsed, the context no longer watched.
    ending: bool,
    stderr: BoundedOutput,
    /// When the `result` line came.
    result_at: Option<Instant>,
    result_grace: Duration,
    /// The idle timeout, which a cut for silence names.
    idle: Duration,
    /// Whether the API answers: the unreachable clock.
    reach: Reach,
}

impl LineListener for CliOutput<'_> {
    type Cut = Halt;

    fn stopped(&mut self) -> Halt {
        Halt::Stopped
    }

    fn past_deadline(&mut self) -> Halt {
        Halt::Deadline
    }

    fn silent(&mut self) -> Halt {
        Halt::Idle(self.idle)
    }

    /// Parses the line; returns the cut the context calls for, unless the answer is in.
    fn line(&mut self, piece: Piece<'_>) -> Option<Halt> {
        let mut cut = None;
        let events = self.events;
        let mut pressure = if self.ending {
            None
        } else {
            self.pressure.as_deref_mut()
        };
        let reach = &mut self.reach;
        self.parser.feed(piece, |event| {
            if let Some(sign) = api_sign(&event) {
                reach.heard(sign);
            }
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
                cut = react(pressure.observe(*context_tokens, window), events).or(cut);
            }
            events.emit(event);
        });
        if self.parser.has_result() {
            self.result_at.get_or_insert_with(Instant::now);
            // Once the answer is in, the context no longer matters.
            return None;
        }
        cut
    }

    fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.push(bytes);
    }

    fn ending(&mut self) {
        self.ending = true;
    }

    /// Silence counts until the `result` line; after it, only the linger clock runs.
    /// Before it, connection errors only for the unreachable time cut the run.
    fn clock(&self) -> OwnClock<Halt> {
        let cut_at = match self.result_at {
            Some(at) => Some((at + self.result_grace, Halt::Lingered)),
            None => self.reach.cut_at().map(|at| (at, Halt::Unreachable)),
        };
        OwnClock {
            cut_at,
            idle_counts: self.result_at.is_none(),
        }
    }

    /// SIGINT: the CLI ends its turn, writes a result line and keeps the session.
    fn interrupts(&self, cut: &Halt) -> bool {
        matches!(cut, Halt::Compact(_))
    }
}

/// What a stream event says about the API. A message of the model's (its usage, text or a
/// tool call) is its answer; an `api_retry` is a failed call the CLI retries: with the
/// error class `unknown` (no HTTP status: connection refused, a request that timed out) a
/// connection error, else the API answering with an error (a 5xx, a 429 waited out); a
/// rejected rate limit is the API answering.
fn api_sign(event: &AgentEvent) -> Option<ApiSign> {
    match event {
        AgentEvent::Usage { .. } | AgentEvent::ToolUse { .. } => Some(ApiSign::Answered),
        AgentEvent::ApiRetry { attempt, error } => {
            let class = error.as_deref().unwrap_or("unknown");
            Some(if class == "unknown" {
                ApiSign::Unreached(format!(
                    "API call failed without a response (connection refused or timed out); retry {attempt}"
                ))
            } else {
                ApiSign::Error(format!("API call failed ({class}); retry {attempt}"))
            })
        }
        AgentEvent::RateLimited { .. } => Some(ApiSign::Error("rate limited".to_owned())),
        _ => None,
    }
}

/// Reports a tier crossing; returns the cut it calls for.
fn react(action: ContextAction, events: &AgentEvents) -> Option<Halt> {
    let (ratio, tier, cut) = match action {
        ContextAction::Continue => return None,
        ContextAction::Warn(ratio) => (ratio, "warn", None),
        ContextAction::Compact(ratio) => (ratio, "compact", Some(Halt::Compact(ratio))),
        ContextAction::Kill(ratio) => (ratio, "kill", Some(Halt::ContextLimit(ratio))),
    };
    events.emit(AgentEvent::ContextPressure {
        ratio,
        tier: tier.to_owned(),
    });
    cut
}
