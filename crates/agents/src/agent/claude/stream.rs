//! The parser of the Claude CLI's `--output-format stream-json --verbose` stdout.
//!
//! The CLI writes one JSON object per line (see `fixtures/claude/PROTOCOL.md`): `system` lines
//! (`init`, `api_retry`, `permission_denied`, `status`, `compact_boundary`, …), one `assistant`
//! line per content block of each API message, `user` lines with tool results, optional
//! `stream_event` and `rate_limit_event` lines, and a last `result` line with the outcome.
//!
//! * [`LineReader`] reads the lines in bounded memory and tees every byte to the run's log.
//! * [`StreamParser`] turns them into live [`AgentEvent`]s and, at the end, a
//!   [`StreamSummary`]: session id, outcome, final text, structured output, usage, cost.
//!
//! # Robustness
//!
//! * Unknown line types, subtypes and fields are ignored; every field is optional and may
//!   change its type (then it reads as absent). A line that is not JSON is counted, its head
//!   kept for reports, and skipped: nothing a line contains stops the stream.
//! * A line longer than the reader's cap (8 MiB by default) is never held: it is scanned as it
//!   streams by, into a compact copy that keeps every field but cuts long strings to their
//!   first and last [`StreamOptions::string_head`]/[`string_tail`](StreamOptions::string_tail)
//!   bytes around an omission line `[… N bytes omitted …]`. So a 200 MiB `result` line still
//!   yields its outcome, usage, session id and the *end* of the final text, where markers are.
//! * The outcome comes from the `result` line's `is_error` alone, never from `subtype` (API
//!   failures say `"success"`) nor from the exit code (SIGINT exits 0). No `result` line means
//!   the CLI was killed or crashed ([`RunOutcome::NoResult`]).
//!
//! # The final text
//!
//! [`StreamSummary::final_text`] is `result.result` of a run that completed (`is_error:
//! false`), and nothing otherwise. This is fixtures/claude/PROTOCOL.md §4's strict option: `result.result` is the
//! last text block of the final assistant message only, so a marker the model wrote in an
//! earlier turn (`"I am done. <TASK_DONE>"`, then a tool call, then `"Verified."`) or in a
//! message cut off by an API error is not part of it. Markers are the engine's business
//! ([`signal::parse`](ralph_loop_core::signal::parse)); this module never looks for them.
//!
//! # Usage and context
//!
//! The API reports usage once per API message, but the CLI writes one `assistant` line per
//! content block, each with the same `message.id` and usage: lines are deduplicated by
//! `message.id`. The context in use is `input + cache_read + cache_creation` tokens of the
//! latest distinct message of the main session (not of a subagent's, nor of the CLI's
//! synthetic API-error messages), never `result.usage`, which sums every call. After a
//! `compact_boundary` it drops to the boundary's `post_tokens`.
//!
//! # Example
//!
//! ```
//! use ralph::agent::AgentEvent;
//! use ralph_loop_agents::agent::claude::stream::{LineReader, RunOutcome, StreamOptions, StreamParser};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let stdout: &[u8] = br#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-opus-5-5"}
//! {"type":"assistant","message":{"id":"m1","model":"claude-opus-5-5","content":[{"type":"text","text":"Done.\n<TASK_DONE>"}],"usage":{"input_tokens":900,"cache_read_input_tokens":100,"output_tokens":1}},"session_id":"s-1"}
//! {"type":"result","subtype":"success","is_error":false,"result":"Done.\n<TASK_DONE>","num_turns":1,"session_id":"s-1"}
//! "#;
//! let mut events = Vec::new();
//! let summary = StreamParser::new(StreamOptions::default())
//!     .read(LineReader::new(stdout), |event| events.push(event))
//!     .await;
//!
//! assert_eq!(summary.outcome, RunOutcome::Completed);
//! assert_eq!(summary.session_id.as_deref(), Some("s-1"));
//! assert_eq!(summary.final_text.as_deref(), Some("Done.\n<TASK_DONE>"));
//! assert_eq!(summary.usage.context_tokens, 1_000);
//! assert!(events.iter().any(|e| matches!(e, AgentEvent::Usage { context_tokens: 1_000, window: Some(1_000_000), .. })));
//! # }
//! ```

mod lenient;
mod outcome;
// Also shrinks the oversized lines of the other CLIs (`agent::kept`).
pub(in crate::agent) mod shrink;
mod window;
mod wire;

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite};

use crate::agent::{AgentEvent, AgentExit, Usage};

use lenient::{ApiStatus, Obj, StrOrObj};
use shrink::{Limits, Shrinker, Shrunk};
use wire::{Block, StdoutLine, TokenUsage};

