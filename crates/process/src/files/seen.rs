//! Noticing a state file being deleted, replaced or rewritten behind a writer's back.
//!
//! A writer remembers the file as it last read or wrote it ([`Seen`]: device, inode,
//! length, modification time) and, before its next write, compares. Without this a state
//! file deleted under a running process is silently recreated (or appended to through an
//! unlinked inode), and the run reports success while its state is gone. The modification
//! time catches what the rest cannot: a rewrite in place that keeps the length (`dd
//! conv=notrunc`, an edit of `"s":"p"` to `"s":"a"`). The writer takes a new [`Seen`] after
//! each of its own writes, so only someone else's write changes it.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A file's identity, length and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    /// Seconds and nanoseconds: a rewrite within the same second still counts.
    mtime: (i64, i64),
}

impl Seen {
    /// What `meta` says of the file.
    pub fn of(meta: &fs::Metadata) -> Seen {
        Seen {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }

    /// The file at `path` now; `None` when there is none.
    pub fn at(path: &Path) -> io::Result<Option<Seen>> {
        match fs::metadata(path) {
            Ok(meta) => Ok(Some(Seen::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What happened to a file between `before` and `now`, or `None` if nothing did:
/// `was deleted`, `was created`, `was replaced`, `was truncated (…)`, `grew (…)`,
/// `was modified (…)`.
pub fn change(before: Option<Seen>, now: Option<Seen>) -> Option<String> {
    Some(match (before, now) {
        (before, now) if before == now => return None,
        (Some(_), None) => "was deleted".to_owned(),
        (None, Some(_)) => "was created".to_owned(),
        (Some(b), Some(n)) if (b.dev, b.ino) != (n.dev, n.ino) => "was replaced".to_owned(),
        (Some(b), Some(n)) if n.len < b.len => {
            format!("was truncated (from {} to {} bytes)", b.len, n.len)
        }
        (Some(b), Some(n)) if n.len > b.len => {
            format!("grew (from {} to {} bytes)", b.len, n.len)
        }
        // Same file, same length, a new modification time: written over in place.
        (Some(_), Some(_)) => "was modified (rewritten in place, same length)".to_owned(),
        (None, None) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        assert_eq!(Seen::at(&path).unwrap(), None);
        fs::write(&path, "abc").unwrap();
        let first = Seen::at(&path).unwrap();
        assert_eq!(change(None, first).as_deref(), Some("was created"));
        assert_eq!(change(first, Seen::at(&path).unwrap()), None);
        fs::write(&path, "ab").unwrap();
        let shorter = Seen::at(&path).unwrap();
        assert_eq!(
            change(first, shorter).as_deref(),
            Some("was truncated (from 3 to 2 bytes)")
        );
        assert_eq!(
            change(shorter, first).as_deref(),
            Some("grew (from 2 to 3 bytes)")
        );
        let other = dir.path().join("other");
        fs::write(&other, "ab").unwrap();
        fs::rename(&other, &path).unwrap();
        assert_eq!(
            change(shorter, Seen::at(&path).unwrap()).as_deref(),
            Some("was replaced")
        );
        fs::remove_file(&path).unwrap();
        assert_eq!(change(shorter, None).as_deref(), Some("was deleted"));
    }

    #[test]
    fn a_rewrite_in_place_of_the_same_length_is_named() {
        use std::io::{Seek, SeekFrom, Write};
        use std::time::{Duration, SystemTime};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        fs::write(&path, r#"{"s":"p"}"#).unwrap();
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        // A clock that ticks coarsely could give the rewrite the same time: set one apart.
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .unwrap();
        let before = Seen::at(&path).unwrap();
        let mut file = file;
        file.seek(SeekFrom::Start(6)).unwrap();
        file.write_all(b"a").unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_000_000_000_000_001))
            .unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), r#"{"s":"a"}"#);
        assert_eq!(
            change(before, Seen::at(&path).unwrap()).as_deref(),
            Some("was modified (rewritten in place, same length)")
        );
    }
}
