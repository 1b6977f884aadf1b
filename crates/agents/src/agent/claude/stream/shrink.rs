//! Shrinks a JSON line too long to hold into a small JSON text of the same structure.
//!
//! A model text of 200 MiB arrives as one `assistant` line and again as the `result` line, and
//! the `result` line carries the outcome. [`Shrinker`] is fed such a line piece by piece and
//! writes a compact copy in which every field is kept but each long string is cut to its head
//! and tail around an omission line (see [`elide`](super::elide)). The copy then goes through
//! the normal parser, so outcome fields, usage, the session id and the *end* of the final text
//! (where the markers are) survive, in memory bounded by the limits below, whatever the input.
//!
//! Bounds: a string keeps at most `head + tail` bytes; once the copy reaches `budget` bytes,
//! further members and elements are dropped, except top-level members (the outcome fields of
//! a `result` line may come after a large `modelUsage`), which are kept with short strings
//! and with containers replaced by `null`, up to [`MAX_LATE_MEMBERS`]. The nesting depth is
//! limited to [`MAX_DEPTH`]. A line that is not one JSON value fails and is reported as such.

use super::elide;

/// Deepest nesting followed; deeper input fails (serde_json itself stops at 128).
const MAX_DEPTH: usize = 100;
/// Top-level members kept after the budget is spent.
const MAX_LATE_MEMBERS: usize = 256;
/// Head and tail of a string kept after the budget is spent.
const LATE_STRING: usize = 1024;
/// Bytes kept of an object key.
const MAX_KEY: usize = 256;
/// Bytes of a number or `true`/`false`/`null`; a longer literal becomes `null`.
const MAX_LITERAL: usize = 64;

/// How much a [`Shrinker`] keeps.
#[derive(Clone, Copy, Debug)]
pub(in crate::agent) struct Limits {
    /// Bytes kept from the start of a long string.
    pub(in crate::agent) head: usize,
    /// Bytes kept from the end of a long string.
    pub(in crate::agent) tail: usize,
    /// Size of the copy past which members are dropped.
    pub(in crate::agent) budget: usize,
}

/// The compact copy of one line.
#[derive(Debug)]
pub(in crate::agent) struct Shrunk {
    /// Valid JSON (unless the input's literals were not).
    pub(in crate::agent) json: Vec<u8>,
    /// The top-level members whose value was cut, with the string bytes omitted from them.
    pub(super) cuts: Vec<(String, u64)>,
}

impl Shrunk {
    /// Bytes omitted from the strings of top-level member `key`, if it was cut at all.
    pub(super) fn cut(&self, key: &str) -> Option<u64> {
        self.cuts.iter().find(|(k, _)| k == key).map(|(_, n)| *n)
    }
}

/// Where the scanner is in the JSON grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Position {
    /// A value must start.
    Value,
    /// After `[`: a value or `]`.
    ArrayStart,
    /// After `{`: a key or `}`.
    ObjectStart,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or the closing bracket.
    AfterValue,
    /// Inside a string.
    Str,
    /// After a `\` in a string.
    Escape,
    /// Inside `\uXXXX`, with the digits read so far.
    Unicode(u8),
    /// Inside a number or `true`/`false`/`null`.
    Literal,
    /// After the top-level value.
    End,
}

/// An open object or array.
#[derive(Clone, Copy, Debug)]
struct Frame {
    object: bool,
    /// Nothing of it is written (it is being dropped).
    silent: bool,
    /// A member or element was written (the next one needs a comma).
    written: bool,
    /// The current object member is written.
    member: bool,
}

/// The streaming scanner; see the [module docs](self).
#[derive(Debug)]
pub(in crate::agent) struct Shrinker {
    limits: Limits,
    out: Vec<u8>,
    stack: Vec<Frame>,
    state: Position,
    /// The string being read is a key (else a value).
    in_key: bool,
    /// The string or literal being read is written.
    kept: bool,
    /// The value being read is a late top-level member's (budget spent): kept small.
    late: bool,
    late_members: usize,
    text: Capture,
    code: u16,
    literal: Vec<u8>,
    top_key: String,
    cuts: Vec<(String, u64)>,
    failed: bool,
}

impl Shrinker {
    pub(in crate::agent) fn new(limits: Limits) -> Self {
        Shrinker {
            limits,
            out: Vec::new(),
            stack: Vec::new(),
            state: Position::Value,
            in_key: false,
            kept: true,
            late: false,
            late_members: 0,
            text: Capture::default(),
            code: 0,
            literal: Vec::new(),
            top_key: String::new(),
            cuts: Vec::new(),
            failed: false,
        }
    }

