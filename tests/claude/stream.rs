//! The Claude CLI stream parser against the real CLI's recorded stdout
//! (`fixtures/claude/transcripts/`, described in its README), against edge cases, and with
//! 200 MiB of stdout in bounded memory.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use ralph::agent::{AgentEvent, AgentExit, FailureKind};
use ralph_loop_agents::agent::claude::stream::{
    FailureCause, LineReader, Piece, RunOutcome, StreamOptions, StreamParser, StreamSummary,
};
use ralph_loop_core::signal::{self, TaskSignal};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

fn transcript(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/fixtures/claude/transcripts/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Parses `stdout` with a line cap of `max_line`.
async fn parse_capped(stdout: &[u8], max_line: usize) -> (StreamSummary, Vec<AgentEvent>) {
    let mut events = Vec::new();
    let summary = StreamParser::new(StreamOptions::default())
        .read(LineReader::new(stdout).max_line(max_line), |e| {
            events.push(e)
        })
        .await;
    (summary, events)
}

async fn parse(stdout: &[u8]) -> (StreamSummary, Vec<AgentEvent>) {
    parse_capped(
        stdout,
        ralph_loop_agents::agent::claude::stream::DEFAULT_MAX_LINE,
    )
    .await
}

async fn fixture(name: &str) -> (StreamSummary, Vec<AgentEvent>) {
    parse(&transcript(name)).await
}

fn contexts(events: &[AgentEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage { context_tokens, .. } => Some(*context_tokens),
            _ => None,
        })
        .collect()
}

