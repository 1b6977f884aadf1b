//! The CLI's session files, removed after a run unless they are to be kept.
//!
//! A run that may need compacting must leave its session resumable, so ralph lets the CLI write
//! it (`<config dir>/projects/<cwd slug>/<session>.jsonl`, plus `<session>/` for large tool
//! outputs) and removes it when the run is over, unless `claude.session_persistence` is set.
//! So must a run that may ask a person a question: one that asked keeps its session until
//! the answer's run, which resumes it, is over.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use crate::config::ClaudeConfig;

/// The CLI's config dir: `CLAUDE_CONFIG_DIR` of the config's env, then of ours, then
/// `~/.claude`.
fn config_dir(config: &ClaudeConfig) -> Option<PathBuf> {
    let from_env = |value: OsString| (!value.is_empty()).then(|| PathBuf::from(value));
    config
        .env
        .get("CLAUDE_CONFIG_DIR")
        .map(OsString::from)
        .and_then(from_env)
        .or_else(|| std::env::var_os("CLAUDE_CONFIG_DIR").and_then(from_env))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".claude")))
}

/// Removes the files of session `id` from every project folder; returns how many it removed.
///
/// # Errors
///
/// An I/O error other than "not found".
pub(super) fn forget(config: &ClaudeConfig, id: &str) -> io::Result<usize> {
    // The id comes from the CLI's output: never let it name a path outside the folder.
    let safe = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let Some(projects) = config_dir(config).map(|dir| dir.join("projects")) else {
        return Ok(0);
    };
    if !safe {
        return Ok(0);
    }
    let entries = match std::fs::read_dir(&projects) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for project in entries {
        let project = project?.path();
        let transcript = project.join(format!("{id}.jsonl"));
        removed += usize::from(ignore_missing(std::fs::remove_file(&transcript))?);
        removed += usize::from(ignore_missing(std::fs::remove_dir_all(project.join(id)))?);
    }
    Ok(removed)
}

/// Whether session `id`'s transcript is on disk, in any project folder: a session the CLI
/// can resume.
pub(super) fn exists(config: &ClaudeConfig, id: &str) -> bool {
    let safe = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let Some(projects) = config_dir(config).map(|dir| dir.join("projects")) else {
        return false;
    };
    safe && std::fs::read_dir(&projects).is_ok_and(|mut entries| {
        entries.any(|project| project.is_ok_and(|p| p.path().join(format!("{id}.jsonl")).is_file()))
    })
}

/// `Ok(true)` when removed, `Ok(false)` when there was nothing to remove.
fn ignore_missing(result: io::Result<()>) -> io::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn removes_the_session_from_every_project_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ClaudeConfig::default();
        config.env.insert(
            "CLAUDE_CONFIG_DIR".into(),
            dir.path().to_string_lossy().into_owned(),
        );
        let project = dir.path().join("projects/-tmp-repo");
        std::fs::create_dir_all(project.join("s-1/tool-results")).unwrap();
        std::fs::write(project.join("s-1.jsonl"), "{}").unwrap();
        std::fs::write(project.join("s-2.jsonl"), "{}").unwrap();
        assert!(exists(&config, "s-1") && !exists(&config, "s-3"));
        assert!(!exists(&config, "../s-1"));

        assert_eq!(forget(&config, "s-1").unwrap(), 2);
        assert!(!project.join("s-1.jsonl").exists());
        assert!(!project.join("s-1").exists());
        assert!(project.join("s-2.jsonl").exists());
        assert_eq!(forget(&config, "s-1").unwrap(), 0);
        assert_eq!(forget(&config, "../s-2").unwrap(), 0, "not a session id");
        assert!(project.join("s-2.jsonl").exists());
    }
}
