//! Output as lines, in memory bounded by a line cap: pushed ([`LineSplitter`], what the
//! supervisor's [line listeners](super::LineListener) get) or read ([`LineReader`], with an
//! optional tee).

mod reader;

pub use reader::LineReader;

/// The default line cap: 8 MiB.
pub const DEFAULT_MAX_LINE: usize = 8 << 20;

/// Bytes asked of the reader per read.
const CHUNK: usize = 64 << 10;

/// A buffer this much larger than [`CHUNK`] is shrunk back once it is drained, so one large
/// line does not keep its buffer for the rest of the run.
const SHRINK_ABOVE: usize = 16 * CHUNK;

/// What [`LineReader::next`] yields: a line, or a piece of a line longer than the cap.
///
/// Pieces never include the `\n`. A line longer than the cap arrives as zero or more
/// [`Part`](Piece::Part)s and a final [`LastPart`](Piece::LastPart) (possibly empty), so the
/// consumer can scan it without holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A whole line of at most the cap. The last line of the stream may lack its `\n`.
    Line(&'a [u8]),
    /// The next bytes of a line longer than the cap; more follow.
    Part(&'a [u8]),
    /// The end of a line longer than the cap.
    LastPart(&'a [u8]),
}

/// The line splitting of [`LineReader`], for a consumer that is handed bytes as they come
/// (the supervisor's listener): [`push`](Self::push) a read, then take its pieces with
/// [`next`](Self::next) until there are none, and [`rest`](Self::rest) at the end.
///
/// Its memory is bounded as the reader's is, as long as each push is at most a read chunk
/// (64 KiB) and its pieces are taken before the next push.
#[derive(Debug)]
pub struct LineSplitter {
    /// `buf[start..]` is unconsumed.
    buf: Vec<u8>,
    start: usize,
    /// Bytes after `start` known to hold no `\n`.
    scanned: usize,
    /// Where `start` moves when the caller asks for the next piece.
    consumed: usize,
    max_line: usize,
    /// Inside a line longer than the cap.
    oversized: bool,
}

impl LineSplitter {
    /// A splitter whose whole lines are at most `max_line` bytes (at least 1).
    pub fn new(max_line: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            consumed: 0,
            max_line: max_line.max(1),
            oversized: false,
        }
    }

    /// Adds the bytes of one read.
    pub fn push(&mut self, bytes: &[u8]) {
        self.start = self.consumed;
        self.compact();
        self.grow(bytes.len());
        self.buf.extend_from_slice(bytes);
    }

    /// The next line or piece in what was pushed, if there is one yet.
    #[allow(clippy::should_implement_trait)] // each piece borrows the buffer: no `Iterator`
    pub fn next(&mut self) -> Option<Piece<'_>> {
        self.start = self.consumed;
        let (end, newline) = self.find_piece()?;
        Some(self.take_piece(end, newline))
    }

    /// At the end of the stream: the unterminated last line, or the end of an oversized one.
    pub fn rest(&mut self) -> Option<Piece<'_>> {
        self.start = self.consumed;
        self.take_rest()
    }

    /// The bytes of buffer held now (its capacity).
    #[cfg(test)]
    fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The end of the next piece in `buf[start..]`, and whether a `\n` ends it, if the buffer
    /// holds one; switches to oversized mode when the current line outgrows the cap.
    fn find_piece(&mut self) -> Option<(usize, bool)> {
        let pending = &self.buf[self.start..];
        if let Some(at) = memchr::memchr(b'\n', &pending[self.scanned..]) {
            return Some((self.start + self.scanned + at, true));
        }
        self.scanned = pending.len();
        if pending.len() > self.max_line {
            self.oversized = true;
        }
        // Inside an oversized line every buffered byte is handed out at once.
        (self.oversized && !pending.is_empty()).then_some((self.buf.len(), false))
    }

    /// Hands out `buf[start..end]`. A line that is complete but longer than the cap (it
    /// arrived in one read) is still a [`Piece::LastPart`], so [`Piece::Line`] never exceeds it.
    fn take_piece(&mut self, end: usize, newline: bool) -> Piece<'_> {
        self.consumed = end + usize::from(newline);
        self.scanned = 0;
        let bytes = &self.buf[self.start..end];
        let piece = if !newline {
            Piece::Part(bytes)
        } else if self.oversized || bytes.len() > self.max_line {
            Piece::LastPart(bytes)
        } else {
            Piece::Line(bytes)
        };
        if newline {
            self.oversized = false;
        }
        piece
    }

    fn take_rest(&mut self) -> Option<Piece<'_>> {
        self.consumed = self.buf.len();
        self.scanned = 0;
        let rest = &self.buf[self.start..];
        if self.oversized {
            self.oversized = false;
            Some(Piece::LastPart(rest))
        } else {
            (!rest.is_empty()).then_some(Piece::Line(rest))
        }
    }

    /// Makes room for `more` bytes, doubling as a `Vec` would but never past the cap plus
    /// one chunk (room is made only while the unconsumed bytes are at most the cap).
    fn grow(&mut self, more: usize) {
        let want = self.buf.len() + more;
        if want > self.buf.capacity() {
            let target = (self.buf.capacity() * 2)
                .min(self.max_line.saturating_add(CHUNK))
                .max(want);
            self.buf.reserve_exact(target - self.buf.len());
        }
    }

    /// Drops the consumed bytes; returns how many.
    fn compact(&mut self) -> usize {
        let dropped = self.start;
        if dropped == 0 {
            return 0;
        }
        self.buf.drain(..dropped);
        self.consumed -= dropped;
        self.start = 0;
        if self.buf.capacity() > SHRINK_ABOVE && self.buf.len() < CHUNK {
            self.buf.shrink_to(CHUNK);
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pieces(input: &[u8], max_line: usize) -> Vec<(String, Vec<u8>)> {
        let mut reader = LineReader::new(input).max_line(max_line);
        let mut out = Vec::new();
        while let Some(piece) = reader.next().await.expect("read") {
            out.push(match piece {
                Piece::Line(b) => ("line".to_owned(), b.to_vec()),
                Piece::Part(b) => ("part".to_owned(), b.to_vec()),
                Piece::LastPart(b) => ("last".to_owned(), b.to_vec()),
            });
        }
        out
    }

    fn expect(items: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
        items
            .iter()
            .map(|(kind, bytes)| ((*kind).to_owned(), bytes.to_vec()))
            .collect()
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_cap_is_a_line() {
        let got = pieces(b"abcd\nabcde\n\n\r\n", 4).await;
        let want = expect(&[
            ("line", b"abcd"),
            ("last", b"abcde"),
            ("line", b""),
            ("line", b"\r"),
        ]);
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_line_longer_than_the_buffer_comes_in_parts() {
        let mut input = vec![b'x'; 3 * CHUNK];
        input.extend_from_slice(b"\nend");
        let got = pieces(&input, 10).await;
        let total: usize = got
            .iter()
            .filter(|(k, _)| k != "line")
            .map(|(_, b)| b.len())
            .sum();
        assert_eq!(total, 3 * CHUNK);
        assert!(got.len() > 2);
        assert!(got[..got.len() - 2].iter().all(|(k, _)| k == "part"));
        assert_eq!(got[got.len() - 2].0, "last");
        assert_eq!(got.last(), Some(&("line".to_owned(), b"end".to_vec())));
    }

    #[tokio::test]
    async fn an_oversized_last_line_without_newline_ends_with_an_empty_last_part() {
        let got = pieces(&[b'y'; 100], 10).await;
        assert_eq!(got, expect(&[("part", &[b'y'; 100]), ("last", b"")]));
    }

    #[tokio::test]
    async fn nothing_in_nothing_out() {
        assert!(pieces(b"", 10).await.is_empty());
        assert_eq!(pieces(b"\n", 10).await, expect(&[("line", b"")]));
    }

    #[tokio::test]
    async fn the_buffer_shrinks_back_after_a_large_line() {
        let mut input = vec![b'z'; 4 << 20];
        input.extend_from_slice(b"\nsmall\nsmall\n");
        let mut reader = LineReader::new(input.as_slice());
        let mut largest = 0;
        while reader.next().await.expect("read").is_some() {
            largest = largest.max(reader.buffer_capacity());
        }
        assert!(largest >= 4 << 20);
        assert!(
            reader.buffer_capacity() <= SHRINK_ABOVE,
            "{}",
            reader.buffer_capacity()
        );
    }
}

#[cfg(test)]
mod props;
#[cfg(any(test, feature = "proptest"))]
#[doc(hidden)]
pub mod strategies;
