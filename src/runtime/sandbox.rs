//! The run's sandbox: what every process a run starts for work may do, in every mode.
//!
//! Built once per [`Context`](super::Context) from `[sandbox]` and the workspace, it hands
//! each agent run, gate and hook-running git command its [`Sandbox`]: the work tree
//! writable (read-only for a role that may not write), ralph's referee files in it
//! protected, the user's secrets and the sockets that act outside hidden, the caches of the
//! usual toolchains writable, the network kept for agents and taken from gates.
//!
//! Which files are the referee's: `.git` (a work tree's `.git` file too), `.ralph/` (but
//! the task's own work tree in it), `ralph.toml`, the log folder, the store's file,
//! `implementation.json`, the progress file, the spec or specs folder on record (set by
//! the pipeline, [`RunSandbox::record`]), each gate's script when its command names a file
//! in the tree, the git hooks folder when `core.hooksPath` lies in the tree,
//! `.pre-commit-config.yaml`, the programs of `[[hooks]]` that lie in the tree, and
//! `[sandbox] protect`.

use super::workspace::relative;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::referee::Referee;
use crate::agent::cli_files::Cli;
use crate::config::{Config, SandboxMode};
use crate::process::{Access, Sandbox, Unavailable};

/// What the user keeps secret in a home: hidden from every confined process.
const SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/gcloud",
    ".config/op",
    ".npmrc",
    ".pypirc",
    ".gem/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".bash_history",
    ".zsh_history",
    ".python_history",
];

/// Sockets and folders of sockets through which a process acts outside its sandbox: the
/// user's session (its bus, its agents), systemd, the container engines. The private
/// `/tmp` takes X11's, tmux's and ssh-agent's own.
const SOCKETS: &[&str] = &[
    "/run/user",
    "/run/systemd",
    "/run/dbus",
    "/var/run/dbus",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/docker",
    "/run/podman",
    "/run/containerd",
    "/run/crio",
    "/run/libvirt",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
];

/// What stays readable under a hidden folder: the name server's address, which
/// `/etc/resolv.conf` often links to.
const RESOLVER: &str = "/run/systemd/resolve";

/// The caches of the usual toolchains under a home, writable so that a build can fetch
/// and reuse what it depends on (they are shared with the user's own builds: see "Sandbox"
/// in docs/running.md).
const CACHES: &[&str] = &[
    ".cargo/registry",
    ".cargo/git",
    ".npm",
    ".cache/pip",
    ".cache/go-build",
    "go/pkg/mod",
    ".cache/yarn",
    ".local/share/pnpm",
    ".m2/repository",
    ".gradle/caches",
];

/// The sandbox of one run, and how far it confines (see the module docs).
#[derive(Debug)]
pub(crate) struct RunSandbox {
    mode: SandboxMode,
    /// The mechanism and the rules that hold in every work tree.
    base: Sandbox,
    /// Why the run is unconfined in [`SandboxMode::Auto`].
    unavailable: Option<Unavailable>,
    /// ralph's referee files, relative to a work tree (protected in each), or absolute.
    referee: Vec<PathBuf>,
    /// What the pipeline running now keeps on record: its spec, or its specs folder.
    records: Mutex<Vec<PathBuf>>,
    /// `[sandbox]`'s own lists, as the dry run shows them (empty when it sets none).
    yours: String,
    /// The workspace.
    workspace: PathBuf,
    /// What the referee judges with, as the run found it (see `runtime::referee`).
    judged_with: Referee,
    /// The files of it that the config names (the spec comes with [`record`](Self::record)).
    judging: Vec<PathBuf>,
}

