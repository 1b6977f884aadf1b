//! Bounded excerpts of log files: the first and the last lines, never the whole file.
//!
//! DECOMPOSE shows a killed run's log to an agent. Handing it the whole log once blew up the
//! agent's context, so it gets an [`Excerpt`]: by default the first [`DEFAULT_HEAD_LINES`]
//! and the last [`DEFAULT_TAIL_LINES`] lines, each cut to [`MAX_LINE_CHARS`] characters.
//!
//! Reading is bounded too, whatever the file's size (a 2 GB log, a single 1 GB line): at
//! most 1 MiB is scanned from the start for the head, at most 1 MiB from the end for the tail,
//! and the omitted middle is only scanned (to count its lines) when it is at most 16 MiB.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

/// Lines DECOMPOSE shows from the start of a log.
pub const DEFAULT_HEAD_LINES: usize = 50;
/// Lines DECOMPOSE shows from the end of a log.
pub const DEFAULT_TAIL_LINES: usize = 100;
/// Characters kept of one line; a longer line is cut and ends with [`TRUNCATED`].
pub const MAX_LINE_CHARS: usize = 2_000;
/// Appended to a line that was cut.
pub const TRUNCATED: &str = " [… line truncated]";
/// Prefixed to the first tail line when its start is not shown.
pub const CONTINUED: &str = "[…] ";

/// Bytes read of one line: enough for [`MAX_LINE_CHARS`] characters of up to four bytes.
const LINE_BYTES: usize = MAX_LINE_CHARS * 4;
/// Bytes scanned from the start for the head, and from the end for the tail.
const SCAN_BYTES: u64 = 1 << 20;
/// The largest omitted middle whose lines are counted.
const COUNT_BYTES: u64 = 16 << 20;
/// Read size for the backward tail search and the line count.
const CHUNK: usize = 64 << 10;

/// The start and the end of a log file, and how much lies between them.
///
/// Head and tail never overlap: a file short enough is all head (and tail), with nothing
/// omitted. Lines are decoded as lossy UTF-8, without their `\n` or `\r\n`.
///
/// ```
/// use ralph_loop_process::logfile::excerpt;
///
/// # fn main() -> std::io::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("run.log");
/// let log: String = (1..=10).map(|n| format!("line {n}\n")).collect();
/// std::fs::write(&path, log)?;
///
/// let short = excerpt(&path, 2, 3)?;
/// assert_eq!(short.omitted_lines, Some(5));
/// assert_eq!(
///     short.to_string(),
///     "line 1\nline 2\n[… 5 lines (35 bytes) omitted …]\nline 8\nline 9\nline 10\n",
/// );
/// assert_eq!(excerpt(&path, 5, 5)?.omitted_bytes, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Excerpt {
    /// The first lines.
    pub head: Vec<String>,
    /// The last lines, after the head.
    pub tail: Vec<String>,
    /// Bytes between head and tail that are not shown; 0 when every line is shown.
    pub omitted_bytes: u64,
    /// Line breaks in the omitted bytes; `None` when they were too many bytes to count.
    pub omitted_lines: Option<u64>,
    /// The file's size when it was opened.
    pub total_bytes: u64,
}

