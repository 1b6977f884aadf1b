//! The planner's scratchpad (seed 002's `SCRATCHPAD.md`): its memory across planning runs,
//! of one spec and the next.
//!
//! The planner runs read-only, so it cannot write the file itself. It hands its notes back
//! in its final answer instead, as a section between two whole lines, before the magic
//! phrase:
//!
//! ```text
//! # Plan: greeter
//! …
//! <SCRATCHPAD>
//! greet.sh lives in bin/; tests use bats.
//! </SCRATCHPAD>
//! PLAN_COMPLETE
//! ```
//!
//! ralph takes the section out of the plan and writes it, whole, as the new scratchpad in
//! its state folder (`.ralph/SCRATCHPAD.md`, out of the user's `git status`); the next
//! planner's prompt shows it. An answer without the section leaves the scratchpad as it
//! was; an empty section clears it. A person may edit the file between runs.

use std::path::{Path, PathBuf};

use crate::output::truncate_middle;
use crate::runtime::error::Error;

/// How much of the scratchpad is kept, and shown in the planner's prompt.
pub(crate) const BYTES: usize = 8 * 1024;
/// The line that opens the section of the planner's answer.
const OPEN: &str = "<SCRATCHPAD>";
/// The line that closes it.
const CLOSE: &str = "</SCRATCHPAD>";

/// The scratchpad of the workspace whose state folder is `state_dir`.
pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("SCRATCHPAD.md")
}

/// The scratchpad's content, bounded; `None` when there is none or it is blank. Read as
/// bytes: a non-UTF-8 scratchpad is shown lossily rather than silently dropped.
pub(crate) fn read(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    (!text.is_empty()).then(|| truncate_middle(text, BYTES))
}

/// Splits the planner's `answer` into the answer without its scratchpad section and the
/// section's content (`None` when it has none; `Some("")` for an empty one). The last
/// opening line counts, closed by the next closing line.
///
/// # Errors
///
/// Why the section cannot be read: an opening line that is never closed.
pub(crate) fn split(answer: &str) -> Result<(String, Option<String>), String> {
    let lines: Vec<&str> = answer.lines().collect();
    let Some(open) = lines.iter().rposition(|l| l.trim() == OPEN) else {
        return Ok((answer.to_owned(), None));
    };
    let Some(close) = lines[open + 1..].iter().position(|l| l.trim() == CLOSE) else {
        return Err(format!(
            "the answer opens a {OPEN} section but has no {CLOSE} line after it"
        ));
    };
    let close = open + 1 + close;
    let notes = lines[open + 1..close].join("\n").trim().to_owned();
    let rest: Vec<&str> = lines[..open]
        .iter()
        .chain(&lines[close + 1..])
        .copied()
        .collect();
    Ok((rest.join("\n"), Some(notes)))
}

/// Writes `notes` as the scratchpad at `path` (atomically; bounded to [`BYTES`]), or
/// removes it when they are blank.
///
/// # Errors
///
/// [`Error::Io`] naming the file when it cannot be written or removed.
pub(crate) fn save(path: &Path, notes: &str) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if notes.trim().is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        };
    }
    let mut text = truncate_middle(notes.trim(), BYTES);
    text.push('\n');
    crate::files::atomic::replace(path, text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_taken_out_of_the_answer() {
        let answer =
            "# Plan\n1. x\n<SCRATCHPAD>\nnote one\n\nnote two\n</SCRATCHPAD>\nPLAN_COMPLETE\n";
        let (rest, notes) = split(answer).unwrap();
        assert_eq!(rest, "# Plan\n1. x\nPLAN_COMPLETE");
        assert_eq!(notes.as_deref(), Some("note one\n\nnote two"));
    }

    #[test]
    fn no_section_leaves_the_answer_and_an_unclosed_one_is_refused() {
        let (rest, notes) = split("# Plan\nPLAN_COMPLETE").unwrap();
        assert_eq!((rest.as_str(), notes), ("# Plan\nPLAN_COMPLETE", None));
        // In prose, the marker is no section.
        assert_eq!(split("see <SCRATCHPAD> below").unwrap().1, None);
        let err = split("# Plan\n<SCRATCHPAD>\nnotes\nPLAN_COMPLETE").unwrap_err();
        assert!(err.contains("no </SCRATCHPAD> line"), "{err}");
    }

    #[test]
    fn blank_notes_remove_the_file_and_long_ones_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        save(&file, &"n".repeat(BYTES * 2)).unwrap();
        assert!(std::fs::read(&file).unwrap().len() <= BYTES + 64);
        save(&file, " \n").unwrap();
        assert!(!file.exists());
        save(&file, "").unwrap();
    }
}