impl RunSandbox {
    /// The sandbox `config` asks for in `workspace`.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] in [`SandboxMode::Required`] when no sandbox can be made here.
    pub(crate) fn new(workspace: &Path, config: &Config) -> Result<Self, Unavailable> {
        let mode = config.sandbox.mode;
        let (base, unavailable) = match mode {
            SandboxMode::Off => (Sandbox::unconfined(), None),
            SandboxMode::Machine => (Sandbox::machine(), None),
            SandboxMode::Required => (Sandbox::bubblewrap()?, None),
            SandboxMode::Auto => match Sandbox::bubblewrap() {
                Ok(sandbox) => (sandbox, None),
                Err(why) => (Sandbox::unconfined(), Some(why)),
            },
        };
        Ok(RunSandbox {
            mode,
            base: base_rules(base, workspace, config),
            unavailable,
            referee: referee_files(workspace, config),
            records: Mutex::new(Vec::new()),
            yours: yours(config),
            workspace: workspace.to_path_buf(),
            judged_with: Referee::default(),
            judging: judging_files(workspace, config),
        })
    }

    /// Keeps `paths` (the spec on record, or the specs folder; relative to the workspace,
    /// or absolute) protected for the rest of the run.
    pub(crate) fn record(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        *records = paths.into_iter().collect();
        self.judged_with
            .record(records.iter().map(|p| self.workspace.join(p)));
    }

    /// Records the files the referee judges with as a run finds them, at its start.
    pub(crate) fn watch(&self) {
        self.judged_with.clear();
        self.judged_with
            .record(self.judging.iter().map(|p| self.workspace.join(p)));
    }

    /// What the referee judges with, as the run found it.
    pub(crate) fn referee(&self) -> &Referee {
        &self.judged_with
    }

    /// The workspace.
    pub(crate) fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Whether ralph confines the run's processes itself: no agent can then have changed
    /// a referee's file.
    pub(crate) fn confines(&self) -> bool {
        self.unavailable.is_none() && matches!(self.mode, SandboxMode::Auto | SandboxMode::Required)
    }

    /// The sandbox of an agent run in `tree`: written only by a role that may write.
    pub(crate) fn agent(&self, tree: &Path, may_write: bool) -> Sandbox {
        let sandbox = self.base.clone();
        let sandbox = if may_write {
            sandbox.write(tree)
        } else {
            sandbox.protect(tree)
        };
        self.protect_in(sandbox, tree, true)
    }

    /// The sandbox of a gate in `tree`: writable, without the network unless the gate asks
    /// for it ([`ShellGate::network`](crate::ShellGate::network)).
    pub(crate) fn gate(&self, tree: &Path) -> Sandbox {
        self.protect_in(self.base.clone().write(tree), tree, true)
            .network(false)
    }

    /// The sandbox of ralph's git commands in `tree` that may run the repository's hooks:
    /// `tree` writable, ralph's other files protected, no network; [`Git`](crate::git::Git)
    /// adds the repository's git folders, and git's own variables pass.
    pub(crate) fn git(&self, tree: &Path) -> Sandbox {
        let worktrees: PathBuf = crate::process::WORKTREES.iter().collect();
        self.protect_in(self.base.clone().write(tree), tree, false)
            // Where `git worktree add` makes a task's work tree.
            .write(tree.join(worktrees))
            .pass_env("GIT_*")
            .network(false)
    }

    /// `sandbox` with the referee's files in `tree` protected (`.git` too, unless not
    /// `with_git`).
    fn protect_in(&self, sandbox: Sandbox, tree: &Path, with_git: bool) -> Sandbox {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        self.referee
            .iter()
            .chain(records.iter())
            .filter(|path| with_git || path.as_path() != Path::new(".git"))
            .fold(sandbox, |sandbox, path| {
                if path.is_absolute() {
                    sandbox.protect(path)
                } else {
                    sandbox.protect(tree.join(path))
                }
            })
    }