impl fmt::Display for Excerpt {
    /// The head, a line saying what was omitted (if anything), and the tail; every line
    /// ends with `\n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.head {
            writeln!(f, "{line}")?;
        }
        let bytes = self.omitted_bytes;
        match self.omitted_lines {
            _ if bytes == 0 => {}
            Some(1) => writeln!(f, "[… 1 line ({bytes} bytes) omitted …]")?,
            Some(lines @ 2..) => writeln!(f, "[… {lines} lines ({bytes} bytes) omitted …]")?,
            _ => writeln!(f, "[… {bytes} bytes omitted …]")?,
        }
        for line in &self.tail {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// The first `head` and last `tail` lines of the file at `path`, in bounded memory.
///
/// Fewer lines are returned when the head's lines fill the 1 MiB scanned from the start, or
/// the tail's lines fill the 1 MiB scanned from the end; the first tail line then starts
/// with [`CONTINUED`] if its beginning is not shown.
///
/// # Errors
///
/// Any error opening or reading the file, e.g. [`ErrorKind::NotFound`].
pub fn excerpt(path: &Path, head: usize, tail: usize) -> io::Result<Excerpt> {
    let file = File::open(path)?;
    let total_bytes = file.metadata()?.len();
    let (head, head_end) = read_head(&file, total_bytes, head)?;
    // A tail reaching back into the head starts where the head ended: no line shows twice.
    let tail_start = find_tail_start(&file, total_bytes, tail)?.max(head_end);
    Ok(Excerpt {
        head,
        tail: read_tail(&file, tail_start, total_bytes)?,
        omitted_bytes: tail_start - head_end,
        omitted_lines: count_newlines(&file, head_end, tail_start)?,
        total_bytes,
    })
}

/// Reads up to `count` lines from the start, scanning at most [`SCAN_BYTES`]; returns them
/// and the offset where the head ends.
fn read_head(file: &File, total: u64, count: usize) -> io::Result<(Vec<String>, u64)> {
    let mut reader = BufReader::new(file.take(total.min(SCAN_BYTES)));
    let mut lines = Vec::new();
    let mut end = 0;
    while lines.len() < count {
        let Some(line) = read_line(&mut reader)? else {
            break;
        };
        end += line.len;
        // A line without its newline before the end of the file ran into the scan limit.
        let cut = line.cut || (!line.ended && end < total);
        lines.push(render(&line.kept, cut));
    }
    Ok((lines, end))
}

/// One line read from the head: at most [`LINE_BYTES`] of it are kept.
#[derive(Debug)]
struct HeadLine {
    /// The start of the line, without its line ending.
    kept: Vec<u8>,
    /// Bytes consumed, line ending included.
    len: u64,
    /// Whether the line ended with `\n` (and not with the end of the reader).
    ended: bool,
    /// Whether the line is longer than `kept`.
    cut: bool,
}

/// Reads one line, keeping its first [`LINE_BYTES`] and skipping the rest without storing
/// it; `None` at the end of the reader.
fn read_line(reader: &mut impl BufRead) -> io::Result<Option<HeadLine>> {
    let mut kept = Vec::new();
    let mut len: u64 = 0;
    let ended = loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break false;
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let used = newline.map_or(buf.len(), |at| at + 1);
        let room = LINE_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..used.min(room)]);
        reader.consume(used);
        len += used as u64;
        if newline.is_some() {
            break true;
        }
    };
    if len == 0 {
        return Ok(None);
    }
    let content = len - u64::from(ended);
    if ended && kept.last() == Some(&b'\n') {
        kept.pop();
    }
    let cut = content > kept.len() as u64;
    if !cut && kept.last() == Some(&b'\r') {
        kept.pop();
    }
    Ok(Some(HeadLine {
        kept,
        len,
        ended,
        cut,
    }))
}

/// The offset where the last `count` lines start, searching backwards in chunks but no
/// further than [`SCAN_BYTES`] from the end (the result may then fall inside a line).
fn find_tail_start(mut file: &File, total: u64, count: usize) -> io::Result<u64> {
    if count == 0 {
        return Ok(total);
    }
    let floor = total.saturating_sub(SCAN_BYTES);
    let mut buf = vec![0; CHUNK];
    let mut end = total;
    let mut newlines = 0;
    while end > floor {
        let start = end.saturating_sub(CHUNK as u64).max(floor);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        for (i, _) in chunk.iter().enumerate().rev().filter(|(_, b)| **b == b'\n') {
            let at = start + i as u64;
            // The file's final newline ends the last line; it does not start another.
            if at + 1 < total {
                newlines += 1;
                if newlines == count {
                    return Ok(at + 1);
                }
            }
        }
        end = start;
    }
    Ok(floor)
}

/// The lines from `start` to `total` (at most [`SCAN_BYTES`]).
fn read_tail(mut file: &File, start: u64, total: u64) -> io::Result<Vec<String>> {
    if start >= total {
        return Ok(Vec::new());
    }
    // One byte more, to tell whether `start` begins a line.
    let from = start.saturating_sub(1);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.take(total - from).read_to_end(&mut bytes)?;
    let continues = start > 0 && bytes.first() != Some(&b'\n');
    let mut body = bytes.get(usize::from(start > 0)..).unwrap_or_default();
    if continues {
        body = skip_partial_char(body);
    }
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let mut lines: Vec<String> = body
        .split(|&b| b == b'\n')
        .map(|line| render(line.strip_suffix(b"\r").unwrap_or(line), false))
        .collect();
    if let Some(first) = lines.first_mut().filter(|_| continues) {
        first.insert_str(0, CONTINUED);
    }
    Ok(lines)
}

/// Drops the UTF-8 continuation bytes a cut left at the start, which would decode as `�`.
fn skip_partial_char(bytes: &[u8]) -> &[u8] {
    let partial = bytes.iter().take(3).take_while(|&&b| b & 0xC0 == 0x80);
    &bytes[partial.count()..]
}