fn texts(events: &[AgentEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn tools(events: &[AgentEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolUse { name } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

fn failure(summary: &StreamSummary) -> &ralph_loop_agents::agent::claude::stream::Failure {
    summary
        .outcome
        .failure()
        .unwrap_or_else(|| panic!("not a failure: {:?}", summary.outcome))
}

fn final_signal(summary: &StreamSummary) -> TaskSignal {
    signal::parse(summary.final_text.as_deref().unwrap_or_default()).task
}

// ---- Every transcript, as its README describes it. ----

#[tokio::test]
async fn every_transcript_parses_cleanly() {
    for name in crate::support::RECORDED_TRANSCRIPTS {
        let bytes = transcript(name);
        let (summary, events) = parse(&bytes).await;
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(summary.lines, lines, "{name}");
        assert_eq!(summary.bytes, bytes.len() as u64, "{name}");
        assert_eq!(summary.bad_lines, 0, "{name}");
        assert_eq!(summary.oversized_lines, 0, "{name}");
        let id = summary.session_id.clone().expect("session id");
        assert_eq!(events.first(), Some(&AgentEvent::Session { id }), "{name}");
        assert_eq!(summary.model.as_deref(), Some("claude-opus-5-5"), "{name}");
    }
}

#[tokio::test]
async fn tool_flow_done_completes_with_the_marker() {
    let (summary, events) = fixture("tool-flow-done").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.agent_exit(), AgentExit::Completed);
    assert_eq!(
        summary.final_text.as_deref(),
        Some("Created hello.txt with the greeting.\n<TASK_DONE>")
    );
    assert_eq!(final_signal(&summary), TaskSignal::Done);
    assert_eq!(summary.final_text_omitted, 0);
    assert_eq!(
        summary.session_id.as_deref(),
        Some("bd2fbcbf-ece5-49d8-905c-6c81973e1122")
    );
    // Two lines of msg_A (text + tool_use) count once.
    assert_eq!(contexts(&events), [1081, 1171]);
    assert_eq!(tools(&events), ["Bash"]);
    assert_eq!(texts(&events).len(), 2);
    assert_eq!(summary.usage.input_tokens, 2252);
    assert_eq!(summary.usage.output_tokens, 17);
    assert_eq!(summary.usage.context_tokens, 1171);
    assert_eq!(summary.usage.context_window, Some(1_000_000));
    assert_eq!(summary.num_turns, Some(2));
    assert_eq!(summary.duration_ms, Some(591));
    assert!(
        summary
            .cost_usd
            .is_some_and(|c| (c - 0.009348).abs() < 1e-9)
    );
    assert_eq!(summary.api_retries, 0);
    assert!(summary.permission_denials.is_empty());
}

#[tokio::test]
async fn blocked_completes_with_the_blocked_marker() {
    let (summary, _) = fixture("blocked").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(
        final_signal(&summary),
        TaskSignal::Blocked {
            reason: "spec file /nonexistent/spec.md missing".to_owned()
        }
    );
}

#[tokio::test]
async fn max_turns_fails_as_an_attempt() {
    let (summary, _) = fixture("max-turns").await;
    let failure = failure(&summary);
    assert_eq!(failure.cause, FailureCause::MaxTurns);
    assert_eq!(failure.subtype.as_deref(), Some("error_max_turns"));
    assert_eq!(failure.terminal_reason.as_deref(), Some("max_turns"));
    assert_eq!(failure.api_error_status, None);
    assert_eq!(
        failure.message.as_deref(),
        Some("Reached maximum number of turns (2)")
    );
    assert_eq!(summary.final_text, None);
    assert!(matches!(
        summary.agent_exit(),
        AgentExit::Failed {
            kind: FailureKind::Attempt,
            ..
        }
    ));
}

#[tokio::test]
async fn api_error_500_is_transient_despite_subtype_success() {
    let (summary, events) = fixture("api-error-500").await;
    let failure = failure(&summary);
    assert_eq!(failure.cause, FailureCause::ServerError);
    assert_eq!(failure.subtype.as_deref(), Some("success"));
    assert_eq!(failure.terminal_reason.as_deref(), Some("api_error"));
    assert_eq!(failure.api_error_status, Some(500));
    assert!(
        failure
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("API Error: 500"))
    );
    assert_eq!(summary.final_text, None);
    assert_eq!(summary.api_retries, 2);
    // The synthetic error message's zero usage is not a context size.
    assert!(contexts(&events).is_empty());
    let AgentExit::Failed { reason, kind } = summary.agent_exit() else {
        panic!("{:?}", summary.agent_exit());
    };
    assert_eq!(kind, FailureKind::Transient);
    assert!(reason.contains("HTTP 500"), "{reason}");
}

#[tokio::test]
async fn api_error_401_is_fatal() {
    let (summary, _) = fixture("api-error-401").await;
    let failure = failure(&summary);
    assert_eq!(failure.cause, FailureCause::Authentication);
    assert_eq!(failure.api_error_status, Some(401));
    assert_eq!(summary.api_retries, 2);
    assert!(matches!(
        summary.agent_exit(),
        AgentExit::Failed {
            kind: FailureKind::Fatal,
            ..
        }
    ));
}

#[tokio::test]
async fn api_500_then_ok_completes_after_two_retries() {
    let (summary, events) = fixture("api-500-then-ok").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.final_text.as_deref(), Some("recovered <TASK_DONE>"));
    assert_eq!(summary.api_retries, 2);
    let retries: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ApiRetry { .. }))
        .collect();
    assert_eq!(
        retries,
        [
            &AgentEvent::ApiRetry {
                attempt: 1,
                error: Some("server_error".to_owned())
            },
            &AgentEvent::ApiRetry {
                attempt: 2,
                error: Some("overloaded".to_owned())
            },
        ]
    );
}

#[tokio::test]
async fn midstream_error_resume_completes_with_the_second_answer() {
    let (summary, events) = fixture("midstream-error-resume").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(
        summary.final_text.as_deref(),
        Some("second try <TASK_DONE>")
    );
    assert_eq!(texts(&events), ["partial", "second try <TASK_DONE>"]);
    assert_eq!(contexts(&events), [1072, 1137]);
}

#[tokio::test]
async fn sigint_during_tool_fails_although_the_exit_code_was_0() {
    let (summary, _) = fixture("sigint-during-tool").await;
    let failure = failure(&summary);
    assert_eq!(failure.cause, FailureCause::Interrupted);
    assert_eq!(failure.subtype.as_deref(), Some("error_during_execution"));
    assert_eq!(failure.terminal_reason.as_deref(), Some("aborted_tools"));
    assert_eq!(summary.final_text, None);
    assert!(matches!(summary.agent_exit(), AgentExit::Failed { .. }));
}

