//! The logs of plan mode and build mode: one run folder per run of a mode
//! (`<log_dir>/runs/<name>/<timestamp>/`), each agent run's log named by its role.

use std::path::{Path, PathBuf};

use crate::agent::Role;
use crate::runtime::error::Error;
use crate::runtime::logs::{sanitize, unused};
use crate::time::file_stamp;

/// A new run folder `<log_dir>/runs/<name>/<timestamp>/`, created.
pub(crate) fn run_folder(workspace: &Path, log_dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let logs = workspace.join(log_dir);
    let dir = logs.join("runs").join(sanitize(name)).join(file_stamp());
    // The log folder ignores itself (when ralph made it), and so everything under it.
    crate::files::own::create_own_dir(&logs)
        .and_then(|()| crate::files::own::create_dir_all(&dir))
        .map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
    Ok(dir)
}

/// The path of one agent run's log in a run folder: `plan-attempt-N.log` (N the plan's
/// attempt), `impl-attempt-N.log` (N counts the implementer sessions in the folder),
/// `verify.log`; a number is added when the name is taken.
pub(crate) fn folder_log(dir: &Path, role: Role, attempt: u32) -> PathBuf {
    let base = match role {
        Role::Planner => format!("plan-attempt-{attempt}"),
        Role::Build => {
            let n = (1..)
                .find(|n| !dir.join(format!("impl-attempt-{n}.log")).exists())
                .unwrap_or(1);
            format!("impl-attempt-{n}")
        }
        Role::Verify => "verify".to_owned(),
        other => format!("{other}-attempt-{attempt}"),
    };
    unused(&dir.join(format!("{base}.log")))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn folder_logs_are_named_by_role() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(folder_log(d, Role::Planner, 2).ends_with("plan-attempt-2.log"));
        let first = folder_log(d, Role::Build, 1);
        assert!(first.ends_with("impl-attempt-1.log"));
        std::fs::write(&first, "").unwrap();
        assert!(folder_log(d, Role::Build, 1).ends_with("impl-attempt-2.log"));
        let verify = folder_log(d, Role::Verify, 1);
        assert!(verify.ends_with("verify.log"));
        std::fs::write(&verify, "").unwrap();
        assert!(folder_log(d, Role::Verify, 2).ends_with("verify-2.log"));
    }
}
