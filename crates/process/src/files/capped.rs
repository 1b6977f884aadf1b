//! A log file that keeps the head and the tail of what is written to it, and counts the
//! middle: an agent or a gate that prints 100 MB costs a few MiB of disk.
//!
//! The first [`HEAD`] bytes are written as they come and never touched again. After them,
//! bytes are appended until the file holds [`TAIL`] bytes twice over; then the older half
//! is dropped: the file is cut back to the head, a marker line saying how many bytes were
//! skipped is written, and the newest [`TAIL`] bytes after it. So the file never exceeds
//! head + marker + 2 × tail, even if ralph is killed mid-run, and once the writer is
//! [`finish`](CappedLog::finish)ed it holds at most head + marker + tail. The skipped bytes
//! are counted across every cut, and the marker always tells the total.
//!
//! Writing stays an append in the common case (a log under the head): no cost for the
//! logs of ordinary runs.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;

/// Bytes kept from the start of a log.
pub const HEAD: u64 = 1 << 20;
/// Bytes kept from the end of a log.
pub const TAIL: u64 = 4 << 20;

/// An append-only file that keeps its head and its tail (see the module docs).
#[derive(Debug)]
pub struct CappedLog {
    file: File,
    head: u64,
    tail: u64,
    /// The file's length.
    len: u64,
    /// The marker's length in the file, 0 before the first cut.
    marker: u64,
    /// Bytes dropped so far.
    skipped: u64,
}

impl CappedLog {
    /// Appends to `file` (opened for reading and appending), which may already hold bytes:
    /// they count toward its head.
    pub fn new(file: File) -> io::Result<Self> {
        Self::with_limits(file, HEAD, TAIL)
    }

    /// A log of `file` that keeps its first `head` and its last `tail` bytes.
    pub fn with_limits(file: File, head: u64, tail: u64) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(CappedLog {
            file,
            head,
            tail: tail.max(1),
            len,
            marker: 0,
            skipped: 0,
        })
    }

    /// Appends `bytes`, dropping the older half of the tail when it grew to twice its size.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        if self.len > self.head + self.marker + 2 * self.tail {
            self.cut()?;
        }
        Ok(())
    }

    /// Leaves the file at head + marker + tail at most.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.len > self.head + self.marker + self.tail {
            self.cut()?;
        }
        Ok(())
    }

    /// Cuts the file back to its head, then writes the marker and the newest `tail` bytes.
    fn cut(&mut self) -> io::Result<()> {
        let mut kept = vec![0; self.tail as usize];
        self.file.read_exact_at(&mut kept, self.len - self.tail)?;
        self.skipped += self.len - self.tail - self.head - self.marker;
        let marker = format!(
            "\n[… {} bytes of output skipped: a log keeps its first {} and its last {} bytes …]\n",
            self.skipped, self.head, self.tail
        );
        self.file.set_len(self.head)?;
        self.file.write_all(marker.as_bytes())?;
        self.file.write_all(&kept)?;
        self.marker = marker.len() as u64;
        self.len = self.head + self.marker + self.tail;
        Ok(())
    }
}

impl Drop for CappedLog {
    /// Best effort: a writer dropped without [`finish`](CappedLog::finish) (the stage log
    /// when its run ends) is cut all the same.
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[allow(clippy::disallowed_methods)] // a log, as the supervisor opens one
    fn open(path: &std::path::Path) -> File {
        OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_short_log_is_written_as_it_comes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = CappedLog::with_limits(open(&path), 10, 10).unwrap();
        log.write_all(b"hello ").unwrap();
        log.write_all(b"world").unwrap();
        log.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
    }

    #[test]
    fn a_long_log_keeps_its_head_and_tail_and_counts_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = CappedLog::with_limits(open(&path), 4, 6).unwrap();
        let text: Vec<u8> = (0..1000u32).map(|n| b'a' + (n % 26) as u8).collect();
        for chunk in text.chunks(7) {
            log.write_all(chunk).unwrap();
            let len = std::fs::metadata(&path).unwrap().len();
            assert!(len <= 4 + 100 + 12, "{len}");
        }
        log.finish().unwrap();
        let kept = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        let tail = std::str::from_utf8(&text[994..]).unwrap();
        assert!(
            kept.starts_with("abcd\n[… 990 bytes of output skipped"),
            "{kept}"
        );
        assert!(kept.ends_with(&format!("…]\n{tail}")), "{kept}");
    }

    #[test]
    fn bytes_already_in_the_file_count_toward_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        std::fs::write(&path, b"0123").unwrap();
        let mut log = CappedLog::with_limits(open(&path), 4, 2).unwrap();
        log.write_all(b"abcdef").unwrap();
        log.finish().unwrap();
        let kept = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        assert!(kept.starts_with("0123\n[… 4 bytes"), "{kept}");
        assert!(kept.ends_with("…]\nef"), "{kept}");
    }
}