#[tokio::test]
async fn sigterm_during_tool_has_no_result_line() {
    let (summary, _) = fixture("sigterm-during-tool-no-result").await;
    assert_eq!(summary.outcome, RunOutcome::NoResult);
    assert_eq!(summary.final_text, None);
    assert_eq!(summary.usage.context_tokens, 1072);
    // No result.usage: the totals come from the distinct messages.
    assert_eq!(summary.usage.input_tokens, 1072);
    assert!(matches!(
        summary.agent_exit(),
        AgentExit::Failed {
            kind: FailureKind::Attempt,
            ..
        }
    ));
}

#[tokio::test]
async fn permission_denied_completes_with_one_denial() {
    let (summary, events) = fixture("permission-denied").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.permission_denials.len(), 1);
    let denial = &summary.permission_denials[0];
    assert_eq!(denial.tool, "Bash");
    assert_eq!(
        denial.tool_use_id.as_deref(),
        Some("toolu_94a63f8f8fcb4f679699")
    );
    assert!(
        denial
            .message
            .as_deref()
            .is_some_and(|m| m.contains("needs approval"))
    );
    assert!(events.contains(&AgentEvent::PermissionDenied {
        tool: "Bash".to_owned()
    }));
    assert_eq!(tools(&events), ["Bash", "Bash"]);
}

#[tokio::test]
async fn usage_growth_reports_each_distinct_context_and_result_totals() {
    let (summary, events) = fixture("usage-growth-cached").await;
    assert_eq!(contexts(&events), [1075, 1495, 2288, 3456]);
    assert_eq!(summary.usage.context_tokens, 3456);
    assert_eq!(summary.usage.input_tokens, 12);
    assert_eq!(summary.usage.cache_creation_tokens, 3444);
    assert_eq!(summary.usage.cache_read_tokens, 4858);
    assert_eq!(summary.usage.context_window, Some(1_000_000));
    assert_eq!(summary.usage.context_ratio(), Some(0.003456));
}

#[tokio::test]
async fn autocompact_is_seen_and_the_context_drops() {
    let (summary, events) = fixture("autocompact").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.compactions, 1);
    assert!(events.contains(&AgentEvent::Compacted {
        before: 0.991005,
        after: 0.002542
    }));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Note { message } if message.contains("compacting"))));
    assert_eq!(contexts(&events), [991_003, 12_126]);
    assert_eq!(summary.usage.context_tokens, 12_126);
}

/// Audit row 000-R53: a boundary without `post_tokens` is shown with the next size the CLI
/// reports (a message's usage, else the result's), never as compacted to 0 %; a stream that
/// reports no size after it says so in a note.
#[tokio::test]
async fn a_boundary_without_its_size_takes_the_next_size_the_cli_reports() {
    let lines = |after: &[serde_json::Value]| {
        let mut lines = vec![
            json!({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-sonnet-4-5"}),
            json!({"type": "system", "subtype": "compact_boundary", "session_id": "s",
                "compact_metadata": {"trigger": "manual", "pre_tokens": 180_000}}),
        ];
        lines.extend_from_slice(after);
        lines.iter().map(|l| format!("{l}\n")).collect::<String>()
    };
    let message = json!({"type": "assistant", "session_id": "s", "parent_tool_use_id": null,
        "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [],
            "usage": {"input_tokens": 40_000, "output_tokens": 5}}});
    let result = |usage: serde_json::Value| {
        json!({"type": "result", "subtype": "success", "is_error": false, "result": "",
            "session_id": "s", "usage": usage})
    };
    let compacted = |events: &[AgentEvent]| -> Vec<(f64, f64)> {
        events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Compacted { before, after } => Some((*before, *after)),
                _ => None,
            })
            .collect()
    };

    let (summary, events) = parse(lines(&[message, result(json!({}))]).as_bytes()).await;
    assert_eq!(compacted(&events), [(0.9, 0.2)]);
    assert_eq!(summary.usage.context_tokens, 40_000);

    let usage = json!({"input_tokens": 40_000, "output_tokens": 5});
    let (summary, events) = parse(lines(&[result(usage)]).as_bytes()).await;
    assert_eq!(compacted(&events), [(0.9, 0.2)], "the result's usage");
    assert_eq!(summary.usage.context_tokens, 40_000);

    let (_, events) = parse(lines(&[result(json!({}))]).as_bytes()).await;
    assert_eq!(compacted(&events), []);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Note { message }
        if message.contains("compacted the session at 90% and reported no context size")))
    );
}