    /// Bytes of buffer held (capacities), for memory accounting.
    pub(in crate::agent) fn capacity(&self) -> usize {
        self.out.capacity()
            + self.text.capacity()
            + self.literal.capacity()
            + self.stack.capacity() * std::mem::size_of::<Frame>()
    }

    /// Scans the next bytes of the line.
    pub(in crate::agent) fn feed(&mut self, mut input: &[u8]) {
        while !input.is_empty() && !self.failed {
            let used = self.step(input);
            input = &input[used..];
        }
    }

    /// The copy, or `None` if the line was not exactly one JSON value.
    pub(in crate::agent) fn finish(mut self) -> Option<Shrunk> {
        if self.state == Position::Literal {
            self.end_literal();
        }
        (!self.failed && self.state == Position::End).then_some(Shrunk {
            json: self.out,
            cuts: self.cuts,
        })
    }

    /// Handles the start of `input`; returns how many bytes it used (none only when a literal
    /// ends: its delimiter is handled again in the new state).
    fn step(&mut self, input: &[u8]) -> usize {
        let byte = input[0];
        match self.state {
            Position::Str => return self.string_run(input),
            Position::Literal if is_delimiter(byte) => {
                self.end_literal();
                return 0;
            }
            Position::Literal => self.literal.push(byte),
            Position::Escape => self.escape(byte),
            Position::Unicode(digits) => self.unicode_digit(digits, byte),
            _ if byte.is_ascii_whitespace() => {}
            Position::Value => self.start_value(byte),
            Position::ArrayStart if byte == b']' => self.close(false),
            Position::ArrayStart => self.start_value(byte),
            Position::ObjectStart if byte == b'}' => self.close(true),
            Position::ObjectStart | Position::Key if byte == b'"' => self.start_key(),
            Position::Colon if byte == b':' => self.state = Position::Value,
            Position::AfterValue => self.after_value(byte),
            Position::ObjectStart | Position::Key | Position::Colon | Position::End => {
                self.failed = true
            }
        }
        1
    }

