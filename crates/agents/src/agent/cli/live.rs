//! Live events from a CLI's JSON lines, as they arrive on its stdout.
//!
//! The run's result (answer, usage, failure) is read from the kept tail of stdout when the
//! process has ended; what someone watching wants to see while it runs (the session, each
//! tool call, the agent's text, the tokens spent so far) is sent as soon as its line is
//! whole. Each CLI agent says which of its lines mean what with a [`LiveMap`], and what
//! they say about its API ([`ApiSign`]): the run's [`Reach`] clock ends a run that only
//! prints connection errors.

use serde_json::Value;

use crate::agent::reach::{ApiSign, Reach};
use crate::agent::{AgentEvent, AgentEvents};

/// Which of a CLI's event lines mean live events, and what they mean.
#[derive(Clone, Copy, Debug)]
pub(super) struct LiveMap {
    /// The `type`s of the lines that may mean something: the others (most of a long
    /// run's output) are skipped without being parsed into a tree.
    pub(super) types: &'static [&'static str],
    /// What a line of one of those types means, if anything.
    pub(super) map: fn(&Value) -> Option<Meaning>,
    /// What a line of one of those types says about the API, if anything.
    pub(super) api: fn(&Value) -> Option<ApiSign>,
}

/// What one line of a CLI's output means.
#[derive(Debug)]
pub(super) enum Meaning {
    /// An event. A [`Session`](AgentEvent::Session) is sent once per run; a
    /// [`Usage`](AgentEvent::Usage) counts that line's own tokens, and the run's totals so
    /// far are sent.
    Event(AgentEvent),
    /// A piece of a message streamed in pieces: the pieces are joined and sent as one
    /// [`Text`](AgentEvent::Text) when a line means something else, or when the output ends.
    TextPiece(String),
}

/// A line's `type`, read without building the rest of it.
#[derive(serde::Deserialize)]
struct LineType<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// The longest line looked at: a longer one (a huge answer, a file dumped by a tool) is
/// skipped here, so the buffer stays bounded; the run's result still reads it from the tail.
const LINE_MAX: usize = 1024 * 1024;

/// Longest text of a live [`AgentEvent::Text`], in bytes; longer ones are cut.
const TEXT_MAX: usize = 4 * 1024;

/// Cuts stdout into lines and sends the events they mean.
pub(super) struct LiveLines {
    map: LiveMap,
    /// Finds the key `"type"` in a line.
    type_key: memchr::memmem::Finder<'static>,
    events: AgentEvents,
    /// Whether the API answers: the unreachable clock.
    reach: Reach,
    line: Vec<u8>,
    /// The current line grew past [`LINE_MAX`]: the rest of it is skipped.
    overlong: bool,
    /// An [`AgentEvent::Session`] was sent: a run has one session, sent once.
    session_sent: bool,
    /// Input and output tokens of the run so far.
    tokens: (u64, u64),
    /// The pieces of a streamed message so far (none is added once they reach
    /// [`TEXT_MAX`] bytes: the event is cut to that anyway).
    pieces: Option<String>,
}

impl LiveLines {
    pub(super) fn new(map: LiveMap, events: AgentEvents, reach: Reach) -> Self {
        LiveLines {
            map,
            type_key: memchr::memmem::Finder::new(b"\"type\"").into_owned(),
            events,
            reach,
            line: Vec::new(),
            overlong: false,
            session_sent: false,
            tokens: (0, 0),
            pieces: None,
        }
    }

