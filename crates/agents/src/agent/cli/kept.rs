//! What a process agent keeps of its stdout for the run's result, in bounded memory.
//!
//! A command that prints its answer as plain text keeps the last bytes
//! ([`KeptStdout::Text`]). An agent that prints JSON lines (a vendor CLI's events, a
//! command read through an answer pointer) keeps its last lines ([`KeptLines`]): one line
//! may be larger than all that is kept, when it is the final answer, and it is the line that
//! matters most; so such a line is never held, but shrunk as it streams by, the way the
//! Claude agent shrinks its own (every field kept, each long string cut to its head and
//! tail around an omission line). Its fields and the end of its text, where the marker is,
//! are still read.

use crate::output::BoundedOutput;

use crate::agent::claude::stream::StreamOptions;
use crate::agent::claude::stream::shrink::{Limits, Shrinker};

/// What is kept of one run's stdout.
#[derive(Debug)]
pub(super) enum KeptStdout {
    /// The last bytes, as text.
    Text(BoundedOutput),
    /// The last JSON lines, a line larger than them all shrunk.
    Lines(KeptLines),
}

impl KeptStdout {
    /// Keeps the last `bytes` of stdout: as JSON lines when `lines`, else as text.
    pub(super) fn new(bytes: usize, lines: bool) -> Self {
        if lines {
            KeptStdout::Lines(KeptLines::new(bytes))
        } else {
            KeptStdout::Text(BoundedOutput::new(0, bytes))
        }
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        match self {
            KeptStdout::Text(tail) => tail.push(bytes),
            KeptStdout::Lines(lines) => lines.push(bytes),
        }
    }

    /// The text kept, and how many lines were shrunk.
    pub(super) fn finish(self) -> (String, u64) {
        match self {
            KeptStdout::Text(tail) => (tail.tail(), 0),
            KeptStdout::Lines(lines) => lines.finish(),
        }
    }
}

/// The last lines of a stream of JSON lines, `budget` bytes of them: the first may be cut
/// (a reader skips a line that does not parse). A line larger than `budget` is shrunk
/// instead of held (see the [module docs](self)). What it holds, however long the stream
/// and its lines: the lines kept, the line being read up to `budget`, and the compact copy
/// of a line being shrunk (about 1 MiB).
#[derive(Debug)]
pub(super) struct KeptLines {
    budget: usize,
    /// The last lines, whole or shrunk, each ending in a newline.
    tail: BoundedOutput,
    /// The line being read, while it fits the budget.
    line: Vec<u8>,
    /// The line being read, once it outgrew the budget (boxed: it is large, and rare).
    shrinker: Option<Box<Shrinker>>,
    /// Lines shrunk so far.
    shrunk: u64,
}

impl KeptLines {
    pub(super) fn new(budget: usize) -> Self {
        KeptLines {
            budget,
            tail: BoundedOutput::new(0, budget),
            line: Vec::new(),
            shrinker: None,
            shrunk: 0,
        }
    }

    /// Takes the next bytes of the stream.
    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        while let Some(end) = memchr::memchr(b'\n', bytes) {
            self.extend(&bytes[..end]);
            self.end_line();
            bytes = &bytes[end + 1..];
        }
        self.extend(bytes);
    }

    /// Adds to the line being read: held while it fits the budget, shrunk from then on.
    fn extend(&mut self, piece: &[u8]) {
        if let Some(shrinker) = &mut self.shrinker {
            shrinker.feed(piece);
            return;
        }
        let len = self.line.len() + piece.len();
        if len <= self.budget {
            // Grown to the budget at most, not to the next doubling past it.
            if len > self.line.capacity() {
                let wanted = (2 * self.line.capacity()).clamp(len, self.budget);
                self.line.reserve_exact(wanted - self.line.len());
            }
            self.line.extend_from_slice(piece);
            return;
        }
        let mut shrinker = Box::new(Shrinker::new(limits()));
        shrinker.feed(&self.line);
        shrinker.feed(piece);
        self.line = Vec::new();
        self.shrinker = Some(shrinker);
    }

    /// The line read is whole: into the tail, or its compact copy if it was shrunk (none
    /// if it was no JSON: a reader would skip it anyway).
    fn end_line(&mut self) {
        match self.shrinker.take() {
            Some(shrinker) => {
                if let Some(shrunk) = shrinker.finish() {
                    self.shrunk += 1;
                    self.tail.push(&shrunk.json);
                    self.tail.push(b"\n");
                }
            }
            None => {
                self.tail.push(&self.line);
                self.tail.push(b"\n");
                self.line.clear();
            }
        }
    }

    /// Bytes of buffer held (approximate: the tail counts as full): bounded by the budget,
    /// however long the lines.
    #[cfg(test)]
    fn retained(&self) -> usize {
        self.budget + self.line.capacity() + self.shrinker.as_ref().map_or(0, |s| s.capacity())
    }

    /// The lines kept (the last one also when the stream ended inside it), and how many
    /// were shrunk.
    fn finish(mut self) -> (String, u64) {
        if !self.line.is_empty() || self.shrinker.is_some() {
            self.end_line();
        }
        (self.tail.tail(), self.shrunk)
    }
}