    fn start_value(&mut self, byte: u8) {
        let kept = self.keep_value();
        let late = std::mem::take(&mut self.late);
        match byte {
            b'{' | b'[' => self.open(byte == b'{', kept, late),
            b'"' => self.start_string(false, kept, late),
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                self.kept = kept;
                self.literal.clear();
                self.literal.push(byte);
                self.state = Position::Literal;
            }
            _ => self.failed = true,
        }
    }

    /// Whether the value starting now is written. An object member was decided at its key; an
    /// array element is decided here (and gets its comma).
    fn keep_value(&mut self) -> bool {
        let within = self.out.len() < self.limits.budget;
        let Some(frame) = self.stack.last_mut() else {
            return true;
        };
        if frame.object {
            return frame.member;
        }
        if frame.silent {
            return false;
        }
        if !within {
            self.record_cut(0);
            return false;
        }
        if frame.written {
            self.out.push(b',');
        }
        frame.written = true;
        true
    }

    fn open(&mut self, object: bool, kept: bool, late: bool) {
        if self.stack.len() >= MAX_DEPTH {
            self.failed = true;
            return;
        }
        if kept && late {
            // A late top-level member: its container is not worth the memory.
            self.out.extend_from_slice(b"null");
            self.record_cut(0);
        } else if kept {
            self.out.push(if object { b'{' } else { b'[' });
        }
        self.stack.push(Frame {
            object,
            silent: !kept || late,
            written: false,
            member: false,
        });
        self.state = if object {
            Position::ObjectStart
        } else {
            Position::ArrayStart
        };
    }

    fn close(&mut self, object: bool) {
        match self.stack.pop() {
            Some(frame) if frame.object == object => {
                if !frame.silent {
                    self.out.push(if object { b'}' } else { b']' });
                }
                self.value_done();
            }
            _ => self.failed = true,
        }
    }

    fn after_value(&mut self, byte: u8) {
        match (byte, self.stack.last()) {
            (b',', Some(frame)) if frame.object => self.state = Position::Key,
            (b',', Some(_)) => self.state = Position::Value,
            (b'}', _) => self.close(true),
            (b']', _) => self.close(false),
            _ => self.failed = true,
        }
    }

    fn value_done(&mut self) {
        self.state = if self.stack.is_empty() {
            Position::End
        } else {
            Position::AfterValue
        };
    }

    /// Decides whether the member whose key starts now is written. Top-level keys are always
    /// read, to know which member a cut belongs to.
    fn start_key(&mut self) {
        let within = self.out.len() < self.limits.budget;
        let top = self.stack.len() == 1;
        let Some(frame) = self.stack.last_mut() else {
            self.failed = true;
            return;
        };
        let (member, late) = if frame.silent {
            (false, false)
        } else if within {
            (true, false)
        } else if top && self.late_members < MAX_LATE_MEMBERS {
            self.late_members += 1;
            (true, true)
        } else {
            (false, false)
        };
        frame.member = member;
        self.late = late;
        self.start_string(true, member || top, false);
    }

    fn end_key(&mut self) {
        let key = if self.kept {
            self.text.finish().0
        } else {
            String::new()
        };
        if self.stack.len() == 1 {
            self.top_key.clone_from(&key);
        }
        let Some(frame) = self.stack.last_mut() else {
            self.failed = true;
            return;
        };
        if frame.member {
            if frame.written {
                self.out.push(b',');
            }
            frame.written = true;
            write_json_string(&mut self.out, &key);
            self.out.push(b':');
        } else if !frame.silent {
            self.record_cut(0);
        }
        self.state = Position::Colon;
    }

    fn start_string(&mut self, key: bool, kept: bool, late: bool) {
        self.in_key = key;
        self.kept = kept;
        if kept {
            let (head, tail) = match (key, late) {
                (true, _) => (MAX_KEY, 0),
                (false, true) => (LATE_STRING, LATE_STRING),
                (false, false) => (self.limits.head, self.limits.tail),
            };
            self.text.reset(head, tail);
        }
        self.state = Position::Str;
    }

    /// Reads string content up to the next `"` or `\` in one go.
    fn string_run(&mut self, input: &[u8]) -> usize {
        let end = memchr::memchr2(b'"', b'\\', input).unwrap_or(input.len());
        if self.kept {
            self.text.push(&input[..end]);
        }
        match input.get(end) {
            None => return end,
            Some(b'"') if self.in_key => self.end_key(),
            Some(b'"') => self.end_string(),
            Some(_) => self.state = Position::Escape,
        }
        end + 1
    }

    fn end_string(&mut self) {
        if self.kept {
            let (text, omitted) = self.text.finish();
            write_json_string(&mut self.out, &text);
            if omitted > 0 {
                self.record_cut(omitted);
            }
        }
        self.value_done();
    }

    fn escape(&mut self, byte: u8) {
        let decoded = match byte {
            b'"' | b'\\' | b'/' => byte,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                self.code = 0;
                self.state = Position::Unicode(0);
                return;
            }
            _ => {
                self.failed = true;
                return;
            }
        };
        if self.kept {
            self.text.push(&[decoded]);
        }
        self.state = Position::Str;
    }

    fn unicode_digit(&mut self, digits: u8, byte: u8) {
        let Some(digit) = char::from(byte).to_digit(16) else {
            self.failed = true;
            return;
        };
        // Four hex digits fit a u16; `digit` is below 16.
        self.code = self.code << 4 | digit as u16;
        if digits < 3 {
            self.state = Position::Unicode(digits + 1);
            return;
        }
        if self.kept {
            self.text.push_unit(self.code);
        }
        self.state = Position::Str;
    }

    fn end_literal(&mut self) {
        if self.kept {
            if self.literal.len() > MAX_LITERAL {
                self.out.extend_from_slice(b"null");
                self.record_cut(0);
            } else {
                self.out.extend_from_slice(&self.literal);
            }
        }
        self.literal.clear();
        self.value_done();
    }

    /// Notes that the current top-level member lost `omitted` string bytes (or a value).
    fn record_cut(&mut self, omitted: u64) {
        const MAX_CUTS: usize = 64;
        if let Some((_, n)) = self.cuts.iter_mut().find(|(k, _)| *k == self.top_key) {
            *n += omitted;
        } else if self.cuts.len() < MAX_CUTS {
            self.cuts.push((self.top_key.clone(), omitted));
        }
    }
}

/// Ends a literal: whitespace or the punctuation that may follow a value.
fn is_delimiter(byte: u8) -> bool {
    matches!(byte, b',' | b'}' | b']') || byte.is_ascii_whitespace()
}

/// Writes `text` as a JSON string.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut done = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[done..at]);
        if escaped.is_empty() {
            out.extend_from_slice(format!("\\u{byte:04x}").as_bytes());
        } else {
            out.extend_from_slice(escaped);
        }
        done = at + 1;
    }
    out.extend_from_slice(&bytes[done..]);
    out.push(b'"');
}

/// One decoded string: its first `head_cap` bytes and a window over its last `tail_cap`.
#[derive(Debug, Default)]
struct Capture {
    head: Vec<u8>,
    /// Holds the last `tail_cap` to `2 * tail_cap` bytes, trimmed in bulk.
    tail: Vec<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
    /// A high surrogate `\uD8xx` waiting for its low half.
    high: Option<u16>,
}