pub use crate::process::lines::LineReader;
pub use crate::process::lines::{DEFAULT_MAX_LINE, Piece};
pub use outcome::FailureCause;
pub use outcome::{Failure, RunOutcome};
pub use window::ContextWindows;

/// Message ids remembered for deduplication. The lines of one API message come together, so
/// a short memory suffices and stays bounded however long the run.
const RECENT_IDS: usize = 64;
/// Bytes of a bad line's head kept for reports.
const BAD_HEAD: usize = 200;
/// Bad lines whose head is kept and reported as an event.
const BAD_REPORTED: usize = 5;

/// Limits and tables of a [`StreamParser`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Context windows by model, for [`AgentEvent::Usage`] and the summary.
    pub windows: ContextWindows,
    /// Bytes kept from the start of a long string of an oversized line (default 64 KiB).
    pub string_head: usize,
    /// Bytes kept from the end of a long string of an oversized line (default 64 KiB).
    pub string_tail: usize,
    /// Size of an oversized line's compact copy past which its members are dropped
    /// (default 1 MiB; top-level members are kept, small).
    pub oversized_budget: usize,
    /// Longest text of an [`AgentEvent::Text`], in bytes (default 4 KiB); longer texts keep
    /// their head and tail.
    pub event_text: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            windows: ContextWindows::default(),
            string_head: 64 << 10,
            string_tail: 64 << 10,
            oversized_budget: 1 << 20,
            event_text: 4 << 10,
        }
    }
}

impl StreamOptions {
    /// Sets the context-window table.
    #[must_use]
    pub fn windows(mut self, windows: ContextWindows) -> Self {
        self.windows = windows;
        self
    }

    /// Sets the bytes kept of each end of a long string of an oversized line.
    #[must_use]
    pub fn string_limits(mut self, head: usize, tail: usize) -> Self {
        self.string_head = head;
        self.string_tail = tail;
        self
    }

    /// Sets the size of an oversized line's compact copy.
    #[must_use]
    pub fn oversized_budget(mut self, bytes: usize) -> Self {
        self.oversized_budget = bytes;
        self
    }

    /// Sets the longest text of an [`AgentEvent::Text`].
    #[must_use]
    pub fn event_text(mut self, bytes: usize) -> Self {
        self.event_text = bytes;
        self
    }
}

/// A tool call refused by the permission rules (the run goes on).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermissionDenial {
    /// The tool (`Bash`).
    pub tool: String,
    /// The refused call's id.
    pub tool_use_id: Option<String>,
    /// Why, as the CLI told the model (from the `permission_denied` line).
    pub message: Option<String>,
}

/// What the stream said about the run, once it ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StreamSummary {
    /// The session id, from the first line that had one.
    pub session_id: Option<String>,
    /// The model of the latest API message (or of `init`).
    pub model: Option<String>,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// `result.result` of a completed run (see the module docs, "The final text").
    pub final_text: Option<String>,
    /// Bytes cut from the middle of [`final_text`](Self::final_text) because the `result` line
    /// was longer than the reader's cap; 0 when the text is exact.
    pub final_text_omitted: u64,
    /// `result.structured_output` (`--json-schema` runs that called the `StructuredOutput`
    /// tool). `None` when absent, and when an oversized line cut it (never a mangled value).
    pub structured_output: Option<serde_json::Value>,
    /// Token totals (`result.usage`, else the sum over distinct API messages), the context in
    /// use after the latest message, and the window (see [`StreamParser`]).
    pub usage: Usage,
    /// `result.total_cost_usd`.
    pub cost_usd: Option<f64>,
    /// `result.num_turns`.
    pub num_turns: Option<u32>,
    /// `result.duration_ms`.
    pub duration_ms: Option<u64>,
    /// Refused tool calls (`permission_denied` lines and `result.permission_denials`, merged by
    /// tool-use id).
    pub permission_denials: Vec<PermissionDenial>,
    /// `api_retry` lines.
    pub api_retries: u32,
    /// `compact_boundary` lines.
    pub compactions: u32,
    /// The reset time of the last rejected `rate_limit_event`.
    pub rate_limited_until: Option<SystemTime>,
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Bytes read (set by [`StreamParser::read`]; 0 from [`StreamParser::finish`]).
    pub bytes: u64,
    /// Lines longer than the reader's cap (read through their compact copy).
    pub oversized_lines: u64,
    /// Lines that were not JSON (or not one complete value), skipped.
    pub bad_lines: u64,
    /// The heads of the first bad lines (lossy UTF-8, at most 200 bytes each).
    pub bad_line_heads: Vec<String>,
    /// The error that ended the reading early, if any (the outcome then is what was read; set
    /// by [`StreamParser::read`]).
    pub read_error: Option<String>,
    /// The first error of the tee (the log file), after which teeing stopped (set by
    /// [`StreamParser::read`]).
    pub log_error: Option<String>,
}

