//! A small state file rewritten in place after every change and never synced: a guard
//! beside a durable record (the spend ledger's mark), which a crash may leave stale, never
//! worth an fsync per write. What a torn or lost one costs is the guard's to say.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// The file, kept open between writes.
#[derive(Debug)]
pub struct Slot {
    file: File,
}

impl Slot {
    /// Opens `path`, creating it when missing; what it holds stays until the first write.
    pub fn open(path: &Path) -> io::Result<Slot> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)?;
        Ok(Slot { file })
    }

    /// Writes `bytes` over what the file held (two syscalls, not synced).
    pub fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, 0)?;
        self.file.set_len(bytes.len() as u64)
    }
}
