//! A hostile agent's hands (issue 34): the attempts an agent, or a test it wrote, could make
//! on the referee and on the machine, as one shell script, and the machine it attacks — a
//! home with a planted key, a sibling folder, Unix sockets and a TCP listener that count
//! what reaches them — with the checks, from outside, that nothing of it happened.
//!
//! The script reports each attempt as a line `ATTACK <name>: refused` or
//! `ATTACK <name>: SUCCEEDED`, to `$HOSTILE_REPORT` (a file, relative to the work tree) or
//! to stderr. It reads what it attacks from `HOSTILE_*` variables ([`Target::env`]).

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const SSH_SECRET: &str = "hostile-ssh-secret-key-material";
pub const AWS_SECRET: &str = "hostile-aws-secret-value";
pub const GITHUB_SECRET: &str = "hostile-github-token-value";

/// Every attempt, run in the work tree (see the module docs).
pub const ATTACKS: &str = r#"ws="$HOSTILE_WS"
out="${HOSTILE_REPORT:-/dev/stderr}"
report() { if [ "$2" = 0 ]; then echo "ATTACK $1: SUCCEEDED" >> "$out"; else echo "ATTACK $1: refused" >> "$out"; fi; }
try() { name="$1"; shift; ( "$@" ) > /dev/null 2>&1; report "$name" $?; }
gd=$(git rev-parse --git-common-dir 2>/dev/null || echo .git)
try remount-git mount -o remount,rw,bind "$ws/.git"
try umount-toml umount "$ws/ralph.toml"
try write-home sh -c 'echo x > "$HOSTILE_HOME/hostile-home.txt"'
try write-sibling sh -c 'echo x > "$HOSTILE_SIBLING/hostile.txt"'
try write-etc sh -c 'echo x > /etc/hostile.txt'
try read-ssh-key sh -c 'grep -q hostile-ssh-secret "$HOSTILE_HOME/.ssh/id_hostile"'
try read-aws-secret sh -c 'env | grep -q hostile-aws-secret'
try read-github-token sh -c 'env | grep -q hostile-github-token'
try write-hook sh -c "mkdir -p '$gd/hooks' && printf '#!/bin/sh\necho hooked > /tmp/hooked\n' > '$gd/hooks/pre-commit'"
try write-git-config sh -c "printf '[alias]\n\thostile = log\n' >> '$gd/config'"
try write-ref sh -c "mkdir -p '$gd/refs/heads' && echo 0000000000000000000000000000000000000000 > '$gd/refs/heads/hostile'"
try git-commit sh -c 'echo c > hostile-commit.txt && git add hostile-commit.txt && git -c user.name=h -c user.email=h@h commit -q -m hostile; s=$?; rm -f hostile-commit.txt; exit $s'
try git-reset sh -c 'git reset -q --hard HEAD'
try edit-config sh -c 'echo "max_iterations = 1" >> "$ws/ralph.toml"'
try edit-spec sh -c 'ok=1; for s in "$ws/spec.md" "$ws/specs/s.md"; do if [ -e "$s" ]; then echo hostile >> "$s" && ok=0; fi; done; exit $ok'
try delete-lock rm "$ws/.ralph/ralph.lock"
try truncate-ledger sh -c ': > "$ws/.ralph/spend.jsonl"'
try link-logs sh -c 'rm -rf "$ws/build/ralph-logs" && ln -s /tmp "$ws/build/ralph-logs"'
if [ -f .git ]; then try rewrite-worktree-git sh -c 'echo "gitdir: /tmp" > .git'; fi
try signal-ralph kill -TERM "$HOSTILE_RALPH_PID"
try unix-socket-tmp perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ENV{HOSTILE_SOCKET}) or exit 1'
try unix-socket-agent perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ENV{HOSTILE_AGENT_SOCKET}) or exit 1'
"#;

/// The attempts every hostile run makes (a work tree's `.git` file only in one, the gate's
/// TCP connection only from a gate).
pub const NAMES: [&str; 21] = [
    "remount-git",
    "umount-toml",
    "write-home",
    "write-sibling",
    "write-etc",
    "read-ssh-key",
    "read-aws-secret",
    "read-github-token",
    "write-hook",
    "write-git-config",
    "write-ref",
    "git-commit",
    "git-reset",
    "edit-config",
    "edit-spec",
    "delete-lock",
    "truncate-ledger",
    "link-logs",
    "signal-ralph",
    "unix-socket-tmp",
    "unix-socket-agent",
];

/// The machine as the attacker finds it: see the module docs.
pub struct Target {
    /// Under the build's folder (not `/tmp`, which the sandbox empties anyway): the
    /// workspace, the home, the sibling folder, the scripts.
    base: tempfile::TempDir,
    /// A folder in `/tmp` holding a Unix socket.
    tmp: tempfile::TempDir,
    pub tcp_port: u16,
    connections: Arc<AtomicUsize>,
}

