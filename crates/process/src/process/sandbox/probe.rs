//! Whether bubblewrap can make a sandbox on this machine: looked up on `PATH` and tried
//! once per process, with the arguments every confined run uses.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// bubblewrap, found working.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Bwrap {
    path: PathBuf,
    /// It can make a user namespace of its own and forbid more in it (`--disable-userns`,
    /// bubblewrap 0.8 and later).
    userns: bool,
}

impl Bwrap {
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn userns(&self) -> bool {
        self.userns
    }
}

/// No sandbox can be made here: why, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}; {fix}")]
pub struct Unavailable {
    reason: String,
    fix: &'static str,
}

impl Unavailable {
    /// Why no sandbox can be made: `bwrap is not on PATH`, or what bubblewrap said.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What would make one possible.
    pub fn fix(&self) -> &str {
        self.fix
    }
}

/// Finds and tries bubblewrap once; every later call returns the first answer while `PATH`
/// stays the same.
pub(super) fn bwrap() -> Result<Arc<Bwrap>, Unavailable> {
    /// The `PATH` it was looked up on, and the answer.
    type Found = (Option<std::ffi::OsString>, Result<Arc<Bwrap>, Unavailable>);
    static FOUND: Mutex<Option<Found>> = Mutex::new(None);
    let path_var = std::env::var_os("PATH");
    let mut found = FOUND.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((seen, answer)) = found.as_ref()
        && *seen == path_var
    {
        return answer.clone();
    }
    let answer = find().and_then(try_it).map(Arc::new);
    *found = Some((path_var, answer.clone()));
    answer
}

/// `bwrap` on `PATH`.
fn find() -> Result<PathBuf, Unavailable> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| Unavailable {
            reason: "bwrap (bubblewrap) is not on PATH".into(),
            fix: "install bubblewrap (apt install bubblewrap, dnf install bubblewrap), \
                  or set [sandbox] mode",
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `true` in the sandbox every run gets, with a user namespace of its own first, then
/// without (a setuid bubblewrap, or one older than 0.8, refuses `--disable-userns`).
fn try_it(path: PathBuf) -> Result<Bwrap, Unavailable> {
    let mut last = String::new();
    for userns in [true, false] {
        let args = super::bwrap::arguments(&super::bwrap::Plan {
            userns,
            paths: &[],
            network: false,
            cwd: None,
            program: "true".as_ref(),
            args: &[],
        });
        // Run once per process, before any supervised run of a sandbox; it takes
        // milliseconds, and nothing it starts can outlive bubblewrap's `true`.
        match std::process::Command::new(&path)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => return Ok(Bwrap { path, userns }),
            Ok(out) => {
                last = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(Unavailable {
        reason: format!("bwrap cannot make a sandbox here ({last})"),
        fix: "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
              or kernel.apparmor_restrict_unprivileged_userns=0), run in a container that \
              allows them, or set [sandbox] mode",
    })
}