/// How much of an oversized line is kept: as much as the Claude agent keeps of its own.
fn limits() -> Limits {
    let options = StreamOptions::default();
    Limits {
        head: options.string_head,
        tail: options.string_tail,
        budget: options.oversized_budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(budget: usize, pieces: &[&[u8]]) -> (String, u64) {
        let mut lines = KeptLines::new(budget);
        for piece in pieces {
            lines.push(piece);
        }
        lines.finish()
    }

    #[test]
    fn lines_that_fit_are_kept_whole_however_they_are_cut() {
        let (text, shrunk) = kept(100, &[b"{\"a\":1}\n{\"b\"", b":2}\n", b"{\"c\":3}"]);
        assert_eq!(text, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        assert_eq!(shrunk, 0);
    }

    #[test]
    fn only_the_last_lines_are_kept() {
        let (text, _) = kept(20, &[b"{\"first\":\"xxxxxxxx\"}\n{\"last\":1}\n"]);
        assert!(text.ends_with("\n{\"last\":1}\n"), "{text:?}");
        assert!(text.len() <= 20, "{text:?}");
    }

    #[test]
    fn a_line_larger_than_the_budget_is_shrunk_to_its_head_and_tail() {
        let answer = format!("{}\n<TASK_DONE>", "line of the report\n".repeat(30_000));
        let line = serde_json::json!({"type": "text", "text": answer}).to_string();
        let stream = format!("{{\"type\":\"start\"}}\n{line}\n{{\"type\":\"end\"}}\n");
        let mut lines = KeptLines::new(256 * 1024);
        for piece in stream.as_bytes().chunks(4096) {
            lines.push(piece);
        }
        let (text, shrunk) = lines.finish();

        assert_eq!(shrunk, 1);
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(types, ["start", "text", "end"]);
        let read = events[1]["text"].as_str().expect("the text");
        assert!(
            read.ends_with("report\n\n<TASK_DONE>"),
            "{}",
            &read[read.len() - 50..]
        );
        assert!(read.contains("bytes omitted"));
        assert!(read.len() < answer.len());
    }

    #[test]
    fn a_line_that_is_no_json_is_dropped_when_it_outgrows_the_budget() {
        let (text, shrunk) = kept(16, &[b"not json at all, and long\n{\"a\":1}\n"]);
        assert_eq!((text.as_str(), shrunk), ("{\"a\":1}\n", 0));
    }

    #[test]
    fn two_hundred_mib_in_one_line_cost_a_bounded_buffer() {
        const MIB: usize = 1 << 20;
        let budget = 8 * MIB;
        let mut lines = KeptLines::new(budget);
        lines.push(br#"{"type":"item.completed","item":{"type":"agent_message","text":""#);
        let chunk = "numbered line of the answer\\n".repeat(64 * 1024 / 29);
        let mut peak = 0;
        for _ in 0..(200 * MIB / chunk.len()) {
            lines.push(chunk.as_bytes());
            peak = peak.max(lines.retained());
        }
        lines.push(b"<TASK_DONE>\"}}\n{\"type\":\"turn.completed\"}\n");
        peak = peak.max(lines.retained());
        let (text, shrunk) = lines.finish();

        // The line's own buffer went once it passed the budget: what is held is the
        // budget's line and tail, and the shrinker's copy.
        assert!(peak <= 2 * budget + 2 * MIB, "held {peak} bytes");
        assert_eq!(shrunk, 1);
        let message: serde_json::Value =
            serde_json::from_str(text.lines().next().expect("a line")).expect("JSON");
        let answer = message["item"]["text"].as_str().expect("the answer");
        assert!(
            answer.ends_with("answer\n<TASK_DONE>"),
            "{}",
            &answer[answer.len() - 40..]
        );
        assert!(answer.len() < MIB, "{}", answer.len());
    }
}
