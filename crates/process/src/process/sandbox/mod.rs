//! Where a supervised process runs: on the machine as ralph does, or confined by a sandbox.
//!
//! A [`Sandbox`] says what a confined process may write, what it may read but not write,
//! what it may not see, which of ralph's environment variables it gets and whether it has
//! the network. It knows paths, variable names and a switch, nothing of ralph's own types:
//! the runtime maps the config and ralph's files onto it.
//!
//! The mechanism is bubblewrap (`bwrap`), the unprivileged sandbox Flatpak and the Codex
//! and Claude CLIs use on Linux: namespaces that the kernel enforces, set up by a program
//! that is packaged nearly everywhere (`apt install bubblewrap`). Landlock would need no
//! program, but it can neither hide a path nor give a process its own PID namespace, and
//! applying it in the child before `exec` takes `unsafe` code, which this crate forbids.
//!
//! What a confined process sees (`bwrap.rs` builds the arguments):
//!
//! - the whole file system read-only, with its own `/dev`, `/proc` (its PID namespace:
//!   no other process is visible, ralph included), and a private, empty `/tmp`;
//! - the paths given [`Access::Write`] writable, those given [`Access::Protect`] inside them
//!   read-only again (each folder between the two is a mount point of its own, so that
//!   renaming it cannot move a protected file away and put another in its place), those
//!   given [`Access::Hide`] empty, and those given [`Access::Read`] visible where the
//!   private `/tmp` would hide them;
//! - no capability, a new session (no keystrokes into ralph's terminal), no new user
//!   namespace where bubblewrap can forbid it, and no network but its own loopback unless
//!   [`Sandbox::network`] allows it;
//! - an environment of the allowed variables only ([`Sandbox::pass_env`]).

mod bwrap;
mod probe;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use probe::Unavailable;

/// The variables every confined process gets from ralph's environment (a trailing `*`
/// matches a prefix): the locale, where programs and the home are, the terminal, the
/// proxy and certificate settings, and where the usual toolchains keep themselves.
/// Secrets are not among them: a token, a key or an agent socket must be passed by name.
const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "CI",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "GOMODCACHE",
    "JAVA_HOME",
    "NVM_DIR",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
];

/// What a confined process may do with a path and everything under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Access {
    /// Read and write.
    Write,
    /// Read, where the sandbox would hide it otherwise (under the private `/tmp`).
    Read,
    /// Read only, inside a writable path: ralph's own files, the gates' scripts.
    Protect,
    /// Not seen: an empty folder, or an empty file, in its place.
    Hide,
}

/// How, and how far, the processes of a run are confined.
///
/// Built by the runtime for every agent run, gate and hook-running git command from the
/// run's `[sandbox]` settings and ralph's own files; an agent that starts its own
/// processes runs them under it with [`command`](Self::command).
///
/// ```no_run
/// use ralph_loop_process::process::Sandbox;
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let sandbox = Sandbox::bubblewrap()?
///     .write("/work/project")
///     .protect("/work/project/.git")
///     .network(false);
/// let mut make = std::process::Command::new("make");
/// make.current_dir("/work/project");
/// let status = sandbox.command(&make).status()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Sandbox {
    how: How,
    paths: Vec<(PathBuf, Access)>,
    env: Vec<Arc<str>>,
    network: bool,
}

/// The mechanism, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
enum How {
    /// bubblewrap, as [`probe`] found it working.
    Bwrap(Arc<probe::Bwrap>),
    /// ralph confines nothing: the machine itself is declared a sandbox (a container, a VM).
    Machine,
    /// Nothing is confined.
    Unconfined,
}

impl Default for Sandbox {
    /// [`Sandbox::unconfined`].
    fn default() -> Self {
        Sandbox::unconfined()
    }
}

impl Sandbox {
    /// No confinement: the process runs as ralph does, with ralph's whole environment.
    pub fn unconfined() -> Self {
        Sandbox::with(How::Unconfined)
    }

    /// No confinement by ralph, because the machine itself is a sandbox (a container or a
    /// VM that holds nothing of value). Processes run as [`unconfined`](Self::unconfined)
    /// ones do; [`is_machine`](Self::is_machine) tells agents that need to know (the Claude
    /// CLI bypasses its permission checks as root only when told it runs in a sandbox).
    pub fn machine() -> Self {
        Sandbox::with(How::Machine)
    }

