//! A spec changed since the board took it in becomes work.
//!
//! A board holds the work of its spec as the spec was when it was seeded. Edited afterwards
//! (a requirement added after a complete run), the spec would be ignored: the board is
//! complete, and `ralph construct spec.md` answered so at once. So the text the board took
//! in is kept in ralph's state (`.ralph/spec.taken`); a run that finds the spec changed
//! seeds an issue holding the change, as lines removed and added, and takes the new text in.

use std::path::{Path, PathBuf};

use crate::files::atomic;
use crate::runtime::error::Error;
use crate::runtime::workspace;

/// The spec's text as the board last took it in, in ralph's state folder.
const TAKEN: &str = "spec.taken";

/// Lines of either text beyond which no diff is worked out: the whole new text is shown.
const DIFF_LINES: usize = 4000;

/// Unchanged lines shown around each change.
const CONTEXT: usize = 2;

/// The spec `rel` changed since the board took it in: the change, as lines removed (`-`)
/// and added (`+`) with a little context. `None` when it is as taken in, or nothing was
/// taken in yet (a board seeded before ralph kept the text).
pub(crate) fn since_taken(workspace: &Path, rel: &str) -> Option<String> {
    let taken = std::fs::read_to_string(taken_path(workspace)).ok()?;
    let now = std::fs::read_to_string(workspace.join(rel)).ok()?;
    (taken != now).then(|| diff(&taken, &now))
}

/// Takes the spec `rel`'s text in as it is now (after the board holds its work).
///
/// # Errors
///
/// [`Error::Io`] naming the file when it cannot be written.
pub(crate) fn take_in(workspace: &Path, rel: &str) -> Result<(), Error> {
    let Ok(text) = std::fs::read(workspace.join(rel)) else {
        return Ok(());
    };
    let path = taken_path(workspace);
    atomic::replace(&path, &text).map_err(|source| Error::Io { path, source })
}

fn taken_path(workspace: &Path) -> PathBuf {
    workspace::state_dir(workspace).join(TAKEN)
}

/// The lines of `old` removed and of `new` added, each with [`CONTEXT`] unchanged lines
/// around it (`…` for what is left out): a longest common subsequence of lines.
pub(crate) fn diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    if a.len() > DIFF_LINES || b.len() > DIFF_LINES {
        return b.iter().map(|line| format!("+ {line}\n")).collect();
    }
    let marked = edit_script(&a, &b);
    let near_change = |i: usize| {
        let from = i.saturating_sub(CONTEXT);
        let to = (i + CONTEXT + 1).min(marked.len());
        marked[from..to].iter().any(|(sign, _)| *sign != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (i, (sign, line)) in marked.iter().enumerate() {
        if near_change(i) {
            out.push_str(&format!("{sign} {line}\n"));
            skipped = false;
        } else if !skipped {
            out.push_str("…\n");
            skipped = true;
        }
    }
    out
}

/// Every line of `a` and `b` in order, marked ` ` (in both), `-` (only in `a`) or `+`.
fn edit_script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(char, &'a str)> {
    // common[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut common = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = match a[i] == b[j] {
                true => common[i + 1][j + 1] + 1,
                false => common[i + 1][j].max(common[i][j + 1]),
            };
        }
    }
    let (mut i, mut j, mut marked) = (0, 0, Vec::with_capacity(a.len() + b.len()));
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            marked.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || common[i + 1][j] >= common[i][j + 1]) {
            // Removed before added, as diffs read.
            marked.push(('-', a[i]));
            i += 1;
        } else {
            marked.push(('+', b[j]));
            j += 1;
        }
    }
    marked
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn the_diff_shows_removed_and_added_lines_with_a_little_context() {
        let old = "# Greeter\n\na\nb\nc\nd\ne\nf\nWrite hello.txt.\n";
        let new = "# Greeter\n\na\nb\nc\nd\ne\nf\nWrite hello.txt.\nAlso write bye.txt.\n";
        assert_eq!(
            diff(old, new),
            "…\n  f\n  Write hello.txt.\n+ Also write bye.txt.\n"
        );
        assert_eq!(diff("x\ny\n", "x\nz\n"), "  x\n- y\n+ z\n");
    }

    #[test]
    fn a_spec_as_taken_in_has_no_change_and_an_edit_has_one() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        std::fs::create_dir(ws.join(".ralph")).unwrap();
        std::fs::write(ws.join("spec.md"), "one\n").unwrap();
        assert_eq!(since_taken(ws, "spec.md"), None, "nothing taken in yet");
        take_in(ws, "spec.md").unwrap();
        assert_eq!(since_taken(ws, "spec.md"), None);
        std::fs::write(ws.join("spec.md"), "one\ntwo\n").unwrap();
        assert_eq!(
            since_taken(ws, "spec.md").as_deref(),
            Some("  one\n+ two\n")
        );
    }
}