#[tokio::test]
async fn partial_messages_stream_events_are_ignored() {
    let (summary, events) = fixture("partial-messages").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.final_text.as_deref(), Some("ok <TASK_DONE>"));
    assert_eq!(texts(&events), ["Checking.", "ok <TASK_DONE>"]);
    assert_eq!(tools(&events), ["Bash"]);
    assert_eq!(contexts(&events), [1072, 1145]);
}

#[tokio::test]
async fn structured_output_is_kept_as_json() {
    let (summary, _) = fixture("structured-output").await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.structured_output, Some(json!({"ok": true})));
    assert_eq!(summary.final_text.as_deref(), Some(r#"{"ok":true}"#));
}

#[tokio::test]
async fn without_json_schema_there_is_no_structured_output() {
    let (summary, _) = fixture("tool-flow-done").await;
    assert_eq!(summary.structured_output, None);
}

// ---- The same transcripts through other read paths give the same summary. ----

/// The summary without the counters that differ between read paths.
fn essentials(mut summary: StreamSummary) -> StreamSummary {
    summary.oversized_lines = 0;
    summary
}

#[tokio::test]
async fn a_tiny_line_cap_sends_every_line_through_the_scanner_and_changes_nothing() {
    for name in crate::support::RECORDED_TRANSCRIPTS {
        let bytes = transcript(name);
        let (normal, normal_events) = parse(&bytes).await;
        let (tiny, tiny_events) = parse_capped(&bytes, 64).await;
        assert!(tiny.oversized_lines > 0, "{name}");
        assert_eq!(essentials(tiny), essentials(normal), "{name}");
        let without_notes = |events: Vec<AgentEvent>| -> Vec<AgentEvent> {
            events
                .into_iter()
                .filter(|e| !matches!(e, AgentEvent::Note { .. } | AgentEvent::OversizedLine))
                .collect()
        };
        assert_eq!(
            without_notes(tiny_events),
            without_notes(normal_events),
            "{name}"
        );
    }
}

/// Yields its bytes a few at a time, and `Pending` between reads.
struct Trickle {
    bytes: Vec<u8>,
    at: usize,
    step: usize,
    ready: bool,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.ready = !this.ready;
        if !this.ready {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = this
            .step
            .min(this.bytes.len() - this.at)
            .min(buf.remaining());
        buf.put_slice(&this.bytes[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn small_reads_and_a_cancelled_next_lose_nothing() {
    let bytes = transcript("permission-denied");
    let (expected, _) = parse(&bytes).await;
    for step in [1, 7, 4096] {
        let trickle = Trickle {
            bytes: bytes.clone(),
            at: 0,
            step,
            ready: false,
        };
        let mut log = Vec::new();
        let mut reader = LineReader::new(trickle).max_line(300).tee(&mut log);
        let mut parser = StreamParser::new(StreamOptions::default());
        let mut cancelled = 0;
        loop {
            // Drops `next` at its first pending read, again and again.
            let next = tokio::select! {
                biased;
                next = reader.next() => next,
                () = std::future::ready(()) => {
                    cancelled += 1;
                    continue;
                }
            };
            match next {
                Ok(Some(piece)) => parser.feed(piece, |_| {}),
                Ok(None) => break,
                Err(e) => panic!("{e}"),
            }
        }
        drop(reader);
        assert!(cancelled > 0);
        assert_eq!(log, bytes, "step {step}");
        assert_eq!(essentials(parser.finish()).outcome, expected.outcome);
    }
}

// ---- Final text, dedup, robustness. ----

fn lines(lines: &[serde_json::Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn assistant(id: &str, block: serde_json::Value, input: u64) -> serde_json::Value {
    json!({"type": "assistant", "session_id": "s", "message": {
        "id": id, "model": "claude-opus-5-5", "content": [block],
        "usage": {"input_tokens": input, "output_tokens": 1,
                  "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}})
}

fn text(text: &str) -> serde_json::Value {
    json!({"type": "text", "text": text})
}

fn tool_use() -> serde_json::Value {
    json!({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cargo test"}})
}

fn success(result: &str) -> serde_json::Value {
    json!({"type": "result", "subtype": "success", "is_error": false, "result": result,
           "session_id": "s", "usage": {"input_tokens": 10, "output_tokens": 2}})
}

#[tokio::test]
async fn two_lines_of_one_message_count_usage_once() {
    let stdout = lines(&[
        assistant("msg_1", text("Let me look."), 1000),
        assistant("msg_1", tool_use(), 1000),
    ]);
    let (summary, events) = parse(&stdout).await;
    assert_eq!(contexts(&events), [1000]);
    assert_eq!(summary.usage.input_tokens, 1000);
    assert_eq!(summary.usage.output_tokens, 1);
    assert_eq!(summary.outcome, RunOutcome::NoResult);
}

#[tokio::test]
async fn a_marker_in_an_earlier_turn_is_not_in_the_final_text() {
    let stdout = lines(&[
        assistant("msg_1", text("I am done.\n<TASK_DONE>"), 1000),
        assistant("msg_1", tool_use(), 1000),
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}}),
        assistant("msg_2", text("Verified."), 1100),
        success("Verified."),
    ]);
    let (summary, events) = parse(&stdout).await;
    assert_eq!(summary.final_text.as_deref(), Some("Verified."));
    assert_eq!(final_signal(&summary), TaskSignal::None);
    assert_eq!(texts(&events), ["I am done.\n<TASK_DONE>", "Verified."]);
}

#[tokio::test]
async fn unknown_lines_fields_and_garbage_are_skipped() {
    let mut stdout = lines(&[
        json!({"type": "system", "subtype": "ui_invalidate", "event": "ui.render", "session_id": "early"}),
        json!({"type": "system", "subtype": "init", "session_id": "early", "model": "claude-sonnet-4-5-20250929"}),
        json!({"type": "hologram", "session_id": "other", "payload": [1, 2, {"x": null}]}),
        json!({"type": "system", "subtype": "teleport", "eta_ms": 3}),
        json!({"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "future_block", "blob": {}}, {"type": "text", "text": "hi", "citations": []}],
            "usage": {"input_tokens": 50_000, "cache_read_input_tokens": "lots", "new_counter": 7}},
            "brand_new_field": {"deep": [true]}}),
    ]);
    stdout.extend_from_slice(b"this is not json\n\n   \n{\"type\": \"assist");
    stdout.extend_from_slice(b"ant\"}\xff\xfe\n{\"unterminated\": \"\xc3\x28\n");
    stdout.extend_from_slice(b"[1, 2]\n42\n");
    stdout.extend_from_slice(&lines(&[json!({"type": "result", "subtype": "success",
        "is_error": false, "result": "done", "num_turns": "two", "usage": [],
        "api_error_status": "n/a", "modelUsage": {"claude-sonnet-4-5-20250929": {"contextWindow": 200_000}},
        "permission_denials": "none", "structured_output": null})]));
    stdout.extend_from_slice(b"{\"type\":\"result\",\"is_error\":tr"); // cut off mid-line
    let (summary, events) = parse(&stdout).await;
    assert_eq!(summary.session_id.as_deref(), Some("early"));
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.final_text.as_deref(), Some("done"));
    assert_eq!(summary.num_turns, None);
    assert_eq!(summary.structured_output, None);
    assert_eq!(summary.usage.context_window, Some(200_000));
    // A wrongly typed counter reads as absent; the line still counts.
    assert_eq!(contexts(&events), [50_000]);
    assert_eq!(texts(&events), ["hi"]);
    assert_eq!(summary.bad_lines, 6);
    assert_eq!(summary.bad_line_heads[0], "this is not json");
    assert!(summary.bad_line_heads[1].starts_with("{\"type\": \"assistant\"}\u{fffd}"));
    let notes = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Note { .. }))
        .count();
    assert_eq!(notes, 5);
}

#[tokio::test]
async fn a_lone_surrogate_or_invalid_utf8_in_the_result_does_not_lose_it() {
    let mut stdout = Vec::new();
    stdout.extend_from_slice(
        br#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"cut \ud83d"#,
    );
    stdout.extend_from_slice(b"\xff\"}],\"usage\":{\"input_tokens\":9}}}\n");
    stdout.extend_from_slice(br#"{"type":"result","is_error":false,"result":"emoji \ud83d cut\n<TASK_DONE>","num_turns":1}"#);
    stdout.push(b'\n');
    let (summary, events) = parse(&stdout).await;
    assert_eq!(summary.bad_lines, 0);
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(
        summary.final_text.as_deref(),
        Some("emoji \u{fffd} cut\n<TASK_DONE>")
    );
    assert_eq!(final_signal(&summary), TaskSignal::Done);
    assert_eq!(texts(&events), ["cut \u{fffd}\u{fffd}"]);
    assert_eq!(contexts(&events), [9]);
}

#[tokio::test]
async fn a_subagent_does_not_change_the_session_context_or_model() {
    let mut sub = assistant("sub_1", text("exploring"), 50_000);
    sub["parent_tool_use_id"] = json!("toolu_task");
    sub["message"]["model"] = json!("claude-haiku-4-5");
    let stdout = lines(&[assistant("msg_1", tool_use(), 2_000), sub]);
    let (summary, events) = parse(&stdout).await;
    assert_eq!(contexts(&events), [2_000]);
    assert_eq!(summary.usage.context_tokens, 2_000);
    assert_eq!(summary.usage.input_tokens, 52_000);
    assert_eq!(summary.model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(summary.usage.context_window, Some(1_000_000));
}

#[test]
fn reading_is_send_so_it_can_be_spawned() {
    fn send<T: Send>(_: &T) {}
    let reader = LineReader::new(tokio::io::empty()).tee(tokio::io::sink());
    let read = StreamParser::new(StreamOptions::default()).read(reader, |_| {});
    send(&read);
}

#[tokio::test]
async fn a_result_without_is_error_is_never_success() {
    let stdout = lines(&[json!({"type": "result", "subtype": "success", "result": "<TASK_DONE>"})]);
    let (summary, _) = parse(&stdout).await;
    assert_eq!(failure(&summary).cause, FailureCause::Unknown);
    assert_eq!(summary.final_text, None);
}

#[tokio::test]
async fn an_empty_stream_has_no_result() {
    let (summary, events) = parse(b"").await;
    assert_eq!(summary.outcome, RunOutcome::NoResult);
    assert_eq!(summary.session_id, None);
    assert!(events.is_empty());
}

#[tokio::test]
async fn a_rejected_rate_limit_yields_its_reset_time() {
    let resets_at = 1_778_565_600_u64;
    let stdout = lines(&[
        json!({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "resetsAt": 1}}),
        json!({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed_warning",
            "resetsAt": 2, "rateLimitType": "seven_day"}}),
        json!({"type": "rate_limit_event", "session_id": "s", "rate_limit_info": {
            "status": "rejected", "resetsAt": resets_at, "rateLimitType": "five_hour",
            "overageStatus": "rejected", "isUsingOverage": false}}),
        json!({"type": "assistant", "message": {"id": "e1", "model": "<synthetic>",
            "content": [{"type": "text", "text": "You've hit your limit · resets 2pm"}],
            "usage": {"input_tokens": 0}}, "error": "rate_limit", "is_api_error_message": true}),
        json!({"type": "result", "subtype": "success", "is_error": true,
            "terminal_reason": "api_error", "api_error_status": 429,
            "result": "You've hit your limit · resets 2pm"}),
    ]);
    let (summary, events) = parse(&stdout).await;
    let until = SystemTime::UNIX_EPOCH + Duration::from_secs(resets_at);
    assert_eq!(summary.rate_limited_until, Some(until));
    let limited: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::RateLimited { until, limit, .. } => Some((*until, limit.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(limited, [(until, Some("five_hour".to_owned()))]);
    assert_eq!(failure(&summary).cause, FailureCause::RateLimited);
    assert_eq!(summary.agent_exit(), AgentExit::RateLimited { until });
}

#[tokio::test]
async fn a_failing_log_does_not_stop_the_parse() {
    struct Broken;
    impl AsyncWrite for Broken {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Err(io::Error::other("disk full")))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
    let bytes = transcript("tool-flow-done");
    let summary = StreamParser::new(StreamOptions::default())
        .read(LineReader::new(bytes.as_slice()).tee(Broken), |_| {})
        .await;
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.log_error.as_deref(), Some("disk full"));
}

#[tokio::test]
async fn a_long_text_event_keeps_its_head_and_tail() {
    let long = format!("{}\n<TASK_DONE>", "x".repeat(100_000));
    let stdout = lines(&[assistant("m", text(&long), 1)]);
    let (_, events) = parse(&stdout).await;
    let text = texts(&events)[0];
    assert!(text.len() < 5_000, "{}", text.len());
    assert!(text.ends_with("\n<TASK_DONE>"));
    assert!(text.contains("bytes omitted"));
}

// ---- 200 MiB of stdout in bounded memory. ----

/// A stream of `prefix`, `len` bytes of filler text, `suffix`, made up as it is read.
struct Generated {
    parts: Vec<Segment>,
}

enum Segment {
    Bytes(Vec<u8>, usize),
    Filler(u64),
}

impl Generated {
    fn line(prefix: &str, filler: u64, suffix: &str) -> Vec<Segment> {
        vec![
            Segment::Bytes(prefix.as_bytes().to_vec(), 0),
            Segment::Filler(filler),
            Segment::Bytes(suffix.as_bytes().to_vec(), 0),
        ]
    }
}

/// Model-like text: words, an escaped newline and quote now and then, a multi-byte char.
const FILLER: &[u8] = "lorem ipsum dolor sit amet \\n \\\"quoted\\\" caf\u{e9} ".as_bytes();

impl AsyncRead for Generated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while let Some(segment) = self.parts.first_mut() {
            match segment {
                Segment::Bytes(bytes, at) if *at < bytes.len() => {
                    let n = (bytes.len() - *at).min(buf.remaining());
                    buf.put_slice(&bytes[*at..*at + n]);
                    *at += n;
                    return Poll::Ready(Ok(()));
                }
                Segment::Filler(left) if *left > 0 => {
                    // Whole filler units only, so no escape or character is split.
                    let units = (buf.remaining() / FILLER.len()).max(1) as u64;
                    let units = units.min(left.div_ceil(FILLER.len() as u64));
                    for _ in 0..units {
                        buf.put_slice(FILLER);
                    }
                    *left = left.saturating_sub(units * FILLER.len() as u64);
                    return Poll::Ready(Ok(()));
                }
                _ => {
                    self.parts.remove(0);
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// This process's peak resident memory, in KiB (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn two_hundred_mib_of_stdout_in_bounded_memory() {
    const MIB: u64 = 1 << 20;
    let mut parts = Generated::line(
        r#"{"type":"system","subtype":"init","session_id":"big","model":"claude-opus-5-5"}"#,
        0,
        "\n",
    );
    parts.extend(Generated::line(
        r#"{"type":"assistant","message":{"id":"m1","model":"claude-opus-5-5","content":[{"type":"text","text":""#,
        100 * MIB,
        r#"\n<TASK_DONE>"}],"usage":{"input_tokens":3,"cache_read_input_tokens":40000,"cache_creation_input_tokens":7}},"session_id":"big"}"#,
    ));
    parts.push(Segment::Bytes(b"\n".to_vec(), 0));
    // The result line: the text first, the outcome fields after it.
    parts.extend(Generated::line(
        r#"{"type":"result","subtype":"success","result":""#,
        100 * MIB,
        r#"\n<TASK_DONE>","is_error":false,"num_turns":1,"usage":{"input_tokens":3,"output_tokens":26000000},"modelUsage":{"claude-opus-5-5":{"contextWindow":1000000}},"session_id":"big"}"#,
    ));
    parts.push(Segment::Bytes(b"\n".to_vec(), 0));

    let rss_before = peak_rss_kib();
    let mut reader = LineReader::new(Generated { parts }).max_line(1 << 20);
    let mut parser = StreamParser::new(StreamOptions::default());
    let mut peak = 0;
    let mut events = Vec::new();
    while let Some(piece) = reader.next().await.expect("read") {
        parser.feed(piece, |e| events.push(e));
        peak = peak.max(reader.buffer_capacity() + parser.retained_bytes());
    }
    let summary = parser.finish();

    // What the reader and the parser hold never came near the 100 MiB lines.
    assert!(peak < 4 << 20, "held {peak} bytes");
    // The process as a whole neither (other tests run beside this one, hence the slack; a
    // panicking one symbolizes its backtrace, which alone can cost 100 MB).
    if let (Some(before), Some(after)) = (rss_before, peak_rss_kib()) {
        assert!(
            after - before < 64 << 10,
            "peak RSS grew by {} KiB",
            after - before
        );
    }
    assert!(reader.bytes_read() > 200 * MIB);
    assert_eq!(summary.oversized_lines, 2);
    assert_eq!(summary.outcome, RunOutcome::Completed);
    assert_eq!(summary.session_id.as_deref(), Some("big"));
    assert_eq!(summary.usage.context_tokens, 40_010);
    assert_eq!(summary.usage.output_tokens, 26_000_000);
    assert_eq!(summary.num_turns, Some(1));
    let text = summary.final_text.as_deref().expect("final text");
    assert!(text.len() < 200_000, "{}", text.len());
    assert!(
        text.ends_with("\n<TASK_DONE>"),
        "{}",
        &text[text.len() - 100..]
    );
    assert!(text.starts_with("lorem ipsum dolor sit amet \n \"quoted\" café"));
    // Counted decoded: each `\n` or `\"` escape of the source is one byte.
    assert!(summary.final_text_omitted > 90 * MIB);
    assert_eq!(signal::parse(text).task, TaskSignal::Done);
    let texts = texts(&events);
    assert_eq!(texts.len(), 1);
    assert!(texts[0].ends_with("\n<TASK_DONE>"));
}

#[tokio::test]
async fn an_oversized_line_cut_off_by_the_end_of_the_stream_is_a_bad_line() {
    let mut stdout = lines(&[assistant("m", text("hi"), 5)]);
    stdout.extend_from_slice(br#"{"type":"result","is_error":false,"result":""#);
    stdout.extend(std::iter::repeat_n(b'y', 10_000));
    let (summary, _) = parse_capped(&stdout, 1000).await;
    assert_eq!(summary.outcome, RunOutcome::NoResult);
    assert_eq!(summary.bad_lines, 1);
    assert!(summary.bad_line_heads[0].starts_with(r#"{"type":"result""#));
}

#[tokio::test]
async fn pieces_of_an_oversized_line_never_exceed_the_buffer() {
    let mut stdout = vec![b'a'; 300_000];
    stdout.push(b'\n');
    stdout.extend_from_slice(b"short\n");
    let mut reader = LineReader::new(stdout.as_slice()).max_line(1000);
    let mut total = 0;
    let mut kinds = Vec::new();
    while let Some(piece) = reader.next().await.expect("read") {
        match piece {
            Piece::Part(bytes) => {
                total += bytes.len();
                kinds.push("part");
            }
            Piece::LastPart(bytes) => {
                total += bytes.len();
                kinds.push("last");
            }
            Piece::Line(bytes) => kinds.push(if bytes == b"short" { "short" } else { "line" }),
        }
        assert!(reader.buffer_capacity() <= 1000 + (64 << 10));
    }
    assert_eq!(total, 300_000);
    assert_eq!(kinds.last(), Some(&"short"));
    assert_eq!(kinds.iter().filter(|k| **k == "last").count(), 1);
}