    /// Confinement by bubblewrap, found on `PATH` and tried once per process: nothing
    /// writable, the `BASE_ENV` variables, and the network.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when `bwrap` is not on `PATH` or cannot make a sandbox here (user
    /// namespaces turned off, a container that forbids them); its message names the fix.
    pub fn bubblewrap() -> Result<Self, Unavailable> {
        let bwrap = probe::bwrap()?;
        let mut sandbox = Sandbox::with(How::Bwrap(bwrap));
        sandbox.env = BASE_ENV.iter().map(|&name| name.into()).collect();
        Ok(sandbox)
    }

    fn with(how: How) -> Self {
        Sandbox {
            how,
            paths: Vec::new(),
            env: Vec::new(),
            network: true,
        }
    }

    /// Whether processes are confined.
    pub fn confines(&self) -> bool {
        matches!(self.how, How::Bwrap(_))
    }

    /// Whether the machine itself is declared a sandbox ([`machine`](Self::machine)).
    pub fn is_machine(&self) -> bool {
        self.how == How::Machine
    }

    /// Lets a confined process write `path` and everything under it (unless protected).
    #[must_use]
    pub fn write(self, path: impl Into<PathBuf>) -> Self {
        self.allow(path, Access::Write)
    }

    /// Lets a confined process read `path` where the sandbox would hide it (under `/tmp`).
    #[must_use]
    pub fn read(self, path: impl Into<PathBuf>) -> Self {
        self.allow(path, Access::Read)
    }

    /// Keeps `path` read-only although it lies in a writable folder.
    #[must_use]
    pub fn protect(self, path: impl Into<PathBuf>) -> Self {
        self.allow(path, Access::Protect)
    }

    /// Hides `path`: a confined process sees an empty folder or file in its place.
    #[must_use]
    pub fn hide(self, path: impl Into<PathBuf>) -> Self {
        self.allow(path, Access::Hide)
    }

    /// Shows `path` again where an earlier rule hid exactly it: an agent CLI's own key file,
    /// which the run's sandbox hides from everything else.
    #[must_use]
    pub fn reveal(mut self, path: &Path) -> Self {
        self.paths
            .retain(|(p, a)| !(p == path && *a == Access::Hide));
        self
    }

    /// Gives `path` `access`. A path given several accesses gets the strongest: hiding over
    /// protecting over writing. A path that does not exist when a process starts is
    /// passed over.
    #[must_use]
    pub fn allow(mut self, path: impl Into<PathBuf>, access: Access) -> Self {
        self.paths.push((path.into(), access));
        self
    }

    /// Passes ralph's variable `name` to confined processes; `PREFIX*` passes every
    /// variable that starts with `PREFIX`. Variables set for the process itself always
    /// pass.
    #[must_use]
    pub fn pass_env(mut self, name: impl AsRef<str>) -> Self {
        self.env.push(name.as_ref().into());
        self
    }

    /// Whether a confined process has the network (by default it does); without it, it
    /// has only a loopback of its own.
    #[must_use]
    pub fn network(mut self, on: bool) -> Self {
        self.network = on;
        self
    }

    /// The paths given `access`, in the order they were given.
    pub fn paths(&self, access: Access) -> impl Iterator<Item = &Path> {
        self.paths
            .iter()
            .filter(move |(_, a)| *a == access)
            .map(|(p, _)| p.as_path())
    }

    /// Whether ralph's variable `key` reaches a confined process.
    pub fn passes(&self, key: &OsStr) -> bool {
        let Some(key) = key.to_str() else {
            return false;
        };
        key == super::COOKIE_VAR
            || self.env.iter().any(|name| match name.strip_suffix('*') {
                Some(prefix) => key.starts_with(prefix),
                None => key == &**name,
            })
    }

