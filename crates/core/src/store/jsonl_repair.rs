//! `ralph repair`: roll `plan.jsonl` back to the last line ralph wrote, keeping a copy of
//! what is removed, or adopt the lines that follow it (see the module docs of `jsonl`,
//! "Repair").

use std::fs;
use std::path::{Path, PathBuf};

use super::{
    BatchHeader, JsonLine, JsonlShared, PlanLog, ReadError, Unverified, io_error, malformed,
    parse_line, write_marker, write_signed,
};
use crate::files::atomic;
use crate::store::chain;
use crate::store::{Repair, StoreError};

impl JsonlShared {
    /// Rolls the file back to the last line ralph wrote or, with `adopt`, signs what follows
    /// it; `None` when every line verifies (or the file is an earlier ralph's, which the next
    /// load adopts anyway).
    pub(super) fn repair(&self, adopt: bool) -> Result<Option<Repair>, StoreError> {
        let mut slot = self.slot();
        // Whatever happens here, the next call reads the file as it is then.
        *slot = None;
        let bad = match PlanLog::scan(&self.path) {
            Ok(_) => return Ok(None),
            Err(ReadError::Store(e)) => return Err(e),
            Err(ReadError::Unverified(bad)) => bad,
        };
        let bytes = fs::read(&self.path).map_err(|e| io_error(&self.path, e))?;
        let at = usize::try_from(bad.cut.offset)
            .ok()
            .filter(|&at| at <= bytes.len())
            .ok_or_else(|| StoreError::Changed {
                path: self.path.clone(),
                how: "changed during the repair".to_owned(),
            })?;
        let (kept, rest) = bytes.split_at(at);
        let repair = if adopt {
            adopt_lines(&self.path, kept, rest, &bad)?
        } else {
            roll_back(&self.path, rest, bad)?
        };
        Ok(Some(repair))
    }
}

/// Cuts `path` where `removed` starts, after keeping `removed` in a copy beside it.
fn roll_back(path: &Path, removed: &[u8], bad: Unverified) -> Result<Repair, StoreError> {
    let copy = keep_copy(path, removed)?;
    let io = |e| io_error(path, e);
    let file = crate::files::journal::open(path).map_err(io)?;
    crate::files::journal::cut(&file, bad.cut.offset).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(Repair::RolledBack {
        path: path.to_path_buf(),
        from_line: bad.cut.line,
        lines: count_lines(removed),
        copy,
        reason: bad.how,
    })
}

/// Writes `bytes` to a new `<path>.removed-<UTC time>` beside it, durably, before anything
/// is cut.
fn keep_copy(path: &Path, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    atomic::keep_copy(path, "removed", bytes).map_err(|(copy, e)| io_error(&copy, e))
}

/// Replaces `path` with `kept` and the lines of `rest`, each signed anew.
fn adopt_lines(
    path: &Path,
    kept: &[u8],
    rest: &[u8],
    bad: &Unverified,
) -> Result<Repair, StoreError> {
    let encode = |source| StoreError::Encode {
        path: path.to_path_buf(),
        source,
    };
    let mut out = kept.to_vec();
    let mut last = bad.cut.last;
    let mut lines = 0;
    let pieces = rest.split_inclusive(|&b| b == b'\n');
    for (number, piece) in (bad.cut.line..).zip(pieces) {
        let terminated = piece.ends_with(b"\n");
        let content = piece.strip_suffix(b"\n").unwrap_or(piece);
        // A line ralph signed once (a later one, after the line that broke the chain) is
        // read without its old link, as it was signed.
        let object = match chain::split(content) {
            Some((head, _)) => [head, b"}"].concat(),
            None => content.to_vec(),
        };
        match parse_line(&object) {
            Ok(JsonLine::Blank) => continue,
            Ok(JsonLine::Batch(n)) => {
                last = Some(write_signed(&mut out, &BatchHeader::new(n), last).map_err(encode)?)
            }
            Ok(JsonLine::Record(change)) => {
                last = Some(write_signed(&mut out, &change, last).map_err(encode)?)
            }
            // A write a crash cut short stays what it is: the next load drops it.
            Err(_) if !terminated => {
                out.extend_from_slice(piece);
                continue;
            }
            Err(message) => {
                let message = format!("cannot adopt it: {message}");
                return Err(malformed(path, number, message));
            }
        }
        lines += 1;
    }
    atomic::replace(path, &out).map_err(|e| io_error(path, e))?;
    write_marker(path)?;
    Ok(Repair::Adopted {
        path: path.to_path_buf(),
        from_line: bad.cut.line,
        lines,
    })
}

/// Lines in `bytes`, a last one without its newline included.
fn count_lines(bytes: &[u8]) -> usize {
    bytes.split_inclusive(|&b| b == b'\n').count()
}