impl Capture {
    fn capacity(&self) -> usize {
        self.head.capacity() + self.tail.capacity()
    }

    fn reset(&mut self, head_cap: usize, tail_cap: usize) {
        self.head.clear();
        self.tail.clear();
        self.head_cap = head_cap;
        self.tail_cap = tail_cap;
        self.total = 0;
        self.high = None;
    }

    /// Appends decoded bytes (raw string content or one escaped character).
    fn push(&mut self, bytes: &[u8]) {
        // Empty runs come between two escapes, e.g. the halves of a surrogate pair.
        if bytes.is_empty() {
            return;
        }
        if self.high.take().is_some() {
            self.push_char(char::REPLACEMENT_CHARACTER);
        }
        self.append(bytes);
    }

    /// Appends one `\uXXXX` code unit, pairing surrogates; a lone one becomes U+FFFD.
    fn push_unit(&mut self, unit: u16) {
        let pending = self.high.take();
        if let (Some(high), 0xDC00..=0xDFFF) = (pending, unit) {
            let code = 0x10000 + ((u32::from(high) - 0xD800) << 10 | (u32::from(unit) - 0xDC00));
            self.push_char(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            return;
        }
        if pending.is_some() {
            self.push_char(char::REPLACEMENT_CHARACTER);
        }
        if (0xD800..=0xDBFF).contains(&unit) {
            self.high = Some(unit);
        } else {
            let c = char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER);
            self.push_char(c);
        }
    }

    fn push_char(&mut self, c: char) {
        self.append(c.encode_utf8(&mut [0; 4]).as_bytes());
    }

    fn append(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self
            .head_cap
            .saturating_sub(self.head.len())
            .min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        bytes = &bytes[room..];
        if bytes.is_empty() || self.tail_cap == 0 {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_cap {
            self.tail.drain(..self.tail.len() - self.tail_cap);
        }
    }

    /// The text (elided when bytes were dropped) and how many bytes were omitted.
    fn finish(&mut self) -> (String, u64) {
        if self.high.take().is_some() {
            self.push_char(char::REPLACEMENT_CHARACTER);
        }
        let kept = (self.head.len() + self.tail.len()) as u64;
        if kept == self.total {
            let mut all = std::mem::take(&mut self.head);
            all.extend_from_slice(&self.tail);
            return (String::from_utf8_lossy(&all).into_owned(), 0);
        }
        let head = &self.head[..complete_prefix(&self.head)];
        let tail = char_suffix(&self.tail[self.tail.len().saturating_sub(self.tail_cap)..]);
        let omitted = self.total - (head.len() + tail.len()) as u64;
        let text = elide(
            &String::from_utf8_lossy(head),
            omitted,
            &String::from_utf8_lossy(tail),
        );
        (text, omitted)
    }
}

/// The length of `bytes` without a UTF-8 sequence cut off at its end.
fn complete_prefix(bytes: &[u8]) -> usize {
    let lead = bytes
        .iter()
        .rev()
        .take(4)
        .position(|b| b & 0xC0 != 0x80)
        .map(|back| bytes.len() - 1 - back);
    let Some(at) = lead else {
        return bytes.len();
    };
    let needed = match bytes[at] {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    };
    if bytes.len() - at < needed {
        at
    } else {
        bytes.len()
    }
}

/// `bytes` without the continuation bytes of a character cut off at its start.
fn char_suffix(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| *b & 0xC0 == 0x80)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ROOMY: Limits = Limits {
        head: 1 << 20,
        tail: 1 << 20,
        budget: 1 << 20,
    };

    /// Shrinks `input` fed in pieces of `step` bytes.
    fn shrink(input: &[u8], limits: Limits, step: usize) -> Option<Shrunk> {
        let mut shrinker = Shrinker::new(limits);
        for piece in input.chunks(step.max(1)) {
            shrinker.feed(piece);
        }
        shrinker.finish()
    }

    fn value(shrunk: &Shrunk) -> Value {
        serde_json::from_slice(&shrunk.json).expect("the copy is JSON")
    }

