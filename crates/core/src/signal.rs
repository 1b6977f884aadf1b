//! The one marker parser: `<TASK_DONE>`, `<TASK_BLOCKED reason="…">`,
//! `<TASK_QUESTION question="…">`, `RALPH_DONE`, `PLAN_INVALIDATION: <reason>`.
//!
//! Other Ralph loops ended early because the model echoed its instructions (which contain the
//! promise tag), mentioned the tag in prose, or because a regex ran on raw JSON lines. Here a
//! marker counts only as a **whole line of the agent's final answer** — the caller passes the
//! final answer text (the `result` of a successful run), never the transcript or raw JSON.
//!
//! # Rules
//!
//! * Lines are split on `\n`. A line is compared after trimming surrounding whitespace, so
//!   leading and trailing spaces and the `\r` of CRLF are ignored. Nothing else may share the
//!   line: a marker in a sentence, after a `> ` quote prefix, in a list item or in backticks
//!   is text.
//! * `<TASK_DONE>`, `<TASK_QUESTION question="…">` and `RALPH_DONE` count only as the
//!   **last non-empty line**. A question's text is read as a blocked line's reason is
//!   (`question='…'` too, the same entities); a question with no text is no marker.
//! * `<TASK_BLOCKED reason="…">` counts as any line. The reason is everything between
//!   `reason="` and the final `">`, so quotes inside it survive; `reason='…'` works the same
//!   way. The entities `&quot; &amp; &lt; &gt; &#39;` are decoded, in one pass.
//!   `<TASK_BLOCKED>` alone is blocked with an empty reason, for which the engine substitutes
//!   a default.
//! * `PLAN_INVALIDATION: <reason>` counts as any line whose reason (trimmed) is not empty.
//! * Lines in a fenced code block (```` ``` ```` or `~~~`, at most three spaces of indent, an
//!   optional info string; an unclosed fence runs to the end) never count. A fence line is
//!   not a marker either, so an answer that ends inside or with a fence is never done.
//! * `<TASK_DONE>` or a question with any `<TASK_BLOCKED …>` line is
//!   [`TaskSignal::Conflict`]. Of several
//!   blocked lines the last one's reason wins; of several plan invalidations the first.
//! * Markers are case-sensitive and exact: `<task_done>`, `<TASK_DONE/>`, `</TASK_DONE>` and
//!   `<TASK_DONE>.` are text.
//!
//! # Examples
//!
//! ```
//! use ralph_loop_core::signal::{parse, TaskSignal};
//!
//! // Counts: the marker alone on the last line.
//! assert_eq!(parse("All tests pass.\n<TASK_DONE>\n").task, TaskSignal::Done);
//!
//! // Does not count: an echo of the instructions, a mention, a later line of prose.
//! assert_eq!(parse("When done, output exactly: <TASK_DONE>").task, TaskSignal::None);
//! assert_eq!(parse("`<TASK_DONE>` is the marker.").task, TaskSignal::None);
//! assert_eq!(parse("<TASK_DONE>\nLet me check one more thing.").task, TaskSignal::None);
//!
//! // Does not count: inside a code fence.
//! assert_eq!(parse("```\n<TASK_DONE>\n```").task, TaskSignal::None);
//! ```
//!
//! The parser is a single pass over the text; it allocates only the reasons it returns and
//! never panics.

/// What an agent's final answer says about its task.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSignal {
    /// No marker.
    None,
    /// `<TASK_DONE>` as the last non-empty line.
    Done,
    /// `<TASK_BLOCKED reason="…">` as a whole line.
    Blocked {
        /// The reason, unescaped. Empty for a bare `<TASK_BLOCKED>` (or `reason=""`); the
        /// engine substitutes a default reason then.
        reason: String,
    },
    /// `<TASK_QUESTION question="…">` as the last non-empty line: the agent needs a
    /// person's answer to go on.
    Question {
        /// The question, unescaped; never empty.
        question: String,
    },
    /// Markers that contradict each other; counts as neither.
    Conflict,
}

