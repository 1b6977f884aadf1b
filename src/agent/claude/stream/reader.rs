//! A line reader whose memory is bounded by its line cap, with an optional tee.

use std::fmt;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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

/// Reads lines from any [`AsyncRead`] (a child's stdout) in bounded memory.
///
/// A line of up to `max_line` bytes is returned whole; a longer one costs at most `max_line`
/// plus one read chunk (64 KiB) of buffer and is handed out in pieces (see [`Piece`]). Bytes
/// are not decoded, so invalid UTF-8 is passed through untouched.
///
/// Every byte read can be teed to a sink `W` (the run's log file) before it is handed out,
/// oversized lines included. A failing sink does not stop the reading: the first error is kept
/// (see [`tee_error`](Self::tee_error)) and teeing stops.
///
/// # Cancel safety
///
/// [`next`](Self::next) is cancel safe: dropping its future (in a `select!` with an idle
/// timer) loses no byte and tees none twice; the next call resumes where it stopped.
///
/// ```
/// use ralph::__internals::stream::{LineReader, Piece};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let stdout: &[u8] = b"{\"a\":1}\n0123456789\nlast";
/// let mut log = Vec::new();
/// let mut lines = LineReader::new(stdout).max_line(8).tee(&mut log);
/// assert_eq!(lines.next().await?, Some(Piece::Line(b"{\"a\":1}")));
/// // Longer than 8 bytes: a `LastPart`, after the `Part`s of a line too long to buffer.
/// assert_eq!(lines.next().await?, Some(Piece::LastPart(b"0123456789")));
/// // The last line lacks its newline: still a line.
/// assert_eq!(lines.next().await?, Some(Piece::Line(b"last")));
/// assert_eq!(lines.next().await?, None);
/// drop(lines);
/// assert_eq!(log, stdout);
/// # Ok(())
/// # }
/// ```
pub struct LineReader<R, W = tokio::io::Sink> {
    reader: R,
    tee: Option<W>,
    tee_error: Option<io::Error>,
    /// `buf[start..]` is unconsumed; `buf[..teed]` went to the tee.
    buf: Vec<u8>,
    start: usize,
    teed: usize,
    /// Bytes after `start` known to hold no `\n`.
    scanned: usize,
    /// Where `start` moves when the caller asks for the next piece.
    consumed: usize,
    max_line: usize,
    /// Inside a line longer than the cap.
    oversized: bool,
    eof: bool,
    bytes: u64,
}

impl<R, W> fmt::Debug for LineReader<R, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineReader")
            .field("max_line", &self.max_line)
            .field("bytes", &self.bytes)
            .field("buffered", &(self.buf.len() - self.start))
            .field("tee", &self.tee.is_some())
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads `reader` with the default cap ([`DEFAULT_MAX_LINE`]) and no tee.
    pub fn new(reader: R) -> Self {
        LineReader {
            reader,
            tee: None,
            tee_error: None,
            buf: Vec::new(),
            start: 0,
            teed: 0,
            scanned: 0,
            consumed: 0,
            max_line: DEFAULT_MAX_LINE,
            oversized: false,
            eof: false,
            bytes: 0,
        }
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineReader<R, W> {
    /// Sets the line cap (at least 1 byte): longer lines come in [`Piece::Part`]s.
    #[must_use]
    pub fn max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line.max(1);
        self
    }

    /// Tees every byte read to `sink`, replacing any earlier sink.
    #[must_use]
    pub fn tee<T: AsyncWrite + Unpin>(self, sink: T) -> LineReader<R, T> {
        LineReader {
            reader: self.reader,
            tee: Some(sink),
            tee_error: None,
            buf: self.buf,
            start: self.start,
            teed: self.teed,
            scanned: self.scanned,
            consumed: self.consumed,
            max_line: self.max_line,
            oversized: self.oversized,
            eof: self.eof,
            bytes: self.bytes,
        }
    }

    /// The next line or piece, or `None` at the end of the stream.
    ///
    /// # Errors
    ///
    /// A read error of the underlying reader. Errors of the tee are not returned (see
    /// [`tee_error`](Self::tee_error)).
    pub async fn next(&mut self) -> io::Result<Option<Piece<'_>>> {
        self.start = self.consumed;
        loop {
            self.flush_tee().await;
            if let Some((end, newline)) = self.find_piece() {
                return Ok(Some(self.take_piece(end, newline)));
            }
            if self.eof {
                return Ok(self.take_rest());
            }
            self.fill().await?;
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The line cap.
    #[cfg(any(test, feature = "internals"))]
    pub fn line_cap(&self) -> usize {
        self.max_line
    }

    /// The bytes of buffer held now (its capacity): at most the cap plus one read chunk.
    #[cfg(any(test, feature = "internals"))]
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The first error of the tee, after which teeing stopped.
    pub fn tee_error(&self) -> Option<&io::Error> {
        self.tee_error.as_ref()
    }

    /// Flushes the tee (call it at the end: a file sink may hold written bytes). A flush error
    /// is kept as the [`tee_error`](Self::tee_error).
    pub async fn flush(&mut self) {
        self.flush_tee().await;
        if let (Some(tee), None) = (self.tee.as_mut(), &self.tee_error)
            && let Err(e) = tee.flush().await
        {
            self.tee_error = Some(e);
        }
    }

    /// Writes the bytes read but not yet teed. Each successful write is recorded before the
    /// next await, so a cancelled call neither loses nor repeats bytes.
    async fn flush_tee(&mut self) {
        let Some(tee) = self.tee.as_mut() else {
            self.teed = self.buf.len();
            return;
        };
        while self.tee_error.is_none() && self.teed < self.buf.len() {
            match tee.write(&self.buf[self.teed..]).await {
                Ok(0) => self.tee_error = Some(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.teed += n,
                Err(e) => self.tee_error = Some(e),
            }
        }
        if self.tee_error.is_some() {
            self.teed = self.buf.len();
        }
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

    /// At the end of the stream: the unterminated last line, or the end of an oversized one.
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

    /// Reads one chunk after moving the unconsumed bytes to the front.
    async fn fill(&mut self) -> io::Result<()> {
        self.compact();
        self.grow();
        let n = self.reader.read_buf(&mut self.buf).await?;
        self.eof = n == 0;
        self.bytes += n as u64;
        Ok(())
    }

    /// Makes room for one chunk, doubling as a `Vec` would but never past the cap plus one
    /// chunk (`fill` runs only while the unconsumed bytes are at most the cap).
    fn grow(&mut self) {
        let want = self.buf.len() + CHUNK;
        if want > self.buf.capacity() {
            let target = (self.buf.capacity() * 2)
                .min(self.max_line.saturating_add(CHUNK))
                .max(want);
            self.buf.reserve_exact(target - self.buf.len());
        }
    }

    /// Drops consumed bytes (all of them were teed: `fill` runs after `flush_tee`).
    fn compact(&mut self) {
        if self.start == 0 {
            return;
        }
        self.buf.drain(..self.start);
        self.teed -= self.start;
        self.consumed -= self.start;
        self.start = 0;
        if self.buf.capacity() > SHRINK_ABOVE && self.buf.len() < CHUNK {
            self.buf.shrink_to(CHUNK);
        }
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
#[path = "reader_props.rs"]
mod props;
