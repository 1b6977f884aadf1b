//! Bounded capture of process output: the head and the tail are kept, the middle is counted.
//!
//! A gate that prints gigabytes costs a [`BoundedOutput`] of `head + tail` bytes; the rest
//! goes to a log file if one was asked for.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Default bytes kept from the start of an output.
pub const DEFAULT_HEAD: usize = 8 * 1024;
/// Default bytes kept from the end of an output.
pub const DEFAULT_TAIL: usize = 24 * 1024;

/// The first `head` and last `tail` bytes of a stream, and how many bytes were dropped between.
///
/// ```
/// use ralph_loop_process::output::BoundedOutput;
///
/// let mut out = BoundedOutput::new(4, 4);
/// out.push(b"0123456789");
/// assert_eq!(out.omitted(), 2);
/// assert_eq!(out.to_string(), "0123\n[… 2 bytes omitted …]\n6789");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundedOutput {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl BoundedOutput {
    /// Keeps up to `head` leading and `tail` trailing bytes.
    pub fn new(head: usize, tail: usize) -> Self {
        BoundedOutput {
            head_cap: head,
            tail_cap: tail,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// A capture with the default limits (8 KiB head, 24 KiB tail).
    pub fn with_defaults() -> Self {
        Self::new(DEFAULT_HEAD, DEFAULT_TAIL)
    }

    /// A capture holding `text` under the default limits.
    pub fn from_text(text: &str) -> Self {
        let mut out = Self::with_defaults();
        out.push(text.as_bytes());
        out
    }

    /// Appends bytes, dropping from the middle once both ends are full.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Total bytes pushed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes pushed but not kept.
    pub fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The kept head (lossy UTF-8).
    pub fn head(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }

    /// The kept tail (lossy UTF-8).
    pub fn tail(&self) -> String {
        let (a, b) = self.tail.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl fmt::Display for BoundedOutput {
    /// The head, a line saying how much was omitted (if anything), and the tail.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.head())?;
        let omitted = self.omitted();
        if omitted > 0 {
            if !self.head.ends_with(b"\n") {
                f.write_str("\n")?;
            }
            writeln!(f, "[… {omitted} bytes omitted …]")?;
        }
        f.write_str(&self.tail())
    }
}

impl Serialize for BoundedOutput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BoundedOutput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(BoundedOutput::from_text(&text))
    }
}

/// Shortens `text` to at most `max` bytes (on a char boundary), keeping its head and tail.
pub fn truncate_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut out = BoundedOutput::new(max / 3, max - max / 3);
    out.push(text.as_bytes());
    out.to_string()
}

/// How much of a failure (a gate's output, a verifier's reason) a retry prompt carries.
const FAILURE_PROMPT_BYTES: usize = 8 * 1024;

/// `error` and its causes, each said once: a cause whose text the error already shows is
/// left out (an error whose message names its source, as io errors wrapped by hand do).
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// The first line of `text`, at most 300 bytes: a one-line reason for events and records.
pub fn first_line(text: &str) -> String {
    truncate_middle(text.lines().next().unwrap_or(""), 300)
}

/// The first `shown` items joined by commas, and how many more: `a.rs, b.rs and 3 more`.
pub fn list_some(items: &[String], shown: usize) -> String {
    let head = items[..items.len().min(shown)].join(", ");
    match items.len().saturating_sub(shown) {
        0 => head,
        more => format!("{head} and {more} more"),
    }
}

/// A failure bounded for a retry prompt.
pub fn bounded_failure(text: &str) -> String {
    truncate_middle(text, FAILURE_PROMPT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut out = BoundedOutput::new(4, 4);
        out.push(b"abc");
        assert_eq!(out.to_string(), "abc");
        assert_eq!(out.omitted(), 0);
    }

    #[test]
    fn fills_head_then_tail_without_loss() {
        let mut out = BoundedOutput::new(4, 4);
        out.push(b"0123");
        out.push(b"4567");
        assert_eq!(out.to_string(), "01234567");
    }

    #[test]
    fn many_small_pushes_keep_the_last_bytes() {
        let mut out = BoundedOutput::new(2, 3);
        for b in b"abcdefghij" {
            out.push(&[*b]);
        }
        assert_eq!(out.head(), "ab");
        assert_eq!(out.tail(), "hij");
        assert_eq!(out.omitted(), 5);
        assert_eq!(out.total(), 10);
    }

    #[test]
    fn huge_push_costs_only_the_caps() {
        let mut out = BoundedOutput::new(10, 10);
        out.push(&vec![b'x'; 10 << 20]);
        assert_eq!(out.head.len() + out.tail.len(), 20);
        assert_eq!(out.omitted(), (10 << 20) - 20);
    }

    #[test]
    fn truncate_middle_bounds_length() {
        let text = "a".repeat(1000);
        let short = truncate_middle(&text, 90);
        assert!(short.len() < 140, "{}", short.len());
        assert!(short.contains("omitted"));
        assert_eq!(truncate_middle("abc", 90), "abc");
    }
}