impl TaskSignal {
    /// Whether the answer claims the task is done (and nothing contradicts it).
    ///
    /// ```
    /// use ralph_loop_core::signal::parse;
    ///
    /// assert!(parse("<TASK_DONE>").task.is_done());
    /// assert!(!parse("<TASK_BLOCKED reason=\"no db\">\n<TASK_DONE>").task.is_done());
    /// ```
    #[must_use]
    pub fn is_done(&self) -> bool {
        matches!(self, TaskSignal::Done)
    }

    /// The reason, if the answer says the task is blocked (and nothing contradicts it).
    ///
    /// ```
    /// use ralph_loop_core::signal::parse;
    ///
    /// let markers = parse("<TASK_BLOCKED reason='needs an API key'>");
    /// assert_eq!(markers.task.blocked_reason(), Some("needs an API key"));
    /// assert_eq!(parse("<TASK_BLOCKED>").task.blocked_reason(), Some(""));
    /// assert_eq!(parse("I am blocked.").task.blocked_reason(), None);
    /// ```
    #[must_use]
    pub fn blocked_reason(&self) -> Option<&str> {
        match self {
            TaskSignal::Blocked { reason } => Some(reason),
            _ => None,
        }
    }
}

/// Every marker found in one final answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Markers {
    /// The task marker.
    pub task: TaskSignal,
    /// `RALPH_DONE` as the last non-empty line.
    pub ralph_done: bool,
    /// The reason of a `PLAN_INVALIDATION: <reason>` line.
    pub plan_invalidation: Option<String>,
}

const TASK_DONE: &str = "<TASK_DONE>";
const RALPH_DONE: &str = "RALPH_DONE";
const TASK_BLOCKED: &str = "<TASK_BLOCKED";
const TASK_QUESTION: &str = "<TASK_QUESTION";
const PLAN_INVALIDATION: &str = "PLAN_INVALIDATION:";

/// Parses the markers of an agent's final answer; see the module docs for the rules.
///
/// ```
/// use ralph_loop_core::signal::{parse, TaskSignal};
///
/// let answer = "The schema needs a migration first.\n\
///               <TASK_BLOCKED reason=\"migration &quot;0042&quot; is missing\">\n\
///               PLAN_INVALIDATION: the plan edits the wrong crate\n";
/// let markers = parse(answer);
/// assert_eq!(markers.task.blocked_reason(), Some("migration \"0042\" is missing"));
/// assert_eq!(markers.plan_invalidation.as_deref(), Some("the plan edits the wrong crate"));
/// assert!(!markers.ralph_done);
///
/// // Not whole lines, so none of these count.
/// let prose = "> <TASK_DONE>\n- PLAN_INVALIDATION: x\nSay RALPH_DONE when finished.";
/// assert_eq!(parse(prose).task, TaskSignal::None);
/// assert_eq!(parse(prose).plan_invalidation, None);
/// assert!(!parse(prose).ralph_done);
/// ```
#[must_use]
pub fn parse(final_answer: &str) -> Markers {
    let scan = AnswerScan::of(final_answer);
    let done = scan.last == Some(TASK_DONE);
    let question = scan
        .last
        .and_then(|line| quoted_attribute(line, TASK_QUESTION, "question"))
        .filter(|raw| !raw.trim().is_empty());
    let task = match (done, question, scan.blocked) {
        (true, _, Some(_)) | (_, Some(_), Some(_)) => TaskSignal::Conflict,
        (true, _, None) => TaskSignal::Done,
        (false, Some(raw), None) => TaskSignal::Question {
            question: decode_entities(raw).trim().to_owned(),
        },
        (false, None, Some(raw)) => TaskSignal::Blocked {
            reason: decode_entities(raw),
        },
        (false, None, None) => TaskSignal::None,
    };
    Markers {
        task,
        ralph_done: scan.last == Some(RALPH_DONE),
        plan_invalidation: scan.plan.map(str::to_owned),
    }
}