    /// Takes the next bytes of stdout. A line that arrives whole is looked at where it is;
    /// only one cut between two reads is copied.
    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        while let Some(end) = memchr::memchr(b'\n', bytes) {
            let body = &bytes[..end];
            if self.line.is_empty() && !self.overlong {
                if body.len() <= LINE_MAX {
                    self.send(body);
                }
            } else {
                self.hold(body);
                if !self.overlong {
                    let line = std::mem::take(&mut self.line);
                    self.send(&line);
                    self.line = line;
                }
                self.line.clear();
                self.overlong = false;
            }
            bytes = &bytes[end + 1..];
        }
        self.hold(bytes);
    }

    /// Keeps the start of a line until its end arrives, unless it is over [`LINE_MAX`].
    fn hold(&mut self, body: &[u8]) {
        if !self.overlong && self.line.len() + body.len() > LINE_MAX {
            self.overlong = true;
            self.line = Vec::new();
        }
        if !self.overlong {
            self.line.extend_from_slice(body);
        }
    }

    /// Whether `line` may be of one of the map's types: a `"type"` key in it has one of
    /// them as its value (nested objects have types too; parsing decides), or an escape
    /// could spell one. Looking is several times cheaper than parsing, and most lines of a
    /// long run are of no such type.
    fn may_be_wanted(&self, line: &[u8]) -> bool {
        let escaped = memchr::memchr_iter(b'\\', line).any(|at| line.get(at + 1) == Some(&b'u'));
        if escaped {
            return true;
        }
        self.type_key.find_iter(line).any(|at| {
            let rest = line[at + b"\"type\"".len()..].trim_ascii_start();
            let Some(value) = rest
                .strip_prefix(b":")
                .and_then(|rest| rest.trim_ascii_start().strip_prefix(b"\""))
            else {
                return false;
            };
            let value = memchr::memchr(b'"', value).map_or(value, |end| &value[..end]);
            value.contains(&b'\\') || self.map.types.iter().any(|t| t.as_bytes() == value)
        })
    }

    fn send(&mut self, line: &[u8]) {
        if !self.may_be_wanted(line) {
            return;
        }
        let wanted = serde_json::from_slice::<LineType<'_>>(line)
            .ok()
            .and_then(|line| line.kind)
            .is_some_and(|kind| self.map.types.contains(&kind.as_ref()));
        if !wanted {
            return;
        }
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if let Some(sign) = (self.map.api)(&value) {
            self.reach.heard(sign);
        }
        match (self.map.map)(&value) {
            Some(Meaning::TextPiece(piece)) => {
                let pieces = self.pieces.get_or_insert_with(String::new);
                if pieces.len() < TEXT_MAX {
                    pieces.push_str(&piece);
                }
            }
            Some(Meaning::Event(event)) => {
                self.send_pieces();
                self.send_event(event);
            }
            None => {}
        }
    }

    fn send_event(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Session { .. } if self.session_sent => {}
            AgentEvent::Usage {
                context_tokens,
                window,
                input_tokens,
                output_tokens,
            } => {
                self.tokens.0 += input_tokens;
                self.tokens.1 += output_tokens;
                self.events.emit(AgentEvent::Usage {
                    context_tokens,
                    window,
                    input_tokens: self.tokens.0,
                    output_tokens: self.tokens.1,
                });
                // The same tokens, for the ledger (these CLIs report no cost as they go).
                self.events.emit(AgentEvent::Spend {
                    usage: crate::agent::Usage::tokens(self.tokens.0, self.tokens.1, 0, 0),
                    cost_usd: None,
                });
            }
            event => {
                self.session_sent |= matches!(event, AgentEvent::Session { .. });
                self.events.emit(event);
            }
        }
    }

    /// Sends the message streamed so far, if any, as one text event.
    fn send_pieces(&mut self) {
        if let Some(pieces) = self.pieces.take() {
            self.events.emit(text(&pieces));
        }
    }

    /// The output has ended: sends what is still held (a message streamed to the end).
    pub(super) fn finish(&mut self) {
        self.send_pieces();
    }

    /// The run's unreachable clock.
    pub(super) fn reach(&self) -> &Reach {
        &self.reach
    }
}

/// The live events `map` makes of a recorded transcript, fed in pieces as a pipe would,
/// each in a word or two: `session`, `tool NAME`, `text TEXT`, `usage IN/OUT context C`.
#[cfg(test)]
pub(super) fn replay(transcript: &str, map: LiveMap) -> Vec<String> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let events = AgentEvents::new(move |e| sink.lock().expect("lock").push(e));
    let reach = Reach::new("cli", None, events.clone());
    let mut lines = LiveLines::new(map, events, reach);
    for piece in transcript.as_bytes().chunks(100) {
        lines.push(piece);
    }
    lines.finish();
    let seen = seen.lock().expect("lock");
    // Each usage line's spend report repeats its tokens: the usage shows them.
    seen.iter()
        .filter(|event| !matches!(event, AgentEvent::Spend { .. }))
        .map(|event| match event {
            AgentEvent::Session { .. } => "session".to_owned(),
            AgentEvent::ToolUse { name } => format!("tool {name}"),
            AgentEvent::Text { text } => format!("text {text}"),
            AgentEvent::Status { line, .. } => format!("status {line}"),
            AgentEvent::Usage {
                context_tokens,
                input_tokens,
                output_tokens,
                ..
            } => format!("usage {input_tokens}/{output_tokens} context {context_tokens}"),
            other => format!("{other:?}"),
        })
        .collect()
}

/// A whole message, cut to [`TEXT_MAX`] bytes.
pub(super) fn message(text: &str) -> Meaning {
    Meaning::Event(self::text(text))
}