/// Line breaks between `from` and `to`, or `None` if that is more than [`COUNT_BYTES`].
fn count_newlines(mut file: &File, from: u64, to: u64) -> io::Result<Option<u64>> {
    if to - from > COUNT_BYTES {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(from))?;
    let mut reader = file.take(to - from);
    let mut buf = vec![0; CHUNK];
    let mut count = 0;
    loop {
        let read = match reader.read(&mut buf) {
            Ok(0) => return Ok(Some(count)),
            Ok(read) => read,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        count += buf[..read].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// Decodes a line as lossy UTF-8 and cuts it to [`MAX_LINE_CHARS`]; `cut` says the bytes are
/// already only the start of the line.
fn render(line: &[u8], cut: bool) -> String {
    let cut = cut || line.len() > LINE_BYTES;
    let text = String::from_utf8_lossy(&line[..line.len().min(LINE_BYTES)]);
    // LINE_BYTES always decode to at least MAX_LINE_CHARS chars, so a char split by the byte
    // limit (decoded as `�`) is never among the chars kept.
    let (text, cut) = match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => (&text[..at], true),
        None => (&*text, cut),
    };
    let mut out = String::with_capacity(text.len() + TRUNCATED.len());
    out.push_str(text);
    if cut {
        out.push_str(TRUNCATED);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tempfile::TempDir;

    use super::*;

    /// A temporary directory holding `run.log` with `bytes`.
    fn log(bytes: &[u8]) -> (TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn numbered(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("line {i}")).collect()
    }

    fn text(lines: &[String], trailing_newline: bool) -> String {
        let mut text = lines.join("\n");
        if trailing_newline && !lines.is_empty() {
            text.push('\n');
        }
        text
    }

    #[test]
    fn short_file_is_whole_without_duplicates() {
        let lines = numbered(10);
        let (_dir, path) = log(text(&lines, true).as_bytes());
        let got = excerpt(&path, DEFAULT_HEAD_LINES, DEFAULT_TAIL_LINES).unwrap();
        assert_eq!(got.head, lines);
        assert!(got.tail.is_empty());
        assert_eq!((got.omitted_bytes, got.omitted_lines), (0, Some(0)));
        assert_eq!(got.to_string(), text(&lines, true));
    }

    #[test]
    fn every_size_around_the_boundaries() {
        let (head, tail) = (2, 3);
        for n in 0..=8 {
            for trailing_newline in [true, false] {
                let lines = numbered(n);
                let (_dir, path) = log(text(&lines, trailing_newline).as_bytes());
                let got = excerpt(&path, head, tail).unwrap();
                let shown: Vec<_> = got.head.iter().chain(&got.tail).cloned().collect();
                let case = format!("{n} lines, trailing newline {trailing_newline}");
                assert_eq!(got.head, lines[..n.min(head)], "{case}");
                if n <= head + tail {
                    assert_eq!(shown, lines, "{case}");
                    assert_eq!(got.omitted_bytes, 0, "{case}");
                } else {
                    assert_eq!(got.tail, lines[n - tail..], "{case}");
                    assert_eq!(got.omitted_lines, Some((n - head - tail) as u64), "{case}");
                }
            }
        }
    }

    #[test]
    fn long_file_keeps_both_ends() {
        let lines = numbered(10_000);
        let (_dir, path) = log(text(&lines, true).as_bytes());
        let got = excerpt(&path, DEFAULT_HEAD_LINES, DEFAULT_TAIL_LINES).unwrap();
        assert_eq!(got.head, lines[..50]);
        assert_eq!(got.tail, lines[9_900..]);
        assert_eq!(got.omitted_lines, Some(9_850));
        let shown: usize = got.head.iter().chain(&got.tail).map(|l| l.len() + 1).sum();
        assert_eq!(got.omitted_bytes + shown as u64, got.total_bytes);
        assert!(got.to_string().contains("\nline 50\n[… 9850 lines ("));
    }

    #[test]
    fn no_trailing_newline() {
        let (_dir, path) = log(b"a\nb\nc");
        let got = excerpt(&path, 1, 1).unwrap();
        assert_eq!((got.head, got.tail), (vec!["a".into()], vec!["c".into()]));
        assert_eq!(got.omitted_lines, Some(1));
    }

    #[test]
    fn blank_last_line_is_a_line() {
        let (_dir, path) = log(b"a\nb\n\n");
        let got = excerpt(&path, 1, 1).unwrap();
        assert_eq!(got.tail, vec![String::new()]);
        assert_eq!(got.omitted_lines, Some(1));
    }

    #[test]
    fn crlf_endings_are_dropped() {
        let (_dir, path) = log(b"a\r\nb\r\nc\r\nd\r\n");
        let got = excerpt(&path, 1, 1).unwrap();
        assert_eq!((got.head, got.tail), (vec!["a".into()], vec!["d".into()]));
    }

    #[test]
    fn empty_file() {
        let (_dir, path) = log(b"");
        let got = excerpt(&path, DEFAULT_HEAD_LINES, DEFAULT_TAIL_LINES).unwrap();
        assert!(got.head.is_empty() && got.tail.is_empty());
        assert_eq!((got.total_bytes, got.omitted_bytes), (0, 0));
        assert_eq!(got.to_string(), "");
    }

    #[test]
    fn missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = excerpt(&dir.path().join("nope.log"), 1, 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn zero_head_or_tail() {
        let lines = numbered(5);
        let (_dir, path) = log(text(&lines, true).as_bytes());
        let only_tail = excerpt(&path, 0, 2).unwrap();
        assert_eq!(
            (only_tail.head.len(), only_tail.tail),
            (0, lines[3..].to_vec())
        );
        let only_head = excerpt(&path, 2, 0).unwrap();
        assert_eq!(
            (only_head.head, only_head.tail.len()),
            (lines[..2].to_vec(), 0)
        );
        assert_eq!(only_head.omitted_lines, Some(3));
        let nothing = excerpt(&path, 0, 0).unwrap();
        assert_eq!(nothing.to_string(), "[… 5 lines (35 bytes) omitted …]\n");
    }

    #[test]
    fn non_utf8_is_decoded_lossily() {
        let (_dir, path) = log(b"ok \xff\xfe\nmid\nend \xc3(\n");
        let got = excerpt(&path, 1, 1).unwrap();
        assert_eq!(got.head, vec!["ok \u{fffd}\u{fffd}"]);
        assert_eq!(got.tail, vec!["end \u{fffd}("]);
    }

    #[test]
    fn long_lines_are_cut_at_max_chars() {
        let fits = "é".repeat(MAX_LINE_CHARS);
        let long = "é".repeat(MAX_LINE_CHARS + 1);
        let (_dir, path) = log(format!("{long}\n{fits}\n{fits}\n{long}\n").as_bytes());
        let got = excerpt(&path, 2, 2).unwrap();
        let cut = fits.clone() + TRUNCATED;
        assert_eq!(got.head, vec![cut.clone(), fits.clone()]);
        assert_eq!(got.tail, vec![fits, cut]);
    }

    #[test]
    fn tail_stops_at_the_scan_limit() {
        // 200 lines of 20 kB: the last 100 do not fit in the 1 MiB read from the end.
        let lines: Vec<String> = (0..200)
            .map(|i| format!("{i:03}{}", "é".repeat(10_000)))
            .collect();
        let (_dir, path) = log(text(&lines, true).as_bytes());
        let got = excerpt(&path, 1, 100).unwrap();
        assert!(got.tail.len() < 100);
        let first = &got.tail[0];
        assert!(
            first.starts_with(CONTINUED) && !first.contains('\u{fffd}'),
            "{first:.20}"
        );
        assert!(got.tail.last().unwrap().starts_with("199é"));
        assert!(got.to_string().len() < 100 * (LINE_BYTES + 100));
    }

    /// A sparse file of `len` zero bytes (no newline) between `head` and `tail`.
    fn sparse(head: &[u8], len: u64, tail: &[u8]) -> (TempDir, std::path::PathBuf) {
        let (dir, path) = log(head);
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(head.len() as u64 + len).unwrap();
        file.seek(SeekFrom::End(0)).unwrap();
        file.write_all(tail).unwrap();
        (dir, path)
    }

    #[test]
    fn two_gigabyte_single_line_is_bounded() {
        let (_dir, path) = sparse(b"", 2 << 30, b"");
        let got = excerpt(&path, DEFAULT_HEAD_LINES, DEFAULT_TAIL_LINES).unwrap();
        assert_eq!(got.total_bytes, 2 << 30);
        assert_eq!(got.head, vec!["\0".repeat(MAX_LINE_CHARS) + TRUNCATED]);
        assert_eq!(got.tail, vec![CONTINUED.to_owned() + &got.head[0]]);
        assert_eq!(got.omitted_lines, None);
        assert_eq!(got.omitted_bytes, (2 << 30) - 2 * SCAN_BYTES);
        let shown = got.to_string();
        assert!(shown.contains(&format!("[… {} bytes omitted …]", got.omitted_bytes)));
        assert!(shown.len() < 3 * LINE_BYTES);
    }

    #[test]
    fn huge_line_between_normal_lines() {
        let (_dir, path) = sparse(b"start\n", 1 << 30, b"\nlast 1\nlast 2\n");
        let got = excerpt(&path, DEFAULT_HEAD_LINES, DEFAULT_TAIL_LINES).unwrap();
        assert_eq!(got.head[0], "start");
        assert_eq!(got.head[1], "\0".repeat(MAX_LINE_CHARS) + TRUNCATED);
        assert_eq!(got.head.len(), 2, "the huge line used up the head's scan");
        assert_eq!(&got.tail[1..], ["last 1", "last 2"]);
        assert!(got.tail[0].starts_with(CONTINUED) && got.tail[0].ends_with(TRUNCATED));
    }
}