/// The last non-empty line of a final answer, trimmed, by the same rules as the markers
/// (`None` when the answer ends inside or with a code fence). A thread's promise tag counts
/// only when it is this line.
///
/// ```
/// use ralph_loop_core::signal::last_line;
///
/// assert_eq!(last_line("All done.\nSHIPPED\n\n"), Some("SHIPPED"));
/// assert_eq!(last_line("Print SHIPPED when done."), Some("Print SHIPPED when done."));
/// assert_eq!(last_line("```\nSHIPPED\n```"), None);
/// ```
#[must_use]
#[cfg(any(feature = "specs", feature = "threads"))]
pub fn last_line(final_answer: &str) -> Option<&str> {
    AnswerScan::of(final_answer).last
}

/// What one pass over the answer found, as slices of it (nothing is allocated yet).
#[derive(Debug, Default)]
struct AnswerScan<'a> {
    /// The last non-empty line, trimmed; `None` if it is in a fence or is a fence line.
    last: Option<&'a str>,
    /// The raw (still escaped) reason of the last blocked line.
    blocked: Option<&'a str>,
    /// The reason of the first plan invalidation line.
    plan: Option<&'a str>,
}

impl<'a> AnswerScan<'a> {
    fn of(text: &'a str) -> Self {
        let mut scan = AnswerScan::default();
        let mut fence: Option<Fence> = None;
        for raw in text.split('\n') {
            let line = raw.trim();
            if let Some(open) = fence {
                if open.is_closed_by(raw) {
                    fence = None;
                }
                // Fenced and fence lines are never markers, but they are still lines: a
                // marker above them is not the last line.
                if !line.is_empty() {
                    scan.last = None;
                }
            } else if let Some(open) = Fence::opened_by(raw) {
                fence = Some(open);
                scan.last = None;
            } else if !line.is_empty() {
                scan.see(line);
            }
        }
        scan
    }

    /// Records a trimmed, non-empty line outside any fence.
    fn see(&mut self, line: &'a str) {
        self.last = Some(line);
        if let Some(reason) = blocked_reason(line) {
            self.blocked = Some(reason);
        } else if self.plan.is_none() {
            self.plan = plan_reason(line);
        }
    }
}

/// The raw reason of a `<TASK_BLOCKED …>` line: `""` for a bare tag, otherwise what lies
/// between `reason="` and the final `">` (or the same with single quotes).
fn blocked_reason(line: &str) -> Option<&str> {
    if line.strip_prefix(TASK_BLOCKED) == Some(">") {
        return Some("");
    }
    quoted_attribute(line, TASK_BLOCKED, "reason")
}

/// The raw value of a tag's one attribute, `<TAG name="value">` (or with single quotes):
/// what lies between the opening quote and the final quote and `>`, so quotes inside it
/// survive.
fn quoted_attribute<'a>(line: &'a str, tag: &str, name: &str) -> Option<&'a str> {
    let quoted = line
        .strip_prefix(tag)?
        .strip_prefix(' ')?
        .strip_prefix(name)?
        .strip_prefix('=')?;
    let inner = |open: &str, close: &str| quoted.strip_prefix(open)?.strip_suffix(close);
    inner("\"", "\">").or_else(|| inner("'", "'>"))
}

/// The trimmed reason of a `PLAN_INVALIDATION: <reason>` line, if it has one.
fn plan_reason(line: &str) -> Option<&str> {
    let reason = line.strip_prefix(PLAN_INVALIDATION)?.trim();
    (!reason.is_empty()).then_some(reason)
}

/// The entities an agent (or a template engine) may have used inside an attribute value.
const ENTITIES: [(&str, char); 5] = [
    ("&quot;", '"'),
    ("&amp;", '&'),
    ("&lt;", '<'),
    ("&gt;", '>'),
    ("&#39;", '\''),
];