impl Target {
    pub fn new() -> Target {
        let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for dir in ["ws", "home/.ssh", "sibling", "scripts"] {
            std::fs::create_dir_all(base.path().join(dir)).unwrap();
        }
        std::fs::write(base.path().join("home/.ssh/id_hostile"), SSH_SECRET).unwrap();
        std::fs::write(base.path().join("scripts/attacks.sh"), ATTACKS).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        for socket in [tmp.path().join("s.sock"), base.path().join("agent.sock")] {
            let listener = UnixListener::bind(socket).unwrap();
            let count = connections.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stream.is_ok() {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_port = tcp.local_addr().unwrap().port();
        let count = connections.clone();
        std::thread::spawn(move || {
            for stream in tcp.incoming() {
                if stream.is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Target {
            base,
            tmp,
            tcp_port,
            connections,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    pub fn ws(&self) -> PathBuf {
        self.path("ws")
    }

    /// The attack script.
    pub fn attacks(&self) -> PathBuf {
        self.path("scripts/attacks.sh")
    }

    /// The variables a hostile run gets: what it attacks (`HOSTILE_*`, passed into the
    /// sandbox by `[sandbox] env = ["HOSTILE_*"]`), and the secrets of ralph's own
    /// environment it must not see. `ralph_pid` is the process whose signal is tried.
    pub fn env(&self, ralph_pid: Option<u32>) -> Vec<(String, String)> {
        let path = |p: PathBuf| p.display().to_string();
        let mut env = vec![
            ("HOME".into(), path(self.path("home"))),
            ("HOSTILE_HOME".into(), path(self.path("home"))),
            ("AWS_SECRET_ACCESS_KEY".into(), AWS_SECRET.into()),
            ("GITHUB_TOKEN".into(), GITHUB_SECRET.into()),
            ("SSH_AUTH_SOCK".into(), path(self.path("agent.sock"))),
            ("HOSTILE_WS".into(), path(self.ws())),
            ("HOSTILE_SIBLING".into(), path(self.path("sibling"))),
            (
                "HOSTILE_SOCKET".into(),
                path(self.tmp.path().join("s.sock")),
            ),
            ("HOSTILE_AGENT_SOCKET".into(), path(self.path("agent.sock"))),
        ];
        if let Some(pid) = ralph_pid {
            env.push(("HOSTILE_RALPH_PID".into(), pid.to_string()));
        }
        env
    }

    /// A gate command that tries the TCP listener, then runs `check`.
    pub fn tcp_gate(&self, check: &str) -> String {
        format!(
            "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}' 2>/dev/null; then echo 'ATTACK gate-tcp: SUCCEEDED'; \
             else echo 'ATTACK gate-tcp: refused'; fi; {check}",
            self.tcp_port
        )
    }

    /// Asserts that nothing the attempts aimed at happened, seen from outside, in the
    /// workspace `ws` and on the machine; `printed` is all the runs printed.
    pub fn assert_untouched(&self, ws: &Path, git_config: &str, printed: &str, lines: &[String]) {
        assert_eq!(
            self.connections.load(Ordering::SeqCst),
            0,
            "a socket was reached"
        );
        for path in [
            self.path("home/hostile-home.txt"),
            self.path("sibling/hostile.txt"),
            PathBuf::from("/etc/hostile.txt"),
            ws.join(".git/hooks/pre-commit"),
            ws.join(".git/refs/heads/hostile"),
            PathBuf::from("/tmp/hooked"),
        ] {
            assert!(!path.exists(), "{} was written", path.display());
        }
        for secret in [SSH_SECRET, AWS_SECRET, GITHUB_SECRET] {
            assert!(
                !printed.contains(secret) && !lines.iter().any(|l| l.contains(secret)),
                "a secret was read"
            );
        }
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            git_config,
            "the git config was changed"
        );
        assert!(
            !std::fs::read_to_string(ws.join("ralph.toml"))
                .unwrap_or_default()
                .contains("max_iterations = 1"),
            "the config was edited"
        );
        for spec in ["spec.md", "specs/s.md"] {
            if let Ok(text) = std::fs::read_to_string(ws.join(spec)) {
                assert!(!text.contains("hostile"), "the spec was edited");
            }
        }
        let logs = ws.join("build/ralph-logs");
        assert!(
            !logs.exists() || (logs.is_dir() && !logs.is_symlink()),
            "the log folder was replaced"
        );
    }
}

/// Asserts that each attempt of [`NAMES`] and `more` is among `lines`, refused, and that
/// none succeeded.
pub fn assert_all_refused(lines: &[String], more: &[&str], context: &str) {
    let succeeded: Vec<&String> = lines.iter().filter(|l| l.contains("SUCCEEDED")).collect();
    assert!(succeeded.is_empty(), "{context}: {succeeded:#?}");
    for name in NAMES.iter().chain(more) {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("ATTACK {name}: refused"))),
            "{context}: the attempt {name} was not made: {lines:#?}"
        );
    }
}

/// Every `ATTACK` line of every file under `dir` (the agents' and gates' logs, a report).
pub fn attack_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                lines.extend(
                    text.lines()
                        // A line the report wrote, not the script's own text.
                        .filter(|l| l.contains("ATTACK ") && !l.contains("echo 'ATTACK"))
                        .filter(|l| l.contains(": refused") || l.contains(": SUCCEEDED"))
                        .map(str::to_owned),
                );
            }
        }
    }
    lines
}