    /// One line for a dry run: how the processes of the run are confined.
    pub(crate) fn describe(&self) -> String {
        match (self.mode, &self.unavailable) {
            (_, Some(why)) => format!(
                "UNCONFINED: {} ({}); agents and gates run with your rights",
                why.reason(),
                why.fix()
            ),
            (SandboxMode::Off, _) => {
                "unconfined, as [sandbox] mode = \"off\" says: agents and gates run with your \
                 rights"
                    .to_owned()
            }
            (SandboxMode::Machine, _) => {
                "the machine itself, as [sandbox] mode = \"machine\" declares: ralph confines \
                 nothing"
                    .to_owned()
            }
            _ => format!(
                "bubblewrap: agents and gates write only their work tree, the caches and \
                 their CLI's state; ralph's files, git and the gate scripts are read-only; \
                 secrets and sockets hidden; gates without network{}",
                self.yours
            ),
        }
    }

    /// What the summary and `--json` say of it: `bubblewrap`, `unconfined (…)`, `off`,
    /// `machine`.
    pub(crate) fn label(&self) -> String {
        match (self.mode, &self.unavailable) {
            (_, Some(why)) => format!("unconfined ({})", why.reason()),
            (SandboxMode::Off, _) => "off (unconfined)".to_owned(),
            (SandboxMode::Machine, _) => "machine (declared a sandbox)".to_owned(),
            _ => "bubblewrap".to_owned(),
        }
    }

    /// The warning every run starts with when it runs unconfined without having been told
    /// to.
    pub(crate) fn warning(&self) -> Option<String> {
        self.unavailable.as_ref().map(|why| {
            format!(
                "running unconfined: {}; agents and gates have your rights ({}; or set \
                 [sandbox] mode = \"off\" to choose this)",
                why.reason(),
                why.fix()
            )
        })
    }
}

/// `[sandbox]`'s lists for the dry run: `; [sandbox] write ~/.cache/x; env MY_*`.
fn yours(config: &Config) -> String {
    let own = &config.sandbox;
    let paths = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    [
        ("write", paths(&own.write)),
        ("protect", paths(&own.protect)),
        ("hide", paths(&own.hide)),
        ("env", own.env.join(", ")),
    ]
    .iter()
    .filter(|(_, list)| !list.is_empty())
    .map(|(key, list)| format!("; [sandbox] {key} {list}"))
    .collect()
}

/// The homes whose secrets are hidden: `$HOME` and the account's own.
fn homes() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::getuid())
        && !homes.contains(&user.dir)
    {
        homes.push(user.dir);
    }
    homes
}

/// `path` as `[sandbox]` means it: `~/` the home's, a relative path the workspace's.
fn resolve(workspace: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => std::env::var_os("HOME")
            .map_or_else(|| path.to_path_buf(), |home| PathBuf::from(home).join(rest)),
        Err(_) => workspace.join(path),
    }
}

/// The rules that hold in every work tree: secrets, sockets, caches, the CLIs' key files,
/// and the person's own lists; each path as it is, its links resolved (bubblewrap cannot
/// mount through a link such as `/var/run`), and only when it exists now.
fn base_rules(sandbox: Sandbox, workspace: &Path, config: &Config) -> Sandbox {
    if !sandbox.confines() {
        return sandbox;
    }
    let sandbox = wanted_rules(workspace, config)
        .into_iter()
        .filter_map(|(path, access)| Some((path.canonicalize().ok()?, access)))
        .fold(sandbox, |sandbox, (path, access)| {
            sandbox.allow(path, access)
        });
    config
        .sandbox
        .env
        .iter()
        .fold(sandbox, |sandbox, name| sandbox.pass_env(name))
}