/// Decodes [`ENTITIES`] in one left-to-right pass, so `&amp;quot;` becomes `&quot;` and not
/// `"`. Anything else that starts with `&` is kept as written.
fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let (decoded, len) = ENTITIES
            .iter()
            .find(|(name, _)| rest.starts_with(name))
            .map_or(('&', 1), |&(name, ch)| (ch, name.len()));
        out.push(decoded);
        // `&` and every entity name are ASCII, so `len` ends on a char boundary.
        rest = &rest[len..];
    }
    out.push_str(rest);
    out
}

/// Follows fenced code blocks line by line, with the same rules as [`parse`], for readers of
/// other markdown (the progress file) that must skip what is inside a fence.
#[derive(Debug, Default)]
pub struct FenceTracker {
    open: Option<Fence>,
}

impl FenceTracker {
    /// Whether `raw` (one line) is code: a fence line, or a line inside a fence.
    pub fn is_code(&mut self, raw: &str) -> bool {
        if let Some(open) = self.open {
            if open.is_closed_by(raw) {
                self.open = None;
            }
            true
        } else if let Some(open) = Fence::opened_by(raw) {
            self.open = Some(open);
            true
        } else {
            false
        }
    }
}

/// Whether `marker` is a whole line of `text` (trimmed, anywhere, outside fenced code) — the
/// rule for `RALPH_DONE` in a progress file's Status section.
///
/// ```
/// use ralph_loop_core::signal::is_marker_line;
///
/// assert!(is_marker_line("In progress\nRALPH_DONE\n", "RALPH_DONE"));
/// assert!(!is_marker_line("Write RALPH_DONE when done", "RALPH_DONE"));
/// assert!(!is_marker_line("```\nRALPH_DONE\n```", "RALPH_DONE"));
/// ```
#[must_use]
pub fn is_marker_line(text: &str, marker: &str) -> bool {
    let mut fences = FenceTracker::default();
    text.split('\n')
        .any(|raw| !fences.is_code(raw) && raw.trim() == marker)
}

/// An open fenced code block: its fence character and how long the opening run was.
#[derive(Clone, Copy, Debug)]
struct Fence {
    ch: u8,
    len: usize,
}

impl Fence {
    /// The fence a line opens, following CommonMark: a backtick fence's info string may not
    /// contain a backtick (```` ```x``` ```` on one line is inline code, not a fence).
    fn opened_by(raw: &str) -> Option<Fence> {
        let (ch, len, info) = fence_run(raw)?;
        if ch == b'`' && info.contains('`') {
            return None;
        }
        Some(Fence { ch, len })
    }

    /// Whether a line closes this fence: the same character, a run at least as long, and
    /// nothing but whitespace after it.
    fn is_closed_by(self, raw: &str) -> bool {
        matches!(fence_run(raw), Some((ch, len, rest))
            if ch == self.ch && len >= self.len && rest.trim().is_empty())
    }
}

