//! Throughput of the Claude CLI stream parser, against serde_json skipping the same lines
//! (`IgnoredAny`, the least work that still validates every line).
//!
//! Two corpora: every recorded transcript of `fixtures/claude/transcripts/` concatenated 100
//! times, and a synthetic long run (2,000 API calls with text, tool calls, 4 KiB tool results,
//! and a 1 MiB final answer).
//!
//! Run with `cargo bench --bench stream`.

// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::sync::LazyLock;

use divan::counter::BytesCount;
use divan::{Bencher, black_box};
use ralph_loop_agents::agent::claude::stream::{LineReader, Piece, StreamOptions, StreamParser};
use serde_json::json;

fn main() {
    divan::main();
}

const CORPORA: [&str; 2] = ["transcripts", "synthetic"];

/// The corpora, built once for every bench.
static TRANSCRIPTS: LazyLock<Vec<u8>> = LazyLock::new(|| transcripts(100));
static SYNTHETIC: LazyLock<Vec<u8>> = LazyLock::new(|| synthetic(2_000));

fn corpus(name: &str) -> &'static [u8] {
    match name {
        "transcripts" => &TRANSCRIPTS,
        _ => &SYNTHETIC,
    }
}

/// Every recorded transcript, `times` over.
fn transcripts(times: usize) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/claude/transcripts");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("transcripts")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    let one: Vec<u8> = files
        .iter()
        .flat_map(|path| std::fs::read(path).expect("transcript"))
        .collect();
    one.repeat(times)
}

/// A long run shaped like the real ones: per call a text line and a tool-use line of one
/// message, a tool result, and at the end a result line with a 1 MiB answer.
fn synthetic(calls: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut line = |value: serde_json::Value| {
        out.extend_from_slice(value.to_string().as_bytes());
        out.push(b'\n');
    };
    line(
        json!({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-opus-5-5",
        "tools": ["Bash", "Edit", "Read"], "cwd": "/home/dev/repo"}),
    );
    let prose = "The parser reads the line, then checks the \"usage\" of the message.\n".repeat(30);
    let output = "test stream::tests::parses ... ok\n".repeat(120);
    for call in 0..calls {
        let usage = json!({"input_tokens": 3, "output_tokens": 1,
            "cache_read_input_tokens": 1000 + call * 900, "cache_creation_input_tokens": 900});
        let message = |block: serde_json::Value| {
            json!({"type": "assistant", "message": {
            "id": format!("msg_{call}"), "type": "message", "role": "assistant",
            "model": "claude-opus-5-5", "content": [block], "stop_reason": null,
            "usage": usage.clone()}, "parent_tool_use_id": null, "session_id": "s",
            "uuid": "83a4a376-416b-45dd-a282-813f477d7614"})
        };
        line(message(json!({"type": "text", "text": prose})));
        line(message(
            json!({"type": "tool_use", "id": format!("toolu_{call}"), "name": "Bash",
            "input": {"command": "cargo test --all-features 2>&1 | tail -50",
                      "description": "Run the tests"}}),
        ));
        line(
            json!({"type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": format!("toolu_{call}"), "type": "tool_result",
             "content": output, "is_error": false}]},
            "session_id": "s", "tool_use_result": {"stdout": output, "stderr": "",
            "interrupted": false, "isImage": false}}),
        );
    }
    let answer = format!("{}\n<TASK_DONE>", "All tests pass. ".repeat(65_536));
    line(
        json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": calls,
        "result": answer, "session_id": "s", "total_cost_usd": 1.5,
        "usage": {"input_tokens": 3 * calls, "output_tokens": 50 * calls},
        "modelUsage": {"claude-opus-5-5": {"contextWindow": 1_000_000}}}),
    );
    out
}

/// The lines of `bytes`, without their `\n`.
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', bytes).map(move |end| {
        let line = &bytes[start..end];
        start = end + 1;
        line
    })
}

/// The baseline: serde_json validating and skipping each line.
#[divan::bench(args = CORPORA)]
fn serde_ignored_any(bencher: Bencher<'_, '_>, name: &str) {
    let bytes = corpus(name);
    bencher.counter(BytesCount::of_slice(bytes)).bench(|| {
        for line in lines(black_box(bytes)) {
            let _ = black_box(serde_json::from_slice::<serde::de::IgnoredAny>(line));
        }
    });
}

/// For reference: serde_json building a `Value` of each line.
#[divan::bench(args = CORPORA)]
fn serde_value(bencher: Bencher<'_, '_>, name: &str) {
    let bytes = corpus(name);
    bencher.counter(BytesCount::of_slice(bytes)).bench(|| {
        for line in lines(black_box(bytes)) {
            let _ = black_box(serde_json::from_slice::<serde_json::Value>(line));
        }
    });
}

/// The parser alone, fed whole lines.
#[divan::bench(args = CORPORA)]
fn parser(bencher: Bencher<'_, '_>, name: &str) {
    let bytes = corpus(name);
    bencher.counter(BytesCount::of_slice(bytes)).bench(|| {
        let mut parser = StreamParser::new(StreamOptions::default());
        let mut events = 0_usize;
        for line in lines(black_box(bytes)) {
            parser.feed(Piece::Line(line), |_| events += 1);
        }
        black_box((parser.finish(), events))
    });
}

/// The whole path: the bounded reader over the bytes, then the parser.
#[divan::bench(args = CORPORA)]
fn reader_and_parser(bencher: Bencher<'_, '_>, name: &str) {
    let bytes = corpus(name);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    bencher.counter(BytesCount::of_slice(bytes)).bench(|| {
        runtime.block_on(async {
            let reader = LineReader::new(black_box(bytes));
            StreamParser::new(StreamOptions::default())
                .read(reader, |event| {
                    black_box(event);
                })
                .await
        })
    });
}

/// A 64 MiB result line through a 1 MiB cap: the oversized-line scanner.
#[divan::bench]
fn oversized_line(bencher: Bencher<'_, '_>) {
    let text = "All tests pass. \\\"quoted\\\" caf\u{e9}\\n".repeat(2 << 20);
    let line = format!(
        r#"{{"type":"result","is_error":false,"result":"{text}<TASK_DONE>","session_id":"s"}}"#
    );
    let bytes = line.into_bytes();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    bencher.counter(BytesCount::of_slice(&bytes)).bench(|| {
        runtime.block_on(async {
            let reader = LineReader::new(black_box(bytes.as_slice())).max_line(1 << 20);
            StreamParser::new(StreamOptions::default())
                .read(reader, |_| {})
                .await
        })
    });
}