impl StreamSummary {
    /// What the run means for the engine: [`RunOutcome::agent_exit`] with this stream's
    /// rate-limit reset time.
    pub fn agent_exit(&self) -> AgentExit {
        self.outcome.agent_exit(self.rate_limited_until)
    }
}

/// Token totals over distinct API messages.
#[derive(Clone, Copy, Debug, Default)]
struct TokenCounts {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
}

impl TokenCounts {
    fn of(usage: &TokenUsage) -> Self {
        TokenCounts {
            input: usage.input_tokens.0.unwrap_or(0),
            output: usage.output_tokens.0.unwrap_or(0),
            cache_read: usage.cache_read_input_tokens.0.unwrap_or(0),
            cache_creation: usage.cache_creation_input_tokens.0.unwrap_or(0),
        }
    }

    fn add(&mut self, other: TokenCounts) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_creation = self.cache_creation.saturating_add(other.cache_creation);
    }

    /// Tokens in the context window for a call with this usage.
    fn context(self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_creation)
    }
}

/// What the `result` line said, owned.
#[derive(Debug, Default)]
struct ResultLine {
    is_error: Option<bool>,
    subtype: Option<String>,
    terminal_reason: Option<String>,
    status: ApiStatus,
    text: Option<String>,
    text_omitted: u64,
    errors: Vec<String>,
    totals: Option<TokenCounts>,
    window: Option<u64>,
    cost_usd: Option<f64>,
    num_turns: Option<u64>,
    duration_ms: Option<u64>,
    structured_output: Option<serde_json::Value>,
}

/// Turns stdout lines of the CLI into live [`AgentEvent`]s and a [`StreamSummary`].
///
/// Feed it the pieces of a [`LineReader`] with [`feed`](Self::feed) (when the caller runs its
/// own loop, for example in a `select!` with an idle timer) and call [`finish`](Self::finish)
/// at the end, or let [`read`](Self::read) do both.
///
/// Events, in stream order:
///
/// * [`Session`](AgentEvent::Session) once, from the first line with a `session_id`;
/// * [`Text`](AgentEvent::Text) per text block (cut to [`StreamOptions::event_text`]) and
///   [`ToolUse`](AgentEvent::ToolUse) per tool call;
/// * [`Usage`](AgentEvent::Usage) per distinct API message of the main session, with the
///   window of its model from [`StreamOptions::windows`];
/// * [`ApiRetry`](AgentEvent::ApiRetry), [`PermissionDenied`](AgentEvent::PermissionDenied),
///   [`Compacted`](AgentEvent::Compacted) (ratios from the boundary's `pre_tokens` and
///   `post_tokens`; without `post_tokens`, the event waits for the next size the CLI
///   reports, a message's usage or else the result's, and a stream that reports none gives
///   a [`Note`](AgentEvent::Note) instead, never a made-up 0 %), and
///   [`RateLimited`](AgentEvent::RateLimited) for a rejected `rate_limit_event`;
/// * [`Note`](AgentEvent::Note)s: compaction started or failed, an oversized line, the first
///   few bad lines.
///
/// The summary's context window is, in order: the table's entry for the model if it was set
/// with [`ContextWindows::with`], the CLI's `result.modelUsage[model].contextWindow`, the table.
#[derive(Debug)]
pub struct StreamParser {
    options: StreamOptions,
    session_id: Option<String>,
    init_model: Option<String>,
    model: Option<String>,
    recent_ids: VecDeque<String>,
    totals: TokenCounts,
    context_tokens: Option<u64>,
    /// The error class of the latest synthetic API-error message.
    error_class: Option<String>,
    result: Option<ResultLine>,
    denials: Vec<PermissionDenial>,
    api_retries: u32,
    compactions: u32,
    /// The ratio before a compaction whose boundary gave no size after it: its
    /// [`Compacted`](AgentEvent::Compacted) waits for the next usage the CLI reports.
    unsized_compaction: Option<f64>,
    rate_limited_until: Option<SystemTime>,
    lines: u64,
    oversized_lines: u64,
    bad_lines: u64,
    bad_line_heads: Vec<String>,
    /// The oversized line being scanned, and its head (reported if it is not JSON).
    shrinker: Option<(Shrinker, Vec<u8>)>,
}