    #[test]
    fn every_transcript_line_survives_unchanged_in_any_piece_size() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/claude/transcripts"
        );
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("transcript");
            for line in text.lines() {
                let original: Value = serde_json::from_str(line).expect("fixture is JSON");
                for step in [1, 2, 3, 5, 64, 4096] {
                    let shrunk = shrink(line.as_bytes(), ROOMY, step).expect("shrinks");
                    assert_eq!(value(&shrunk), original, "{path:?} step {step}");
                    assert!(shrunk.cuts.is_empty());
                }
            }
        }
    }

    #[test]
    fn escapes_and_surrogate_pairs_are_decoded_even_when_split() {
        let input = br#"{"k\u0065y":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00 \ud800x \udc00"}"#;
        for step in 1..8 {
            let shrunk = shrink(input, ROOMY, step).expect("shrinks");
            let expected = "a\"b\\c/d\u{8}\u{c}\n\r\té😀 \u{fffd}x \u{fffd}";
            assert_eq!(value(&shrunk), json!({ "key": expected }), "step {step}");
        }
    }

    #[test]
    fn a_long_string_keeps_whole_characters_at_both_ends() {
        let text = "é".repeat(1000); // 2000 bytes
        let input = json!({"result": text, "is_error": false}).to_string();
        let limits = Limits {
            head: 5,
            tail: 5,
            budget: 1 << 20,
        };
        let shrunk = shrink(input.as_bytes(), limits, 7).expect("shrinks");
        assert_eq!(shrunk.cut("result"), Some(1992));
        assert_eq!(
            value(&shrunk),
            json!({"result": "éé\n[… 1992 bytes omitted …]\néé", "is_error": false})
        );
    }

    #[test]
    fn past_the_budget_members_are_dropped_but_late_top_level_scalars_stay() {
        let numbers: Vec<u32> = (0..10_000).collect();
        let input = json!({
            "early": numbers,
            "nested": {"a": 1, "b": [1, 2]},
            "type": "result",
            "result": "x".repeat(5000),
            "is_error": false,
        })
        .to_string();
        let limits = Limits {
            head: 100,
            tail: 100,
            budget: 1000,
        };
        let shrunk = shrink(input.as_bytes(), limits, 333).expect("shrinks");
        let copy = value(&shrunk);
        assert!(shrunk.json.len() < 5000, "{}", shrunk.json.len());
        assert!(copy["early"].as_array().is_some_and(|a| a.len() < 1000));
        assert_eq!(copy["nested"], Value::Null);
        assert_eq!(copy["type"], "result");
        assert_eq!(copy["is_error"], false);
        let result = copy["result"].as_str().expect("result");
        assert!(result.starts_with("xxx") && result.ends_with("xxx") && result.len() < 2200);
        for key in ["early", "nested", "result"] {
            assert!(shrunk.cut(key).is_some(), "{key}");
        }
        assert_eq!(shrunk.cut("type"), None);
    }

    #[test]
    fn a_huge_number_becomes_null() {
        let input = format!(r#"{{"n":{},"m":2}}"#, "9".repeat(100));
        let shrunk = shrink(input.as_bytes(), ROOMY, 10).expect("shrinks");
        assert_eq!(value(&shrunk), json!({"n": null, "m": 2}));
        assert_eq!(shrunk.cut("n"), Some(0));
    }

    #[test]
    fn top_level_scalars_and_empty_containers_work() {
        for (input, expected) in [
            ("42", json!(42)),
            ("  \"s\"  ", json!("s")),
            ("[]", json!([])),
            ("{}", json!({})),
            (
                r#"{"a":[{},[],[null,true,-1.5e3]]}"#,
                json!({"a": [{}, [], [null, true, -1500.0]]}),
            ),
        ] {
            let shrunk = shrink(input.as_bytes(), ROOMY, 1).expect(input);
            assert_eq!(value(&shrunk), expected, "{input}");
        }
    }

    #[test]
    fn what_is_not_one_json_value_fails() {
        let deep = "[".repeat(MAX_DEPTH + 1);
        for input in [
            "",
            "{",
            r#"{"a":1"#,
            r#"{"a":}"#,
            r#"{"a" 1}"#,
            r#"{1:2}"#,
            r#"[1,]"#,
            r#"[1}"#,
            r#"{"a":"\q"}"#,
            r#"{"a":"\u12x4"}"#,
            r#"{"a":"unterminated"#,
            "{} {}",
            "not json",
            deep.as_str(),
        ] {
            assert!(shrink(input.as_bytes(), ROOMY, 3).is_none(), "{input:?}");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let shrunk = shrink(b"{\"a\":\"x\xff\xfey\"}", ROOMY, 1).expect("shrinks");
        assert_eq!(value(&shrunk), json!({"a": "x\u{fffd}\u{fffd}y"}));
    }

    #[test]
    fn control_characters_are_escaped_in_the_copy() {
        let shrunk = shrink(br#"{"a":"\u0001\u001f"}"#, ROOMY, 4).expect("shrinks");
        assert_eq!(shrunk.json, br#"{"a":"\u0001\u001f"}"#);
    }
}