/// A run of three or more backticks or tildes after at most three spaces: the character,
/// the run's length and the rest of the line.
fn fence_run(raw: &str) -> Option<(u8, usize, &str)> {
    let indent = raw.bytes().take(4).take_while(|&b| b == b' ').count();
    if indent > 3 {
        return None;
    }
    // Spaces, backticks and tildes are ASCII, so both slices below fall on char boundaries.
    let body = &raw[indent..];
    let ch = *body.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = body.bytes().take_while(|&b| b == ch).count();
    (len >= 3).then_some((ch, len, &body[len..]))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn markers(task: TaskSignal) -> Markers {
        Markers {
            task,
            ralph_done: false,
            plan_invalidation: None,
        }
    }

    fn none() -> Markers {
        markers(TaskSignal::None)
    }

    fn done() -> Markers {
        markers(TaskSignal::Done)
    }

    fn conflict() -> Markers {
        markers(TaskSignal::Conflict)
    }

    fn blocked(reason: &str) -> Markers {
        markers(TaskSignal::Blocked {
            reason: reason.to_owned(),
        })
    }

    fn question(text: &str) -> Markers {
        markers(TaskSignal::Question {
            question: text.to_owned(),
        })
    }

    fn ralph_done() -> Markers {
        Markers {
            ralph_done: true,
            ..none()
        }
    }

    fn plan(reason: &str) -> Markers {
        Markers {
            plan_invalidation: Some(reason.to_owned()),
            ..none()
        }
    }

    /// The completion section of the task prompt, as a model might quote it back.
    const ECHOED_PROMPT: &str = "You asked me to finish like this:\n\n\
        ## Completion\n\n\
        When done, output exactly: <TASK_DONE>\n\
        If blocked, output: <TASK_BLOCKED reason=\"...\">\n\n\
        I will start with the schema.";

    #[rstest]
    // What counts.
    #[case::marker_alone("<TASK_DONE>", done())]
    #[case::marker_after_prose("Implemented and tested.\n\n<TASK_DONE>\n", done())]
    #[case::crlf("Done.\r\n\r\n<TASK_DONE>\r\n", done())]
    #[case::trailing_spaces("Done.\n<TASK_DONE>   \t\n   \n\n", done())]
    #[case::leading_spaces("Done.\n   <TASK_DONE>", done())]
    #[case::after_closed_fence("```rust\nlet x = 1;\n```\n<TASK_DONE>", done())]
    #[case::inline_code_is_not_a_fence("Ran ```cargo test```.\n<TASK_DONE>", done())]
    #[case::four_space_indent_is_not_a_fence("    ```\n<TASK_DONE>", done())]
    // Mentions, echoes and quotations.
    #[case::marker_in_sentence("I am finished <TASK_DONE> now.", none())]
    #[case::marker_at_end_of_sentence("Everything is green, so: <TASK_DONE>", none())]
    #[case::echoed_instruction("When done, output exactly: <TASK_DONE>", none())]
    #[case::echoed_prompt_section(ECHOED_PROMPT, none())]
    #[case::followed_by_text_on_line("<TASK_DONE> All tests pass.", none())]
    #[case::earlier_line_then_prose(
        "<TASK_DONE>\n\nWait, let me re-run the tests.\nThey fail.",
        none()
    )]
    #[case::marker_in_backticks("`<TASK_DONE>`", none())]
    #[case::quote_prefix("> <TASK_DONE>", none())]
    #[case::list_item("- <TASK_DONE>", none())]
    #[case::raw_json_line(r#"{"type":"result","result":"<TASK_DONE>"}"#, none())]
    // Code fences.
    #[case::in_code_fence("Example:\n```\n<TASK_DONE>\n```", none())]
    #[case::in_unclosed_fence("Example:\n```text\n<TASK_DONE>", none())]
    #[case::in_tilde_fence("~~~ markdown\n<TASK_DONE>\n~~~", none())]
    #[case::indented_fence("   ```\n<TASK_DONE>", none())]
    #[case::shorter_run_does_not_close("````\n```\n<TASK_DONE>", none())]
    #[case::other_char_does_not_close("~~~\n```\n<TASK_DONE>", none())]
    #[case::fence_with_text_does_not_close("```\n``` not a close\n<TASK_DONE>", none())]
    #[case::answer_ends_with_fence("<TASK_DONE>\n```", none())]
    // Look-alikes.
    #[case::empty_input("", none())]
    #[case::only_whitespace("  \n\t\r\n \u{a0}\n", none())]
    #[case::lowercase("<task_done>", none())]
    #[case::self_closing("<TASK_DONE/>", none())]
    #[case::closing_tag("</TASK_DONE>", none())]
    #[case::trailing_period("<TASK_DONE>.", none())]
    #[case::without_brackets("TASK_DONE", none())]
    // RALPH_DONE.
    #[case::ralph_done_last("All tasks are complete.\nRALPH_DONE\n", ralph_done())]
    #[case::ralph_done_not_last("RALPH_DONE\nStatus: in progress", none())]
    #[case::ralph_done_in_sentence("I will write RALPH_DONE when finished.", none())]
    #[case::ralph_done_lowercase("ralph_done", none())]
    // Blocked.
    #[case::blocked("<TASK_BLOCKED reason=\"no database\">", blocked("no database"))]
    #[case::blocked_then_prose(
        "<TASK_BLOCKED reason=\"no db\">\nI stopped here.",
        blocked("no db")
    )]
    #[case::quotes_in_reason(
        r#"<TASK_BLOCKED reason="the "db" crate says ">" is bad">"#,
        blocked(r#"the "db" crate says ">" is bad"#)
    )]
    #[case::single_quoted_reason(
        "<TASK_BLOCKED reason='the \"db\" crate'>",
        blocked("the \"db\" crate")
    )]
    #[case::entity_decoding(
        "<TASK_BLOCKED reason=\"&quot;a&quot; &amp; &lt;b&gt; isn&#39;t\">",
        blocked("\"a\" & <b> isn't")
    )]
    #[case::entities_decode_once(
        "<TASK_BLOCKED reason=\"&amp;quot; &copy; & &amp\">",
        blocked("&quot; &copy; & &amp")
    )]
    #[case::blocked_without_reason("<TASK_BLOCKED>", blocked(""))]
    #[case::blocked_empty_reason("<TASK_BLOCKED reason=\"\">", blocked(""))]
    #[case::multiple_blocked_last_wins(
        "<TASK_BLOCKED reason=\"first\">\n<TASK_BLOCKED reason=\"second\">\nBye.",
        blocked("second")
    )]
    #[case::blocked_mismatched_quotes("<TASK_BLOCKED reason=\"x'>", none())]
    #[case::blocked_unterminated("<TASK_BLOCKED reason=\"x\"", none())]
    #[case::blocked_quote_only("<TASK_BLOCKED reason=\">", none())]
    #[case::blocked_in_sentence("I would say <TASK_BLOCKED reason=\"x\"> but I am not.", none())]
    #[case::blocked_in_fence("```\n<TASK_BLOCKED reason=\"x\">\n```", none())]
    #[case::done_and_blocked_conflict("<TASK_BLOCKED reason=\"no db\">\n<TASK_DONE>", conflict())]
    #[case::blocked_after_earlier_done(
        "<TASK_DONE>\n<TASK_BLOCKED reason=\"no db\">",
        blocked("no db")
    )]
    // Questions.
    #[case::question(
        "I need a decision.\n<TASK_QUESTION question=\"Postgres or SQLite?\">\n",
        question("Postgres or SQLite?")
    )]
    #[case::question_single_quoted(
        "<TASK_QUESTION question='the \"v2\" API?'>",
        question("the \"v2\" API?")
    )]
    #[case::question_entities("<TASK_QUESTION question=\"a &amp; b?\">", question("a & b?"))]
    #[case::question_not_last("<TASK_QUESTION question=\"x?\">\nI went on anyway.", none())]
    #[case::question_empty("<TASK_QUESTION question=\"  \">", none())]
    #[case::question_bare("<TASK_QUESTION>", none())]
    #[case::question_quoted("> <TASK_QUESTION question=\"x?\">", none())]
    #[case::question_in_fence("```\n<TASK_QUESTION question=\"x?\">\n```", none())]
    #[case::question_in_sentence("Ask: <TASK_QUESTION question=\"x?\">", none())]
    #[case::question_and_blocked_conflict(
        "<TASK_BLOCKED reason=\"no db\">\n<TASK_QUESTION question=\"x?\">",
        conflict()
    )]
    #[case::question_after_done("<TASK_DONE>\n<TASK_QUESTION question=\"x?\">", question("x?"))]
    // Plan invalidation.
    #[case::plan_invalidation(
        "Verdict: fail.\nPLAN_INVALIDATION: wrong crate\nMore.",
        plan("wrong crate")
    )]
    #[case::plan_invalidation_empty_reason("PLAN_INVALIDATION:   ", none())]
    #[case::plan_invalidation_no_colon("PLAN_INVALIDATION wrong crate", none())]
    #[case::plan_invalidation_in_sentence(
        "I will not emit PLAN_INVALIDATION: the plan is fine.",
        none()
    )]
    #[case::plan_invalidation_first_wins(
        "PLAN_INVALIDATION: first\nPLAN_INVALIDATION: second",
        plan("first")
    )]
    #[case::plan_invalidation_in_fence("~~~\nPLAN_INVALIDATION: x\n~~~", none())]
    fn parses(#[case] answer: &str, #[case] expected: Markers) {
        assert_eq!(parse(answer), expected, "answer: {answer:?}");
    }

    #[test]
    fn all_markers_at_once() {
        let answer = "<TASK_BLOCKED reason=\"x\">\nPLAN_INVALIDATION: y\nRALPH_DONE";
        let expected = Markers {
            task: blocked("x").task,
            ralph_done: true,
            plan_invalidation: Some("y".to_owned()),
        };
        assert_eq!(parse(answer), expected);
    }

    const TEN_MB: usize = 10 << 20;

    fn prose(len: usize) -> String {
        "Some prose about <TASK_DONE> and RALPH_DONE.\n"
            .chars()
            .cycle()
            .take(len)
            .collect()
    }

    #[test]
    fn ten_megabytes_with_marker_last() {
        let answer = prose(TEN_MB) + "\n<TASK_DONE>\n";
        assert_eq!(parse(&answer), done());
    }

    #[test]
    fn ten_megabytes_after_marker() {
        let answer = "<TASK_DONE>\n".to_owned() + &prose(TEN_MB);
        assert_eq!(parse(&answer), none());
    }

    #[test]
    fn ten_megabyte_single_line() {
        let answer = "<TASK_BLOCKED reason=\"".to_owned() + &"&amp;".repeat(TEN_MB / 5) + "\">";
        let reason = parse(&answer).task.blocked_reason().map(str::len);
        assert_eq!(reason, Some(TEN_MB / 5));
        assert_eq!(parse(&"`".repeat(TEN_MB)), none());
    }

    /// Pieces that random answers are built from: marker fragments, fences, whitespace and
    /// multi-byte characters, so the generator hits the parser's edges often.
    const PIECES: [&str; 26] = [
        "\n<TASK_BLOCKED reason='a \"b\" c'>\n",
        "\n<TASK_DONE>",
        "<TASK_DONE>",
        "RALPH_DONE",
        "<TASK_BLOCKED",
        " reason=",
        "\"",
        "'",
        ">",
        "PLAN_INVALIDATION:",
        "\n",
        "\r\n",
        " ",
        "\t",
        "```",
        "~~~",
        "`",
        "&quot;",
        "&amp",
        "&",
        "é",
        "🦀",
        "\u{2028}",
        "\u{a0}",
        "x",
        "\0",
    ];

    /// A xorshift64 generator: deterministic, so a failure reproduces.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn last_line(answer: &str) -> &str {
        answer
            .split('\n')
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("")
    }

    #[test]
    fn random_garbage_never_panics_and_keeps_invariants() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        // Which outcomes the generator reached, so the invariants below are not vacuous.
        let mut seen = [false; 5];
        for _ in 0..5_000 {
            let answer: String = (0..rng.below(40))
                .map(|_| PIECES[rng.below(PIECES.len())])
                .collect();
            let markers = parse(&answer);
            if markers.task == TaskSignal::Done || markers.task == TaskSignal::Conflict {
                assert_eq!(last_line(&answer), TASK_DONE, "{answer:?}");
            }
            if markers.ralph_done {
                assert_eq!(last_line(&answer), RALPH_DONE, "{answer:?}");
            }
            if let Some(reason) = &markers.plan_invalidation {
                assert!(!reason.trim().is_empty(), "{answer:?}");
            }
            seen[0] |= markers.task.is_done();
            seen[1] |= markers.task.blocked_reason().is_some();
            seen[2] |= markers.task == TaskSignal::Conflict;
            seen[3] |= markers.ralph_done;
            seen[4] |= markers.plan_invalidation.is_some();
        }
        assert_eq!(seen, [true; 5], "done, blocked, conflict, ralph_done, plan");
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
        for _ in 0..2_000 {
            let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
    }
}

#[cfg(test)]
#[path = "signal_props.rs"]
mod props;