impl StreamParser {
    /// A parser with `options`.
    pub fn new(options: StreamOptions) -> Self {
        StreamParser {
            options,
            session_id: None,
            init_model: None,
            model: None,
            recent_ids: VecDeque::with_capacity(RECENT_IDS),
            totals: TokenCounts::default(),
            context_tokens: None,
            error_class: None,
            result: None,
            denials: Vec::new(),
            api_retries: 0,
            compactions: 0,
            unsized_compaction: None,
            rate_limited_until: None,
            lines: 0,
            oversized_lines: 0,
            bad_lines: 0,
            bad_line_heads: Vec::new(),
            shrinker: None,
        }
    }

    /// Reads `reader` to its end (or first read error), emitting events as lines arrive, then
    /// flushes the reader's tee and returns the summary.
    ///
    /// ```
    /// use ralph::agent::{AgentEvent, AgentExit, FailureKind};
    /// use ralph_loop_agents::agent::claude::stream::{FailureCause, LineReader, StreamOptions, StreamParser};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// // The CLI's stdout (here: a run whose API calls failed with HTTP 500).
    /// let stdout: &[u8] = br#"{"type":"system","subtype":"init","session_id":"s-2","model":"claude-opus-5-5"}
    /// {"type":"system","subtype":"api_retry","attempt":1,"error_status":500,"error":"server_error","session_id":"s-2"}
    /// {"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"result":"API Error: 500","session_id":"s-2"}
    /// "#;
    /// let dir = tempfile::tempdir()?;
    /// let log = tokio::fs::File::create(dir.path().join("run.log")).await?;
    /// let on_event = |event| {
    ///     if let AgentEvent::ApiRetry { attempt, .. } = event {
    ///         assert_eq!(attempt, 1);
    ///     }
    /// };
    ///
    /// let reader = LineReader::new(stdout).tee(log);
    /// let summary = StreamParser::new(StreamOptions::default())
    ///     .read(reader, on_event)
    ///     .await;
    ///
    /// // `subtype` says "success"; `is_error` says otherwise.
    /// let failure = summary.outcome.failure().expect("failed");
    /// assert_eq!(failure.cause, FailureCause::ServerError);
    /// assert_eq!(failure.api_error_status, Some(500));
    /// assert_eq!(summary.api_retries, 1);
    /// assert!(matches!(
    ///     summary.agent_exit(),
    ///     AgentExit::Failed { kind: FailureKind::Transient, .. }
    /// ));
    /// // The whole transcript went to the log.
    /// assert_eq!(std::fs::read(dir.path().join("run.log"))?, stdout);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the parser; what was read is lost. To keep it, drive
    /// [`LineReader::next`] and [`feed`](Self::feed) yourself.
    pub async fn read<R, W>(
        mut self,
        mut reader: LineReader<R, W>,
        mut emit: impl FnMut(AgentEvent),
    ) -> StreamSummary
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let read_error = loop {
            match reader.next().await {
                Ok(Some(piece)) => self.feed(piece, &mut emit),
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        reader.flush().await;
        let mut summary = self.finish();
        summary.bytes = reader.bytes_read();
        summary.read_error = read_error;
        summary.log_error = reader.tee_error().map(ToString::to_string);
        summary
    }

    /// Parses one piece of stdout, emitting the events it brings.
    pub fn feed(&mut self, piece: Piece<'_>, mut emit: impl FnMut(AgentEvent)) {
        match piece {
            Piece::Line(bytes) => self.line(bytes, None, &mut emit),
            Piece::Part(bytes) => self.oversized_part(bytes),
            Piece::LastPart(bytes) => {
                self.oversized_part(bytes);
                self.end_oversized(&mut emit);
            }
        }
    }

    /// The summary of everything fed so far.
    pub fn finish(mut self) -> StreamSummary {
        if let Some((_, head)) = self.shrinker.take() {
            // The stream ended inside an oversized line: it was cut off.
            self.lines += 1;
            self.bad(&head, &mut |_| {});
        }
        let outcome = self.outcome();
        let result = self.result.take().unwrap_or_default();
        let completed = outcome.is_completed();
        StreamSummary {
            usage: self.usage(&result),
            session_id: self.session_id,
            model: self.model.or(self.init_model),
            outcome,
            final_text: result.text.filter(|_| completed),
            final_text_omitted: if completed { result.text_omitted } else { 0 },
            structured_output: result.structured_output,
            cost_usd: result.cost_usd,
            num_turns: result
                .num_turns
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            duration_ms: result.duration_ms,
            permission_denials: self.denials,
            api_retries: self.api_retries,
            compactions: self.compactions,
            rate_limited_until: self.rate_limited_until,
            lines: self.lines,
            bytes: 0,
            oversized_lines: self.oversized_lines,
            bad_lines: self.bad_lines,
            bad_line_heads: self.bad_line_heads,
            read_error: None,
            log_error: None,
        }
    }

    /// The session id, once a line had one.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The context in use after the latest distinct API message, once there was one.
    pub fn context_tokens(&self) -> Option<u64> {
        self.context_tokens
    }

    /// Whether the `result` line was seen.
    pub fn has_result(&self) -> bool {
        self.result.is_some()
    }

    /// Bytes of buffer the parser holds now (capacities of its own buffers, approximate):
    /// bounded by the options, however long the lines.
    pub fn retained_bytes(&self) -> usize {
        let shrinker = self
            .shrinker
            .as_ref()
            .map_or(0, |(s, head)| s.capacity() + head.capacity());
        let result = self.result.as_ref().map_or(0, |r| {
            r.text.as_ref().map_or(0, String::capacity)
                + r.errors.iter().map(String::capacity).sum::<usize>()
        });
        let ids: usize = self.recent_ids.iter().map(String::capacity).sum();
        shrinker + result + ids
    }

    fn oversized_part(&mut self, bytes: &[u8]) {
        let limits = Limits {
            head: self.options.string_head,
            tail: self.options.string_tail,
            budget: self.options.oversized_budget,
        };
        let (shrinker, head) = self
            .shrinker
            .get_or_insert_with(|| (Shrinker::new(limits), Vec::new()));
        let room = BAD_HEAD.saturating_sub(head.len()).min(bytes.len());
        head.extend_from_slice(&bytes[..room]);
        shrinker.feed(bytes);
    }

    fn end_oversized(&mut self, emit: &mut dyn FnMut(AgentEvent)) {
        let Some((shrinker, head)) = self.shrinker.take() else {
            return;
        };
        match shrinker.finish() {
            Some(shrunk) => {
                self.oversized_lines += 1;
                emit(AgentEvent::OversizedLine);
                self.line(&shrunk.json, Some(&shrunk), emit);
            }
            None => {
                self.lines += 1;
                self.bad(&head, emit);
            }
        }
    }

    /// One whole line (or the compact copy of an oversized one, with what was cut).
    fn line(&mut self, bytes: &[u8], cuts: Option<&Shrunk>, emit: &mut dyn FnMut(AgentEvent)) {
        self.lines += 1;
        if bytes.trim_ascii().is_empty() {
            return;
        }
        if let Ok(line) = serde_json::from_slice::<StdoutLine<'_>>(bytes) {
            return self.dispatch(line, cuts, emit);
        }
        match repaired(bytes) {
            Some(copy) => match serde_json::from_slice::<StdoutLine<'_>>(&copy.json) {
                Ok(line) => self.dispatch(line, cuts, emit),
                Err(_) => self.bad(bytes, emit),
            },
            None => self.bad(bytes, emit),
        }
    }

    fn bad(&mut self, bytes: &[u8], emit: &mut dyn FnMut(AgentEvent)) {
        self.bad_lines += 1;
        if self.bad_line_heads.len() < BAD_REPORTED {
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(BAD_HEAD)]).into_owned();
            emit(AgentEvent::Note {
                message: format!("skipped a stdout line that is not JSON: {head}"),
            });
            self.bad_line_heads.push(head);
        }
    }

    fn dispatch(
        &mut self,
        line: StdoutLine<'_>,
        cuts: Option<&Shrunk>,
        emit: &mut dyn FnMut(AgentEvent),
    ) {
        if self.session_id.is_none()
            && let Some(id) = line.session_id.owned()
        {
            self.session_id = Some(id.clone());
            emit(AgentEvent::Session { id });
        }
        match (line.kind.get(), line.subtype.get()) {
            (Some("assistant"), _) => self.assistant(line, emit),
            (Some("result"), _) => {
                self.result(line, cuts);
                self.size_compaction_at_result(emit);
            }
            (Some("rate_limit_event"), _) => self.rate_limit(&line, emit),
            (Some("system"), Some("init")) => self.init(&line),
            (Some("system"), Some("api_retry")) => self.api_retry(&line, emit),
            (Some("system"), Some("permission_denied")) => self.permission_denied(&line, emit),
            (Some("system"), Some("status")) => self.status(&line, emit),
            (Some("system"), Some("compact_boundary")) => self.compact_boundary(&line, emit),
            // `user`, `stream_event`, `ui_invalidate`, and whatever comes next.
            _ => {}
        }
    }

    fn init(&mut self, line: &StdoutLine<'_>) {
        self.init_model = line.model.owned();
    }

    fn assistant(&mut self, line: StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        let StrOrObj::Obj(mut message) = line.message else {
            return;
        };
        self.blocks(std::mem::take(&mut message.content.0), emit);
        let synthetic =
            line.is_api_error_message.0 == Some(true) || message.model.get() == Some("<synthetic>");
        if synthetic {
            // Zero usage, not a context size; its class helps classify a status-less failure.
            self.error_class = line.error.owned();
            return;
        }
        // A subagent's messages (parent_tool_use_id set) have their own model and context.
        let main = line.parent_tool_use_id.get().is_none();
        if let Some(model) = message.model.get().filter(|_| main)
            && self.model.as_deref() != Some(model)
        {
            self.model = Some(model.to_owned());
        }
        let first = self.first_sighting(message.id.get());
        if let (true, Some(usage)) = (first, &message.usage.0) {
            self.count(TokenCounts::of(usage), main, emit);
        }
    }

    /// Text and tool-use events; blocks are taken by value so an escaped (owned) text moves.
    fn blocks(&self, blocks: Vec<Obj<Block<'_>>>, emit: &mut dyn FnMut(AgentEvent)) {
        for block in blocks.into_iter().filter_map(|b| b.0) {
            match (block.kind.get(), block.text.0, block.name.get()) {
                (Some("text"), Some(text), _) => emit(AgentEvent::Text {
                    text: bounded(text, self.options.event_text),
                }),
                (Some("tool_use"), _, Some(name)) => emit(AgentEvent::ToolUse {
                    name: name.to_owned(),
                }),
                _ => {}
            }
        }
    }

    /// Whether `id` is a message not seen before (lines without an id always count).
    fn first_sighting(&mut self, id: Option<&str>) -> bool {
        let Some(id) = id else {
            return true;
        };
        if self.recent_ids.iter().any(|seen| seen == id) {
            return false;
        }
        if self.recent_ids.len() == RECENT_IDS {
            self.recent_ids.pop_front();
        }
        self.recent_ids.push_back(id.to_owned());
        true
    }

    #[allow(clippy::cast_precision_loss)] // Token counts far below 2^52.
    fn count(&mut self, usage: TokenCounts, main: bool, emit: &mut dyn FnMut(AgentEvent)) {
        self.totals.add(usage);
        // Every message is paid for, a subagent's too: the ledger keeps the run's so far.
        emit(AgentEvent::Spend {
            usage: Usage::tokens(
                self.totals.input,
                self.totals.output,
                self.totals.cache_read,
                self.totals.cache_creation,
            ),
            cost_usd: None,
        });
        if main {
            let context = usage.context();
            self.context_tokens = Some(context);
            if let Some(before) = self.unsized_compaction.take() {
                // The first size the CLI reports after a boundary that gave none.
                emit(AgentEvent::Compacted {
                    before,
                    after: context as f64 / self.live_window().max(1) as f64,
                });
            }
            emit(AgentEvent::Usage {
                context_tokens: context,
                window: Some(self.live_window()),
                input_tokens: self
                    .totals
                    .input
                    .saturating_add(self.totals.cache_read)
                    .saturating_add(self.totals.cache_creation),
                output_tokens: self.totals.output,
            });
        }
    }

    /// The window of the current model, from the table.
    fn live_window(&self) -> u64 {
        let model = self.model.as_deref().or(self.init_model.as_deref());
        self.options.windows.window(model.unwrap_or_default())
    }

    fn api_retry(&mut self, line: &StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        self.api_retries = self.api_retries.saturating_add(1);
        let attempt = line
            .attempt
            .0
            .map_or(self.api_retries, |n| u32::try_from(n).unwrap_or(u32::MAX));
        emit(AgentEvent::ApiRetry {
            attempt,
            error: line.error.owned(),
        });
    }

    fn permission_denied(&mut self, line: &StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        let tool = line.tool_name.owned().unwrap_or_default();
        let message = match &line.message {
            StrOrObj::Str(text) => Some(bounded(text.as_ref(), Failure::MAX_MESSAGE)),
            _ => None,
        };
        emit(AgentEvent::PermissionDenied { tool: tool.clone() });
        self.denials.push(PermissionDenial {
            tool,
            tool_use_id: line.tool_use_id.owned(),
            message,
        });
    }

    fn status(&mut self, line: &StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        let message = match (line.status.get(), line.compact_result.get()) {
            (Some("compacting"), _) => "the CLI is compacting the session".to_owned(),
            (_, Some("failed")) => format!(
                "the CLI's compaction failed: {}",
                line.compact_error.get().unwrap_or("no reason given")
            ),
            _ => return,
        };
        emit(AgentEvent::Note { message });
    }

    #[allow(clippy::cast_precision_loss)] // Token counts far below 2^52.
    fn compact_boundary(&mut self, line: &StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        self.compactions = self.compactions.saturating_add(1);
        let metadata = line.compact_metadata.0.as_ref();
        let pre = metadata
            .and_then(|m| m.pre_tokens.0)
            .or(self.context_tokens);
        let post = metadata.and_then(|m| m.post_tokens.0);
        let window = self.live_window().max(1) as f64;
        let before = pre.unwrap_or(0) as f64 / window;
        match post {
            Some(post) => {
                emit(AgentEvent::Compacted {
                    before,
                    after: post as f64 / window,
                });
                self.context_tokens = Some(post);
            }
            // The size after it comes with the next message's usage, if the CLI reports one.
            None => self.unsized_compaction = Some(before),
        }
    }

    /// At the result, a compaction still waiting for its size: a `/compact` run has no
    /// message of the session after its boundary, so the result's usage is the one size the
    /// CLI reports after it (the CLI's own boundary carries `post_tokens`; this is for one
    /// that does not). It becomes the context, so the figure shown and the one ralph decides
    /// on agree. Without it the compaction is noted as unsized, never shown as 0 %.
    #[allow(clippy::cast_precision_loss)] // Token counts far below 2^52.
    fn size_compaction_at_result(&mut self, emit: &mut dyn FnMut(AgentEvent)) {
        let Some(before) = self.unsized_compaction.take() else {
            return;
        };
        let reported = self
            .result
            .as_ref()
            .and_then(|r| r.totals)
            .map(TokenCounts::context)
            .filter(|&tokens| tokens > 0);
        let Some(after) = reported else {
            emit(AgentEvent::Note {
                message: format!(
                    "the CLI compacted the session at {:.0}% and reported no context size after it",
                    before * 100.0
                ),
            });
            return;
        };
        self.context_tokens = Some(after);
        emit(AgentEvent::Compacted {
            before,
            after: after as f64 / self.live_window().max(1) as f64,
        });
    }

    fn rate_limit(&mut self, line: &StdoutLine<'_>, emit: &mut dyn FnMut(AgentEvent)) {
        let Some(info) = &line.rate_limit_info.0 else {
            return;
        };
        if info.status.get() != Some("rejected") {
            return;
        }
        match info.resets_at.0.and_then(epoch_seconds) {
            Some(until) => {
                self.rate_limited_until = Some(until);
                emit(AgentEvent::rate_limited(until, info.limit_type.owned()));
            }
            None => emit(AgentEvent::Note {
                message: "rate limit rejected the request, without a reset time".to_owned(),
            }),
        }
    }

    fn result(&mut self, line: StdoutLine<'_>, cuts: Option<&Shrunk>) {
        let cut = |key: &str| cuts.and_then(|c| c.cut(key));
        for denial in line
            .permission_denials
            .0
            .iter()
            .filter_map(|d| d.0.as_ref())
        {
            let id = denial.tool_use_id.get();
            if id.is_none() || !self.denials.iter().any(|d| d.tool_use_id.as_deref() == id) {
                self.denials.push(PermissionDenial {
                    tool: denial.tool_name.owned().unwrap_or_default(),
                    tool_use_id: denial.tool_use_id.owned(),
                    message: None,
                });
            }
        }
        self.result = Some(ResultLine {
            is_error: line.is_error.0,
            subtype: line.subtype.owned(),
            terminal_reason: line.terminal_reason.owned(),
            status: line.api_error_status,
            text: line.result.owned(),
            text_omitted: cut("result").unwrap_or(0),
            errors: line.errors.0.iter().filter_map(|e| e.owned()).collect(),
            totals: line.usage.0.as_ref().map(TokenCounts::of),
            window: self.reported_window(&line),
            cost_usd: line.total_cost_usd.0,
            num_turns: line.num_turns.0,
            duration_ms: line.duration_ms.0,
            structured_output: line
                .structured_output
                .filter(|_| cut("structured_output").is_none()),
        });
    }

    /// `modelUsage[m].contextWindow` of the session's model: the `init` model's entry, else the
    /// latest message model's, else the entry with the most input (the main model does most
    /// of the work; helpers such as a summarizer appear beside it).
    fn reported_window(&self, line: &StdoutLine<'_>) -> Option<u64> {
        let entries = &line.model_usage.0;
        let named = |name: Option<&str>| {
            entries
                .iter()
                .find(|(key, _)| Some(key.as_ref()) == name)
                .and_then(|(_, usage)| usage.0.as_ref())
        };
        named(self.init_model.as_deref())
            .or_else(|| named(self.model.as_deref()))
            .or_else(|| {
                entries
                    .iter()
                    .filter_map(|(_, usage)| usage.0.as_ref())
                    .max_by_key(|usage| usage.input_tokens.0)
            })
            .and_then(|usage| usage.context_window.0)
    }

    fn outcome(&self) -> RunOutcome {
        let Some(result) = &self.result else {
            return RunOutcome::NoResult;
        };
        if result.is_error == Some(false) {
            return RunOutcome::Completed;
        }
        RunOutcome::Failed(Failure {
            cause: outcome::classify(
                result.terminal_reason.as_deref(),
                result.subtype.as_deref(),
                result.status,
                self.error_class.as_deref(),
            ),
            subtype: result.subtype.clone(),
            terminal_reason: result.terminal_reason.clone(),
            api_error_status: match result.status {
                ApiStatus::Code(code) => u16::try_from(code).ok(),
                _ => None,
            },
            message: failure_message(result),
        })
    }

    fn usage(&self, result: &ResultLine) -> Usage {
        let totals = result.totals.unwrap_or(self.totals);
        let model = self.model.as_deref().or(self.init_model.as_deref());
        let overridden = model.and_then(|m| self.options.windows.overridden(m));
        let mut usage = Usage::tokens(
            totals.input,
            totals.output,
            totals.cache_read,
            totals.cache_creation,
        );
        usage.context_tokens = self.context_tokens.unwrap_or(0);
        usage.context_window = Some(
            overridden
                .or(result.window)
                .unwrap_or_else(|| self.live_window()),
        );
        usage
    }
}