    /// `command` run under this sandbox: the same program, arguments, directory and
    /// explicitly set variables, inside bubblewrap, with only the allowed variables of this
    /// process's environment. Killing the returned process kills everything in the
    /// sandbox. Unconfined, a copy of `command`.
    ///
    /// For an agent or a gate written in Rust that starts processes of its own: ralph
    /// supervises the processes it starts itself, and cannot confine code that runs in its
    /// own process.
    pub fn command(&self, command: &std::process::Command) -> std::process::Command {
        let cwd = command.get_current_dir().map(Path::to_path_buf);
        let explicit: Vec<(OsString, Option<OsString>)> = command
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned)))
            .collect();
        let How::Bwrap(bwrap) = &self.how else {
            let mut copy = std::process::Command::new(command.get_program());
            copy.args(command.get_args());
            if let Some(cwd) = cwd {
                copy.current_dir(cwd);
            }
            for (key, value) in explicit {
                match value {
                    Some(value) => copy.env(key, value),
                    None => copy.env_remove(key),
                };
            }
            return copy;
        };
        let program = command.get_program().to_owned();
        let args: Vec<OsString> = command.get_args().map(OsStr::to_owned).collect();
        let mut wrapped = std::process::Command::new(bwrap.path());
        wrapped
            .arg("--die-with-parent")
            .args(self.arguments(bwrap, cwd.as_deref(), &program, &args))
            .env_clear()
            .envs(self.environment());
        for (key, value) in explicit {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        if let Some(cwd) = cwd {
            wrapped.current_dir(cwd);
        }
        wrapped
    }

    /// Looks `program` up as the spawn would (on `path`, or in `cwd` when it holds a `/`):
    /// inside bubblewrap a missing program is only bubblewrap's exit 1, so the spawn's own
    /// error is made here, before it.
    pub(in crate::process) fn find_program(
        program: &OsStr,
        cwd: Option<&Path>,
        path: Option<&OsStr>,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let runnable = |candidate: &Path| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let found = if program.as_encoded_bytes().contains(&b'/') {
            let program = Path::new(program);
            runnable(&cwd.map_or_else(|| program.to_path_buf(), |dir| dir.join(program)))
        } else {
            let path = path
                .map(OsStr::to_owned)
                .or_else(|| std::env::var_os("PATH"));
            std::env::split_paths(&path.unwrap_or_default()).any(|dir| runnable(&dir.join(program)))
        };
        if found {
            Ok(())
        } else {
            Err(std::io::ErrorKind::NotFound.into())
        }
    }

    /// The program and arguments that run `program args` in `cwd` under this sandbox, or
    /// `None` when it confines nothing.
    pub(in crate::process) fn wrap(
        &self,
        cwd: Option<&Path>,
        program: &OsStr,
        args: &[OsString],
    ) -> Option<(PathBuf, Vec<OsString>)> {
        let How::Bwrap(bwrap) = &self.how else {
            return None;
        };
        Some((
            bwrap.path().to_path_buf(),
            self.arguments(bwrap, cwd, program, args),
        ))
    }

    fn arguments(
        &self,
        bwrap: &probe::Bwrap,
        cwd: Option<&Path>,
        program: &OsStr,
        args: &[OsString],
    ) -> Vec<OsString> {
        bwrap::arguments(&bwrap::Plan {
            userns: bwrap.userns(),
            paths: &self.paths,
            network: self.network,
            cwd,
            program,
            args,
        })
    }

    /// The variables of this process's environment a confined process gets, with its
    /// temporary folder the private `/tmp`.
    pub(in crate::process) fn environment(&self) -> Vec<(OsString, OsString)> {
        std::env::vars_os()
            .filter(|(key, _)| key != "TMPDIR" && self.passes(key))
            .chain([("TMPDIR".into(), "/tmp".into())])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_pass_by_name_or_prefix_and_the_cookie_always() {
        let sandbox = Sandbox::unconfined()
            .pass_env("PATH")
            .pass_env("ANTHROPIC_*");
        assert!(sandbox.passes(OsStr::new("PATH")));
        assert!(sandbox.passes(OsStr::new("ANTHROPIC_API_KEY")));
        assert!(sandbox.passes(OsStr::new(super::super::COOKIE_VAR)));
        assert!(!sandbox.passes(OsStr::new("PATHS")));
        assert!(!sandbox.passes(OsStr::new("AWS_SECRET_ACCESS_KEY")));
        assert!(!sandbox.passes(OsStr::new("GITHUB_TOKEN")));
    }

    #[test]
    fn unconfined_command_is_a_copy() {
        let mut cmd = std::process::Command::new("echo");
        cmd.arg("hi").current_dir("/").env("A", "1");
        let copy = Sandbox::unconfined().command(&cmd);
        assert_eq!(copy.get_program(), "echo");
        assert_eq!(copy.get_args().collect::<Vec<_>>(), ["hi"]);
        assert_eq!(copy.get_current_dir(), Some(Path::new("/")));
        assert_eq!(
            copy.get_envs().collect::<Vec<_>>(),
            [(OsStr::new("A"), Some(OsStr::new("1")))]
        );
    }
}
