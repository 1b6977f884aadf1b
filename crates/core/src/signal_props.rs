//! Property tests of the marker parser: hostile final answers never panic it, and the rules
//! of the [module docs](super) hold for generated answers, not only for the examples.

use proptest::prelude::*;

use super::{TaskSignal, last_line, parse};

/// Text that can hold no marker and no fence: no `<`, no backtick, no `~`, no `RALPH_DONE`
/// (its letters are upper case; this is lower case and punctuation).
fn plain() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9 .,;:!?'\"()\\-\\n\\r\\t]{0,200}").expect("regex")
}

/// Non-empty text for one line: something that is not whitespace, and no newline.
fn words() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9.,:!?]{1,30}").expect("regex")
}

/// Anything that could trip a parser: markers, fences, quotes, entities, CR, NUL, unicode.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<TASK_DONE>".to_owned()),
        Just("<TASK_BLOCKED reason=\"".to_owned()),
        Just("\">".to_owned()),
        Just("<TASK_BLOCKED>".to_owned()),
        Just("RALPH_DONE".to_owned()),
        Just("PLAN_INVALIDATION: ".to_owned()),
        Just("```".to_owned()),
        Just("~~~".to_owned()),
        Just("&quot;&amp;&#39;&#".to_owned()),
        Just("\r\n".to_owned()),
        Just("\n".to_owned()),
        Just("\0".to_owned()),
        Just("> ".to_owned()),
        any::<String>(),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_answers_never_panic(text in hostile()) {
        let _ = parse(&text);
        let _ = last_line(&text);
    }

    #[test]
    fn a_huge_line_never_panics(n in 0usize..200_000, tail in hostile()) {
        let text = "x".repeat(n) + &tail;
        let _ = parse(&text);
    }

    #[test]
    fn the_marker_alone_on_the_last_line_of_plain_text_is_done(
        text in plain(),
        pad in "[ \t]{0,3}",
        trailing in "[ \t\r\n]{0,5}",
    ) {
        let answer = format!("{text}\n{pad}<TASK_DONE>{pad}{trailing}");
        prop_assert_eq!(parse(&answer).task, TaskSignal::Done);
        prop_assert_eq!(last_line(&answer), Some("<TASK_DONE>"));
    }

    #[test]
    fn the_marker_in_a_sentence_or_a_quote_is_not_done(
        text in plain(),
        before in words(),
        after in words(),
    ) {
        for line in [
            format!("{before} <TASK_DONE>"),
            format!("<TASK_DONE> {after}"),
            format!("{before}<TASK_DONE>{after}"),
            "> <TASK_DONE>".to_owned(),
            "`<TASK_DONE>`".to_owned(),
            "- <TASK_DONE>".to_owned(),
        ] {
            let answer = format!("{text}\n{line}\n");
            prop_assert_ne!(parse(&answer).task, TaskSignal::Done, "{:?}", answer);
        }
    }

    #[test]
    fn the_marker_followed_by_more_text_is_not_done(text in plain(), later in words()) {
        let answer = format!("{text}\n<TASK_DONE>\n{later}");
        prop_assert_ne!(parse(&answer).task, TaskSignal::Done);
    }

    #[test]
    fn the_marker_inside_a_fence_is_not_done(
        text in plain(),
        fence in prop_oneof![Just("```"), Just("~~~"), Just("```rust")],
        closed in any::<bool>(),
    ) {
        let close = if closed { format!("\n{}", &fence[..3]) } else { String::new() };
        let answer = format!("{text}\n{fence}\n<TASK_DONE>{close}");
        prop_assert_ne!(parse(&answer).task, TaskSignal::Done, "{:?}", answer);
    }

    #[test]
    fn a_blocked_line_keeps_its_reason(text in plain(), reason in words()) {
        let answer = format!("{text}\n<TASK_BLOCKED reason=\"{reason}\">\n{text}");
        prop_assert_eq!(parse(&answer).task, TaskSignal::Blocked { reason });
    }
}
