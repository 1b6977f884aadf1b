//! The ledger's mark: what ralph last left in `.ralph/spend.jsonl`, kept beside it in
//! `spend.jsonl.mark`, so that an edit ralph did not make is found and no money is
//! forgotten.
//!
//! After every line it appends ralph rewrites the mark: the ledger's length, the SHA-256 of
//! those bytes, and every scope's spend. A ledger shorter than its mark, or whose first
//! bytes are not the ones the mark names (a line removed or changed), was edited; each
//! scope whose spend it now shows is below its mark gets a `restored` line for the
//! difference. A ledger longer than its mark with the same first bytes is not an edit: a
//! crash between the ledger's sync and the mark's write leaves one.
//!
//! The mark is not synced: the ledger is the durable record, the mark a guard. A mark lost
//! in a crash is rebuilt from the ledger; an older one sees a longer ledger, which passes.
//! Like the chain over `plan.jsonl` it has no key: it stops a truncation, a person's edit
//! and an agent's casual one, not a forger who rewrites both files.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Spent;
use crate::files::slot::Slot;

/// What ralph last left in the ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Mark {
    /// The ledger's length in bytes (its whole lines).
    pub(super) len: u64,
    /// The SHA-256 of those bytes, in hex.
    pub(super) sha256: String,
    /// Every scope's spend then.
    pub(super) scopes: BTreeMap<String, Spent>,
}

/// The mark of the ledger at `ledger`.
pub(super) fn path_of(ledger: &Path) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".mark");
    PathBuf::from(name)
}

/// The mark at `path`; `None` when there is none, or it cannot be read (a crash can leave
/// it torn: it is rebuilt).
pub(super) fn read(path: &Path) -> Option<Mark> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How `whole` (the ledger's whole lines) differs from what `mark` says ralph left, as a
/// person reads it; `None` when it does not.
pub(super) fn edit(mark: &Mark, whole: &[u8]) -> Option<String> {
    let len = whole.len() as u64;
    if len < mark.len {
        return Some(format!(
            "is shorter than ralph left it ({len} of {} bytes)",
            mark.len
        ));
    }
    let prefix = &whole[..usize::try_from(mark.len).unwrap_or(whole.len())];
    (hex(&Sha256::digest(prefix)) != mark.sha256).then(|| {
        format!(
            "is not what ralph wrote: a line in its first {} bytes was changed or removed",
            mark.len
        )
    })
}

/// The SHA-256 so far, in hex.
pub(super) fn digest(hasher: &Sha256) -> String {
    hex(&hasher.clone().finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The mark's file, kept open: it is rewritten after every line.
#[derive(Debug)]
pub(super) struct Writer(Slot);

impl Writer {
    pub(super) fn open(path: &Path) -> io::Result<Writer> {
        Slot::open(path).map(Writer)
    }

    /// Writes `mark` over the last one (not synced, see the module docs).
    pub(super) fn write(&self, mark: &Mark) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(mark).unwrap_or_default();
        bytes.push(b'\n');
        self.0.write(&bytes)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    fn mark_of(bytes: &[u8]) -> Mark {
        Mark {
            len: bytes.len() as u64,
            sha256: hex(&Sha256::digest(bytes)),
            scopes: BTreeMap::new(),
        }
    }

    #[test]
    fn a_shorter_or_changed_ledger_is_an_edit_and_a_longer_one_is_not() {
        let mark = mark_of(b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(edit(&mark, b"{\"a\":1}\n{\"b\":2}\n"), None);
        assert_eq!(edit(&mark, b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n"), None);
        let short = edit(&mark, b"{\"a\":1}\n").unwrap();
        assert!(
            short.contains("shorter than ralph left it (8 of 16 bytes)"),
            "{short}"
        );
        let changed = edit(&mark, b"{\"a\":1}\n{\"b\":0}\n").unwrap();
        assert!(changed.contains("changed or removed"), "{changed}");
    }

    #[test]
    fn a_mark_is_rewritten_in_place_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_of(&dir.path().join("spend.jsonl"));
        assert!(path.ends_with("spend.jsonl.mark"));
        let writer = Writer::open(&path).unwrap();
        let mut long = mark_of(b"0123456789");
        long.scopes.insert("construct".into(), Spent::default());
        writer.write(&long).unwrap();
        let short = mark_of(b"");
        writer.write(&short).unwrap();
        assert_eq!(read(&path), Some(short));
        std::fs::write(&path, "{torn").unwrap();
        assert_eq!(read(&path), None);
    }
}
