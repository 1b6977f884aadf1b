//! Property tests of the stream parser: arbitrary bytes cut into arbitrary reads, and
//! arbitrary JSON values as lines, never panic it, and its memory stays bounded.

use proptest::prelude::*;

use super::{Piece, StreamOptions, StreamParser};
use crate::process::lines::LineSplitter;
use crate::process::lines::strategies::{reads, stream_bytes};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_parser_takes_any_pieces_without_panicking(
        bytes in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
        cap in 1usize..128,
    ) {
        let mut lines = LineSplitter::new(cap);
        let options = StreamOptions::default().string_limits(16, 16).oversized_budget(256);
        let mut parser = StreamParser::new(options);
        for chunk in reads(&bytes, &cuts).0 {
            lines.push(&chunk);
            while let Some(piece) = lines.next() {
                parser.feed(piece, |_| {});
                prop_assert!(parser.retained_bytes() < 64 << 10, "bounded by the options");
            }
        }
        if let Some(piece) = lines.rest() {
            parser.feed(piece, |_| {});
        }
        let _ = parser.finish().agent_exit();
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
