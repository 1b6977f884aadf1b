//! The work tree as a turn's last finished attempt left it: each path the turn had changed,
//! with a hash of its content.
//!
//! A turn of work in the user's own tree (see `runtime::home`) outlives the run that began
//! it: the next run takes it up as it was left. Without a record of how it was left, that
//! run would commit whatever a person changed in between as the task's work. So after every
//! attempt, and once more when a run stops in order, ralph notes the record; the next run
//! compares the tree with it:
//!
//! - after a stop in order (a signal, a limit) the agents had stopped, so any change beyond
//!   the record is a person's: the run refuses to start and names it;
//! - after a kill or a crash the last attempt was cut short, and what changed beyond the
//!   record is its unjudged work (and whatever a person added since): it is set aside, and
//!   the attempt runs again;
//! - after a commit git refused (a hook, signing), the person fixes what refused it,
//!   perhaps in the work itself: the tree is taken up as it is found.
//!
//! A path put back as the branch has it (a person who dropped the agent's edit) is not a
//! change beyond the record: nothing of it would be committed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The hash recorded for a path that is not there (a deletion).
const ABSENT: &str = "-";

/// The work tree as an attempt left it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TreeRecord {
    /// Each path the turn had changed, relative to the top of the work tree, with its
    /// content's hash.
    pub(crate) paths: BTreeMap<String, String>,
    /// Whether the run that noted it then stopped in order, its agents stopped: any later
    /// change is a person's.
    #[serde(default)]
    pub(crate) stopped: bool,
    /// Whether git then refused ralph's commit of the turn (a hook, signing): the person
    /// fixes what refused it, perhaps in the work itself, so the next run takes the tree up
    /// as it finds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) refused: bool,
}

impl TreeRecord {
    /// The record of `paths` (relative to `top`, the top of the work tree) as they are now.
    pub(crate) fn of(top: &Path, paths: &[String]) -> TreeRecord {
        TreeRecord {
            paths: paths
                .iter()
                .map(|path| (path.clone(), content_hash(&top.join(path))))
                .collect(),
            stopped: false,
            refused: false,
        }
    }

    /// The paths of `now` (the same turn's paths as they are now) that differ from this
    /// record: changed, added or deleted since; none after a refused commit, whose fix is
    /// the person's to make.
    pub(crate) fn beyond(&self, now: &TreeRecord) -> Vec<String> {
        if self.refused {
            return Vec::new();
        }
        now.paths
            .iter()
            .filter(|(path, hash)| self.paths.get(*path) != Some(hash))
            .map(|(path, _)| path.clone())
            .collect()
    }
}

/// A hash of what is at `path`: a file's bytes, a link's target, `dir` for a folder (a
/// nested repository), [`ABSENT`] for nothing. An unreadable file hashes as its error, so it
/// differs from any content.
fn content_hash(path: &Path) -> String {
    let Ok(meta) = path.symlink_metadata() else {
        return ABSENT.to_owned();
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        return format!(
            "link:{}",
            hex(&Sha256::digest(target.as_os_str().as_encoded_bytes()))
        );
    }
    if meta.is_dir() {
        return "dir".to_owned();
    }
    match file_digest(path) {
        Ok(digest) => digest,
        Err(e) => format!("unreadable: {e}"),
    }
}

fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buffer)? {
            0 => return Ok(hex(&hasher.finalize())),
            n => hasher.update(&buffer[..n]),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn a_change_an_addition_and_a_deletion_are_beyond_the_record_and_a_revert_is_not() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path();
        for (name, text) in [
            ("same", "1"),
            ("edited", "1"),
            ("reverted", "1"),
            ("gone", "1"),
        ] {
            std::fs::write(top.join(name), text).unwrap();
        }
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let record = TreeRecord::of(top, &names(&["same", "edited", "reverted", "gone"]));
        std::fs::write(top.join("edited"), "2").unwrap();
        std::fs::write(top.join("new"), "x").unwrap();
        std::fs::remove_file(top.join("gone")).unwrap();
        // `reverted` is as the branch has it now: git no longer lists it as changed.
        let now = TreeRecord::of(top, &names(&["same", "edited", "gone", "new"]));
        assert_eq!(record.beyond(&now), names(&["edited", "gone", "new"]));
    }

    #[test]
    fn a_link_is_recorded_by_its_target_and_a_folder_as_one() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path();
        std::os::unix::fs::symlink("a", top.join("l")).unwrap();
        std::fs::create_dir(top.join("d")).unwrap();
        let record = TreeRecord::of(top, &["l".to_owned(), "d".to_owned()]);
        std::fs::remove_file(top.join("l")).unwrap();
        std::os::unix::fs::symlink("b", top.join("l")).unwrap();
        let now = TreeRecord::of(top, &["l".to_owned(), "d".to_owned()]);
        assert_eq!(record.beyond(&now), vec!["l".to_owned()]);
    }
}
