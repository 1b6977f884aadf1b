//! [`LineReader`]: the splitter over an [`AsyncRead`], with an optional tee.

use std::fmt;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{CHUNK, DEFAULT_MAX_LINE, LineSplitter, Piece};

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
/// use ralph_loop_process::process::lines::{LineReader, Piece};
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
    lines: LineSplitter,
    /// `lines.buf[..teed]` went to the tee.
    teed: usize,
    eof: bool,
    bytes: u64,
}

impl<R, W> fmt::Debug for LineReader<R, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineReader")
            .field("max_line", &self.lines.max_line)
            .field("bytes", &self.bytes)
            .field("buffered", &(self.lines.buf.len() - self.lines.start))
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
            lines: LineSplitter::new(DEFAULT_MAX_LINE),
            teed: 0,
            eof: false,
            bytes: 0,
        }
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineReader<R, W> {
    /// Sets the line cap (at least 1 byte): longer lines come in [`Piece::Part`]s.
    #[must_use]
    pub fn max_line(mut self, max_line: usize) -> Self {
        self.lines.max_line = max_line.max(1);
        self
    }

    /// Tees every byte read to `sink`, replacing any earlier sink.
    #[must_use]
    pub fn tee<T: AsyncWrite + Unpin>(self, sink: T) -> LineReader<R, T> {
        LineReader {
            reader: self.reader,
            tee: Some(sink),
            tee_error: None,
            lines: self.lines,
            teed: self.teed,
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
        self.lines.start = self.lines.consumed;
        loop {
            self.flush_tee().await;
            if let Some((end, newline)) = self.lines.find_piece() {
                return Ok(Some(self.lines.take_piece(end, newline)));
            }
            if self.eof {
                return Ok(self.lines.take_rest());
            }
            self.fill().await?;
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The line cap.
    pub fn line_cap(&self) -> usize {
        self.lines.max_line
    }

    /// The bytes of buffer held now (its capacity): at most the cap plus one read chunk.
    pub fn buffer_capacity(&self) -> usize {
        self.lines.buf.capacity()
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
        let buf = &self.lines.buf;
        let Some(tee) = self.tee.as_mut() else {
            self.teed = buf.len();
            return;
        };
        while self.tee_error.is_none() && self.teed < buf.len() {
            match tee.write(&buf[self.teed..]).await {
                Ok(0) => self.tee_error = Some(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.teed += n,
                Err(e) => self.tee_error = Some(e),
            }
        }
        if self.tee_error.is_some() {
            self.teed = buf.len();
        }
    }

    /// Reads one chunk after moving the unconsumed bytes to the front (all of the consumed
    /// ones were teed: `fill` runs after `flush_tee`).
    async fn fill(&mut self) -> io::Result<()> {
        self.teed -= self.lines.compact();
        self.lines.grow(CHUNK);
        let n = self.reader.read_buf(&mut self.lines.buf).await?;
        self.eof = n == 0;
        self.bytes += n as u64;
        Ok(())
    }
}
