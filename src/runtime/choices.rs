//! The record of which agent a [`Fallback`](crate::agent::Fallback) chain gave the runs to,
//! and why: `.ralph/agent-choices.json`, the last [`KEPT`] choices, for `ralph status`.
//!
//! Every mode's agent calls go through [`Caller`](super::call::Caller), which records each
//! [`AgentEvent::AgentChosen`](crate::agent::AgentEvent::AgentChosen) here, so the record
//! holds in the construct loop, plan mode and build mode alike. The file is replaced
//! atomically; it is read only to be shown.

use std::path::{Path, PathBuf};

use crate::agent::AgentChoice;
use crate::store::StoreError;

/// The file, inside the state folder.
const FILE: &str = "agent-choices.json";

/// How many choices are kept.
pub(crate) const KEPT: usize = 10;

/// `.ralph/agent-choices.json` of `workspace`.
pub(crate) fn path(workspace: &Path) -> PathBuf {
    super::workspace::state_dir(workspace).join(FILE)
}

/// The recorded choices, oldest first; none when nothing was recorded.
///
/// # Errors
///
/// [`StoreError::Io`] when the file cannot be read, [`StoreError::Malformed`] (naming it)
/// when it is not a list of choices.
pub(crate) fn load(workspace: &Path) -> Result<Vec<AgentChoice>, StoreError> {
    let path = path(workspace);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Malformed {
        path,
        line: e.line(),
        message: e.to_string(),
    })
}

/// Appends `choice`, keeping the last [`KEPT`]. A record that cannot be read is started
/// afresh: it is only ever shown, and the run must not stop for it.
///
/// # Errors
///
/// [`StoreError::Io`] when the file cannot be written.
pub(crate) fn record(workspace: &Path, choice: AgentChoice) -> Result<(), StoreError> {
    let mut choices = load(workspace).unwrap_or_default();
    choices.push(choice);
    let excess = choices.len().saturating_sub(KEPT);
    choices.drain(..excess);
    let path = path(workspace);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    crate::files::own::create_dir_all(&super::workspace::state_dir(workspace)).map_err(io)?;
    let bytes = serde_json::to_vec_pretty(&choices).unwrap_or_default();
    crate::files::atomic::replace(&path, &bytes).map_err(io)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    fn choice(n: usize) -> AgentChoice {
        let mut choice =
            AgentChoice::new("codex", Some(format!("t-{n}")), "claude is rate limited");
        choice.at = format!("2026-11-25T00:00:{n:02}Z");
        choice
    }

    #[test]
    fn keeps_the_last_choices_in_order() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        for n in 0..KEPT + 3 {
            record(dir.path(), choice(n)).unwrap();
        }
        let kept = load(dir.path()).unwrap();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0], choice(3));
        assert_eq!(kept[KEPT - 1], choice(KEPT + 2));
    }

    #[test]
    fn a_bad_record_is_an_error_naming_the_file_and_is_started_afresh_on_the_next_choice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
        std::fs::write(path(dir.path()), "{not json").unwrap();
        let error = load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("agent-choices.json"), "{error}");
        record(dir.path(), choice(1)).unwrap();
        assert_eq!(load(dir.path()).unwrap(), [choice(1)]);
    }
}