/// A rejected line re-encoded by the scanner, which decodes leniently: serde_json refuses a
/// lone surrogate escape (`\ud83d`, which a JavaScript string cut between the halves of an
/// emoji produces) or invalid UTF-8 in a string it decodes, and a `result` line lost to that
/// would read as "killed". The copy keeps everything, with U+FFFD for what was invalid.
fn repaired(bytes: &[u8]) -> Option<Shrunk> {
    let mut scanner = Shrinker::new(Limits {
        head: bytes.len(),
        tail: 0,
        budget: usize::MAX,
    });
    scanner.feed(bytes);
    scanner.finish()
}

/// The error text of a failed result: its `result` text, else its `errors`.
fn failure_message(result: &ResultLine) -> Option<String> {
    let text = match &result.text {
        Some(text) => text.clone(),
        None if result.errors.is_empty() => return None,
        None => result.errors.join("; "),
    };
    Some(bounded(&text, Failure::MAX_MESSAGE))
}

/// `seconds` since the Unix epoch as a time, if it is one.
fn epoch_seconds(seconds: f64) -> Option<SystemTime> {
    let since = Duration::try_from_secs_f64(seconds).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(since)
}

/// `text` if it has at most `limit` bytes, else its head and tail around an omission line.
fn bounded(text: impl AsRef<str> + Into<String>, limit: usize) -> String {
    if text.as_ref().len() <= limit {
        return text.into();
    }
    let text = text.as_ref();
    let mut head = limit / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - limit / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    elide(&text[..head], (tail - head) as u64, &text[tail..])
}

/// `head`, a line saying `omitted` bytes are missing, and `tail`. The omission has a line of
/// its own, so a marker on the tail's last line stays a whole line.
fn elide(head: &str, omitted: u64, tail: &str) -> String {
    format!("{head}\n[… {omitted} bytes omitted …]\n{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_whole_characters() {
        assert_eq!(bounded("short", 10), "short");
        let text = "αβγδεζηθικ"; // 20 bytes
        assert_eq!(bounded(text, 9), "αβ\n[… 12 bytes omitted …]\nικ");
        assert_eq!(bounded(String::from("owned"), 5), "owned");
    }

    #[test]
    fn epoch_seconds_rejects_what_is_not_a_time() {
        assert_eq!(
            epoch_seconds(1.5),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1500))
        );
        assert_eq!(epoch_seconds(-1.0), None);
        assert_eq!(epoch_seconds(f64::NAN), None);
        assert_eq!(epoch_seconds(f64::INFINITY), None);
    }
}

#[cfg(test)]
mod parser_props;