/// The rules of [`base_rules`], as named.
fn wanted_rules(workspace: &Path, config: &Config) -> Vec<(PathBuf, Access)> {
    let mut rules = Vec::new();
    for home in homes() {
        rules.extend(SECRETS.iter().map(|s| (home.join(s), Access::Hide)));
        rules.extend(CACHES.iter().map(|c| (home.join(c), Access::Write)));
        let var = |name: &str| (name == "HOME").then(|| home.clone().into_os_string());
        rules.extend(Cli::key_files(&var).into_iter().map(|k| (k, Access::Hide)));
    }
    if let Some(dir) = std::env::var_os("CARGO_HOME").map(PathBuf::from) {
        rules.extend(["registry", "git"].map(|d| (dir.join(d), Access::Write)));
        rules.extend(["credentials", "credentials.toml"].map(|f| (dir.join(f), Access::Hide)));
    }
    for var in ["GOMODCACHE", "GOCACHE"] {
        rules.extend(std::env::var_os(var).map(|dir| (PathBuf::from(dir), Access::Write)));
    }
    rules.extend(
        SOCKETS
            .iter()
            .map(PathBuf::from)
            .chain(session_sockets())
            .map(|socket| (socket, Access::Hide)),
    );
    rules.push((PathBuf::from(RESOLVER), Access::Read));
    let own = &config.sandbox;
    rules.extend(
        own.write
            .iter()
            .map(|p| (resolve(workspace, p), Access::Write)),
    );
    rules.extend(
        own.hide
            .iter()
            .map(|p| (resolve(workspace, p), Access::Hide)),
    );
    rules
}

/// The sockets ralph's own environment names: the ssh agent's, the session bus's, the
/// container engine's, the session's runtime folder.
fn session_sockets() -> Vec<PathBuf> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut sockets: Vec<PathBuf> = ["SSH_AUTH_SOCK", "XDG_RUNTIME_DIR"]
        .into_iter()
        .filter_map(var)
        .map(PathBuf::from)
        .collect();
    if let Some(bus) = var("DBUS_SESSION_BUS_ADDRESS") {
        sockets.extend(
            bus.split([';', ','])
                .filter_map(|part| part.split_once("path=").map(|(_, p)| PathBuf::from(p))),
        );
    }
    if let Some(host) = var("DOCKER_HOST")
        && let Some(path) = host.strip_prefix("unix://")
    {
        sockets.push(PathBuf::from(path));
    }
    sockets.retain(|p| p.is_absolute());
    sockets
}

/// The referee's files (see the module docs): relative to a work tree, or absolute.
fn referee_files(workspace: &Path, config: &Config) -> Vec<PathBuf> {
    let planning = &config.planning;
    let mut files: Vec<PathBuf> = [
        ".git",
        super::workspace::STATE_DIR,
        crate::config::CONFIG_FILE,
        ".pre-commit-config.yaml",
    ]
    .map(PathBuf::from)
    .into();
    files.extend([
        config.log_dir.clone(),
        planning.implementation.clone(),
        planning.progress.clone(),
    ]);
    if let Some(store) = config.store.path() {
        files.push(store.to_path_buf());
    }
    files.extend(hooks_path(workspace));
    for gate in &config.gates {
        files.extend(named_files(workspace, &gate.command));
    }
    for hook in &config.hooks {
        files.extend(hook.command.first().and_then(|program| {
            let path = resolve(workspace, Path::new(program));
            (program.contains('/') && path.starts_with(workspace) && path.is_file())
                .then(|| relative(workspace, &path))
        }));
    }
    files.extend(config.sandbox.protect.iter().map(|p| {
        let path = resolve(workspace, p);
        relative(workspace, &path)
    }));
    files
}

/// The referee's files that say how work is judged (see `runtime::referee`): the config,
/// the gates' scripts, the hooks' programs, the pre-commit config, `[sandbox] protect`.
/// Relative to the workspace, or absolute.
fn judging_files(workspace: &Path, config: &Config) -> Vec<PathBuf> {
    let own = [
        PathBuf::from(super::workspace::STATE_DIR),
        PathBuf::from(".git"),
        config.log_dir.clone(),
        config.planning.implementation.clone(),
        config.planning.progress.clone(),
    ];
    let store = config.store.path().map(Path::to_path_buf);
    referee_files(workspace, config)
        .into_iter()
        .filter(|path| !own.contains(path) && Some(path) != store.as_ref())
        .collect()
}