/// A text event, cut to [`TEXT_MAX`] bytes at a character boundary.
fn text(text: &str) -> AgentEvent {
    let mut end = text.len().min(TEXT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    AgentEvent::Text {
        text: text[..end].to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    const TOOLS: LiveMap = LiveMap {
        types: &["tool", "session", "tokens", "piece"],
        map: tool,
        api: |_| None,
    };

    fn tool(value: &Value) -> Option<Meaning> {
        if let Some(piece) = value["piece"].as_str() {
            return Some(Meaning::TextPiece(piece.to_owned()));
        }
        if let Some(n) = value["tokens"].as_u64() {
            return Some(Meaning::Event(AgentEvent::Usage {
                context_tokens: n,
                window: None,
                input_tokens: n,
                output_tokens: 1,
            }));
        }
        if let Some(id) = value["session"].as_str() {
            return Some(Meaning::Event(AgentEvent::Session { id: id.to_owned() }));
        }
        value["tool"].as_str().map(|name| {
            Meaning::Event(AgentEvent::ToolUse {
                name: name.to_owned(),
            })
        })
    }

    fn lines() -> (LiveLines, Arc<Mutex<Vec<AgentEvent>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let events = AgentEvents::new(move |e| sink.lock().expect("lock").push(e));
        let reach = Reach::new("x", None, events.clone());
        (LiveLines::new(TOOLS, events, reach), seen)
    }

    fn names(seen: &Mutex<Vec<AgentEvent>>) -> Vec<String> {
        seen.lock()
            .expect("lock")
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolUse { name } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_line_is_sent_when_whole_however_it_is_cut() {
        let (mut live, seen) = lines();
        live.push(br#"{"type":"tool","tool":"a"}"#);
        assert!(names(&seen).is_empty(), "not before its newline");
        live.push(b"\n{\"type\":\"tool\",\"to");
        live.push(b"ol\":\"b\"}\nnot json\n{\"other\":1}\n{\"type\":\"x\",\"tool\":\"c\"}\n");
        assert_eq!(names(&seen), ["a", "b"]);
    }

    #[test]
    fn a_wanted_type_is_found_however_the_line_spells_it() {
        let (mut live, seen) = lines();
        live.push(br#"{"tool":"key-only","x":"tool","tool_use":1}"#);
        live.push(b"\n");
        live.push(br#"{"tool":"a","type":"tool"}"#);
        live.push(b"\n");
        live.push(br#"{ "type" :  "tool", "tool": "b" }"#);
        live.push(b"\n");
        live.push(br#"{"type":"t\u006fol","tool":"c"}"#);
        live.push(b"\n");
        live.push(br#"{"type":"tools","tool":"not this"}"#);
        live.push(b"\n");
        live.push(br#"{"type":"noise","item":{"type":"tool"},"tool":"nor this"}"#);
        live.push(b"\n");
        live.push(br#"{"x":"type","type":"tool","tool":"d"}"#);
        live.push(b"\n");
        assert_eq!(names(&seen), ["a", "b", "c", "d"]);
    }

    #[test]
    fn the_session_is_sent_once() {
        let (mut live, seen) = lines();
        let line =
            |key: &str, value: &str| format!("{{\"type\":\"{key}\",\"{key}\":\"{value}\"}}\n");
        live.push((line("session", "s") + &line("session", "s") + &line("tool", "a")).as_bytes());
        let seen = seen.lock().expect("lock");
        assert!(
            matches!(&seen[..], [AgentEvent::Session { id }, AgentEvent::ToolUse { .. }] if id == "s"),
            "{seen:?}"
        );
    }

    #[test]
    fn usage_is_sent_as_the_runs_totals_so_far() {
        let (mut live, seen) = lines();
        live.push(b"{\"type\":\"tokens\",\"tokens\":100}\n{\"type\":\"tokens\",\"tokens\":30}\n");
        let seen = seen.lock().expect("lock");
        let totals: Vec<(u64, u64, u64)> = seen
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Usage {
                    context_tokens,
                    input_tokens,
                    output_tokens,
                    ..
                } => Some((*context_tokens, *input_tokens, *output_tokens)),
                _ => None,
            })
            .collect();
        assert_eq!(totals, [(100, 100, 1), (30, 130, 2)]);
    }

    #[test]
    fn a_message_streamed_in_pieces_is_one_text_event() {
        let (mut live, seen) = lines();
        let line =
            |key: &str, value: &str| format!("{{\"type\":\"{key}\",\"{key}\":\"{value}\"}}\n");
        let stream = line("piece", "Hel")
            + &line("piece", "lo")
            + &line("tool", "t")
            + &line("piece", "Done.");
        live.push(stream.as_bytes());
        live.finish();
        let seen = seen.lock().expect("lock");
        assert!(
            matches!(&seen[..], [
                AgentEvent::Text { text: first },
                AgentEvent::ToolUse { .. },
                AgentEvent::Text { text: last },
            ] if first == "Hello" && last == "Done."),
            "{seen:?}"
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_next_one_is_read() {
        let (mut live, seen) = lines();
        let huge = format!(r#"{{"type":"tool","tool":"{}"}}"#, "x".repeat(LINE_MAX));
        for chunk in huge.as_bytes().chunks(64 * 1024) {
            live.push(chunk);
        }
        assert!(live.line.capacity() <= LINE_MAX * 2);
        live.push(b"\n{\"type\":\"tool\",\"tool\":\"after\"}\n");
        assert_eq!(names(&seen), ["after"]);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(TEXT_MAX);
        match text(&long) {
            AgentEvent::Text { text } => {
                assert!(text.len() <= TEXT_MAX && text.chars().all(|c| c == 'é'));
            }
            other => panic!("{other:?}"),
        }
    }
}
