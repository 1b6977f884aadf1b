//! Property tests of the line reader and the stream parser behind it: arbitrary bytes, cut
//! into arbitrary reads, never panic either; the reader's memory stays within its cap; the
//! lines it hands out, put back together, are the input.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};

use super::{CHUNK, LineReader, Piece};
use crate::agent::claude::stream::{StreamOptions, StreamParser};

/// An `AsyncRead` that hands out its bytes in the reads given, each at most the buffer.
struct Reads(VecDeque<Vec<u8>>);

impl AsyncRead for Reads {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut front) = self.0.pop_front() {
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            if n < front.len() {
                self.0.push_front(front.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// `bytes` cut at `cuts` (offsets, in any order).
fn reads(bytes: &[u8], cuts: &[usize]) -> Reads {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = VecDeque::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        if cut > at {
            out.push_back(bytes[at..cut].to_vec());
            at = cut;
        }
    }
    Reads(out)
}

/// Bytes rich in newlines, long runs and JSON-ish text.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"x\"}\n".to_vec()),
        Just(b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n".to_vec()),
        (1usize..300).prop_map(|n| vec![b'a'; n]),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}

fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(fut)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn lines_put_back_together_are_the_input_whatever_the_reads(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
        cap in 1usize..64,
    ) {
        let (rebuilt, max_buffer, teed) = run(async {
            let mut teed = Vec::new();
            let mut lines = LineReader::new(reads(&bytes, &cuts)).max_line(cap).tee(&mut teed);
            let mut rebuilt = Vec::new();
            let mut max_buffer = 0;
            while let Some(piece) = lines.next().await.expect("reads") {
                match piece {
                    Piece::Line(line) => {
                        assert!(line.len() <= cap, "a whole line is at most the cap");
                        rebuilt.extend_from_slice(line);
                        rebuilt.push(b'\n');
                    }
                    Piece::Part(part) => rebuilt.extend_from_slice(part),
                    Piece::LastPart(part) => {
                        rebuilt.extend_from_slice(part);
                        rebuilt.push(b'\n');
                    }
                }
                max_buffer = max_buffer.max(lines.buffer_capacity());
            }
            drop(lines);
            (rebuilt, max_buffer, teed)
        });
        // Every line came back with its newline; the input's last line may have lacked one.
        let mut expected = bytes.clone();
        if !expected.is_empty() && expected.last() != Some(&b'\n') {
            expected.push(b'\n');
        }
        prop_assert_eq!(rebuilt, expected);
        prop_assert_eq!(teed, bytes);
        prop_assert!(max_buffer <= cap + 2 * CHUNK, "buffer {max_buffer} for cap {cap}");
    }

    #[test]
    fn the_parser_takes_any_pieces_without_panicking(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
        cap in 1usize..128,
    ) {
        run(async {
            let mut lines = LineReader::new(reads(&bytes, &cuts)).max_line(cap);
            let options = StreamOptions::default().string_limits(16, 16).oversized_budget(256);
            let mut parser = StreamParser::new(options);
            while let Some(piece) = lines.next().await.expect("reads") {
                parser.feed(piece, |_| {});
                assert!(parser.retained_bytes() < 64 << 10, "bounded by the options");
            }
            let _ = parser.finish().agent_exit();
        });
    }

    #[test]
    fn arbitrary_json_values_as_lines_never_panic_the_parser(value in arbitrary_json()) {
        let mut parser = StreamParser::new(StreamOptions::default());
        let line = serde_json::to_vec(&value).expect("json");
        parser.feed(Piece::Line(&line), |_| {});
        let _ = parser.finish().agent_exit();
    }
}

/// Any JSON value, with the keys the stream uses more likely than chance.
fn arbitrary_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let key = prop_oneof![
        Just("type".to_owned()),
        Just("subtype".to_owned()),
        Just("result".to_owned()),
        Just("is_error".to_owned()),
        Just("message".to_owned()),
        Just("usage".to_owned()),
        Just("content".to_owned()),
        Just("rate_limit_info".to_owned()),
        "[a-z_]{1,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("result".to_owned()),
            Just("assistant".to_owned()),
            any::<String>()
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}