/// `path` relative to `workspace` when it lies in it (so that it is protected in every work
/// tree), else as it is.
/// The files a shell command names that exist in the workspace: the scripts a gate runs
/// (`sh check.sh`, `./scripts/test`, `python tools/lint.py`).
fn named_files(workspace: &Path, command: &str) -> Vec<PathBuf> {
    command
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>'))
        .map(|word| word.trim_matches(|c| matches!(c, '"' | '\'')))
        .filter(|word| !word.is_empty() && !word.starts_with('-'))
        .filter_map(|word| {
            let path = resolve(workspace, Path::new(word));
            (path.starts_with(workspace) && path.is_file()).then(|| relative(workspace, &path))
        })
        .collect()
}

/// The hooks folder `core.hooksPath` names in the repository's own config, when it lies in
/// the work tree (`.husky`, `.githooks`): read from `.git/config` without running git.
fn hooks_path(workspace: &Path) -> Option<PathBuf> {
    let config = std::fs::read_to_string(workspace.join(".git/config")).ok()?;
    let mut in_core = false;
    for line in config.lines().map(str::trim) {
        if line.starts_with('[') {
            in_core = line.eq_ignore_ascii_case("[core]");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_core && key.trim().eq_ignore_ascii_case("hookspath") {
            let path = resolve(workspace, Path::new(value.trim().trim_matches('"')));
            return path
                .starts_with(workspace)
                .then(|| relative(workspace, &path));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn a_gate_command_names_its_scripts_in_the_tree() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        std::fs::create_dir(ws.join("scripts")).unwrap();
        std::fs::write(ws.join("check.sh"), "exit 0").unwrap();
        std::fs::write(ws.join("scripts/lint"), "").unwrap();
        let named = named_files(ws, "sh check.sh && ./scripts/lint --all; cargo test");
        assert_eq!(
            named,
            [PathBuf::from("check.sh"), PathBuf::from("scripts/lint")]
        );
    }

    #[test]
    fn a_hooks_path_in_the_tree_is_read_from_the_repository_config() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        std::fs::write(
            ws.path().join(".git/config"),
            "[core]\n\tbare = false\n\thooksPath = .husky\n[user]\n\tname = x\n",
        )
        .unwrap();
        assert_eq!(hooks_path(ws.path()), Some(PathBuf::from(".husky")));
    }

    #[test]
    fn a_hooks_program_in_the_tree_and_a_gates_script_are_the_referees() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notify.sh"), "").unwrap();
        std::fs::write(ws.path().join("check.sh"), "").unwrap();
        let config: Config = toml::from_str(
            "[[gates]]\nname = \"g\"\ncommand = \"sh check.sh\"\n\n\
             [[hooks]]\non = [\"finished\"]\ncommand = [\"./notify.sh\", \"done\"]\n\n\
             [[hooks]]\non = [\"finished\"]\ncommand = [\"notify-send\"]\n",
        )
        .unwrap();
        let referee = referee_files(ws.path(), &config);
        for file in ["notify.sh", "check.sh", ".git", ".ralph", "ralph.toml"] {
            assert!(
                referee.contains(&PathBuf::from(file)),
                "{file}: {referee:?}"
            );
        }
        assert!(!referee.contains(&PathBuf::from("notify-send")));
    }

    #[test]
    fn the_dry_run_and_the_summary_say_how_far_a_run_is_confined() {
        let ws = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.sandbox.mode = SandboxMode::Off;
        let off = RunSandbox::new(ws.path(), &config).unwrap();
        assert!(off.describe().starts_with("unconfined"));
        assert_eq!(off.label(), "off (unconfined)");
        assert_eq!(off.warning(), None);
        config.sandbox.mode = SandboxMode::Machine;
        let machine = RunSandbox::new(ws.path(), &config).unwrap();
        assert!(machine.agent(ws.path(), true).is_machine());
        assert_eq!(machine.warning(), None);
    }
}
