//! A hostile agent, in every mode, through the `ralph` command: in each of its runs (and its
//! gate, in each check) it tries what an agent's hands could do to the referee and to the
//! machine, and every attempt is refused while the run goes on to its verdict as if nothing
//! had been tried (issue 34: the referee out of the player's reach).
//!
//! The attempts: write a file in `$HOME`, in a sibling folder of the workspace and in `/etc`;
//! read a key planted in `~/.ssh`; read `AWS_SECRET_ACCESS_KEY` and `GITHUB_TOKEN`; write
//! `.git/hooks/pre-commit`, `.git/config` and a ref; `git commit` and `git reset --hard`;
//! edit `ralph.toml` and the spec; delete `.ralph/ralph.lock`; truncate `.ralph/spend.jsonl`;
//! replace `build/ralph-logs` with a link out of the tree; rewrite a work tree's `.git` file;
//! remount a protected path read-write and unmount it; signal ralph; connect to Unix sockets
//! the test listens on outside the workspace (in `/tmp`, and the one `$SSH_AUTH_SOCK` names);
//! and, from the gate, open a TCP connection to a listener on 127.0.0.1.
//!
//! Skipped where bubblewrap cannot run (CI installs it).

#![allow(clippy::unwrap_used)]

use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rstest::rstest;

const SSH_SECRET: &str = "hostile-ssh-secret-key-material";
const AWS_SECRET: &str = "hostile-aws-secret-value";
const GITHUB_SECRET: &str = "hostile-github-token-value";

/// The agent: every attack, each reported on stderr as `ATTACK <name>: refused` or
/// `ATTACK <name>: SUCCEEDED`; then the honest answer of its role.
const AGENT: &str = r#"role="$1"; subject="$2"
cat > /dev/null
ws="$HOSTILE_WS"
report() { if [ "$2" = 0 ]; then echo "ATTACK $1: SUCCEEDED" >&2; else echo "ATTACK $1: refused" >&2; fi; }
try() { name="$1"; shift; ( "$@" ) > /dev/null 2>&1; report "$name" $?; }
gd=$(git rev-parse --git-common-dir 2>/dev/null || echo .git)
try remount-git mount -o remount,rw,bind "$ws/.git"
try umount-toml umount "$ws/ralph.toml"
try write-home sh -c 'echo x > "$HOME/hostile-home.txt"'
try write-sibling sh -c 'echo x > "$HOSTILE_SIBLING/hostile.txt"'
try write-etc sh -c 'echo x > /etc/hostile.txt'
try read-ssh-key sh -c 'grep -q hostile-ssh-secret "$HOME/.ssh/id_hostile"'
try read-aws-secret sh -c 'env | grep -q hostile-aws-secret'
try read-github-token sh -c 'env | grep -q hostile-github-token'
try write-hook sh -c "printf '#!/bin/sh\necho hooked > /tmp/hooked\n' > '$gd/hooks/pre-commit'"
try write-git-config sh -c "printf '[alias]\n\thostile = log\n' >> '$gd/config'"
try write-ref sh -c "git rev-parse HEAD > '$gd/refs/heads/hostile'"
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
case "$role" in
  investigate) echo '{"tasks":[{"name":"Write a","accept":"a file exists"},{"name":"Write b","accept":"a file exists"}]}' ;;
  build) echo done > "$subject.txt"; printf 'Wrote %s.txt.\n%s\n' "$subject" "${HOSTILE_MARKER:-<TASK_DONE>}" ;;
  verify) echo '{"verdict":"accept","reason":"the file exists"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  breakdown) echo '{"specs":[{"id":"s","name":"S","file":"specs/s.md","priority":1,"context":"","tasks":[{"description":"Write a file","acceptanceCriteria":["a file exists"]}],"acceptanceCriteria":[]}]}' ;;
  planner) printf '# Plan: s\n1. Write a file.\n\nPLAN_COMPLETE\n' ;;
  *) echo "unexpected role $role" >&2; exit 1 ;;
esac
"#;

/// The modes the agent is tried in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Construct,
    /// `build_concurrency = 2`: two tasks, each in its own work tree.
    ConstructAtOnce,
    /// `ralph plan`, then `ralph build`.
    PlanThenBuild,
    Thread,
}

/// The machine as the attacker finds it: a home with a planted key, a sibling folder, the
/// sockets and the TCP listener, each counting what reaches it.
struct Target {
    /// Under the build's folder (not `/tmp`, which the sandbox empties anyway): the
    /// workspace, the home, the sibling folder, the scripts.
    base: tempfile::TempDir,
    /// A folder in `/tmp` holding a Unix socket.
    tmp: tempfile::TempDir,
    tcp_port: u16,
    connections: Arc<AtomicUsize>,
}

impl Target {
    fn new() -> Target {
        let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for dir in ["ws", "home/.ssh", "sibling", "scripts"] {
            std::fs::create_dir_all(base.path().join(dir)).unwrap();
        }
        std::fs::write(base.path().join("home/.ssh/id_hostile"), SSH_SECRET).unwrap();
        std::fs::write(base.path().join("scripts/hostile.sh"), AGENT).unwrap();
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

    fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    fn ws(&self) -> PathBuf {
        self.path("ws")
    }

    /// `ralph.toml`: the hostile agent, a gate that tries the TCP listener and checks the
    /// work, and the test's variables passed into the sandbox.
    fn config(&self, concurrency: usize) -> String {
        let agent = self.path("scripts/hostile.sh").display().to_string();
        let gate = format!(
            "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}' 2>/dev/null; then echo 'ATTACK gate-tcp: SUCCEEDED'; \
             else echo 'ATTACK gate-tcp: refused'; fi; ls *.txt > /dev/null",
            self.tcp_port
        );
        format!(
            "agents = [\"hostile\"]\nretries = 1\nbuild_concurrency = {concurrency}\n\
             stage_timeout = \"2m\"\nagent_timeout = \"1m\"\n\n\
             [sandbox]\nmode = \"required\"\nenv = [\"HOSTILE_*\"]\n\n\
             [agent.hostile]\ncommand = [\"sh\", {agent:?}, \"{{role}}\", \"{{subject}}\"]\n\n\
             [[gates]]\nname = \"work\"\ncommand = {gate:?}\n"
        )
    }

    /// The workspace of `mode`, committed.
    fn setup(&self, mode: Mode) {
        let ws = self.ws();
        let concurrency = if mode == Mode::ConstructAtOnce { 2 } else { 1 };
        git(&ws, &["init", "-q", "-b", "main"]);
        write(&ws, ".gitignore", ".ralph/\nbuild/\n");
        write(&ws, "ralph.toml", &self.config(concurrency));
        match mode {
            Mode::Construct | Mode::ConstructAtOnce => {
                write(&ws, "spec.md", "# Files\nWrite a file.\n");
            }
            Mode::PlanThenBuild => write(&ws, "specs/s.md", "# S\nWrite a file.\n"),
            Mode::Thread => {}
        }
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-q", "-m", "init"]);
        // Made before the run, so that the attempts meet them: the log folder and the
        // ledger.
        std::fs::create_dir_all(ws.join("build/ralph-logs")).unwrap();
    }

    /// `ralph ARGS` in the workspace, with the secrets in its environment and its own pid
    /// told to the agent.
    fn ralph(&self, args: &[&str], marker: Option<&str>) -> Output {
        let ralph = crate::support::ralph_bin();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("HOSTILE_RALPH_PID=$$ exec \"$0\" \"$@\"")
            .arg(ralph)
            .arg("-C")
            .arg(self.ws())
            .args(args)
            .env("HOME", self.path("home"))
            .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
            .env("GITHUB_TOKEN", GITHUB_SECRET)
            .env("SSH_AUTH_SOCK", self.path("agent.sock"))
            .env("HOSTILE_WS", self.ws())
            .env("HOSTILE_SIBLING", self.path("sibling"))
            .env("HOSTILE_SOCKET", self.tmp.path().join("s.sock"))
            .env("HOSTILE_AGENT_SOCKET", self.path("agent.sock"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("RALPH_CLAUDE_BIN");
        if let Some(marker) = marker {
            cmd.env("HOSTILE_MARKER", marker);
        }
        cmd.output().unwrap()
    }

    /// Runs `mode` to its end.
    fn run(&self, mode: Mode) -> Vec<Output> {
        let ok = |out: Output| {
            assert_eq!(
                out.status.code(),
                Some(0),
                "{mode:?}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            out
        };
        match mode {
            Mode::Construct | Mode::ConstructAtOnce => {
                vec![ok(self.ralph(&["construct", "spec.md"], None))]
            }
            Mode::PlanThenBuild => vec![
                ok(self.ralph(&["plan"], None)),
                ok(self.ralph(&["build"], None)),
            ],
            Mode::Thread => {
                let spec = self.path("scripts/thread-spec.md");
                let criterion = format!(
                    "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}' 2>/dev/null && echo 'ATTACK gate-tcp: SUCCEEDED'; ls *.txt",
                    self.tcp_port
                );
                std::fs::write(
                    &spec,
                    format!(
                        "# Files\n<promise>FILES_DONE</promise>\n\n## Acceptance Criteria\n\n\
                         - [ ] a file exists: `{criterion}`\n"
                    ),
                )
                .unwrap();
                let spec = spec.display().to_string();
                let mut outs = Vec::new();
                for args in [
                    vec!["thread", "new", "--title", "Files", "--spec", spec.as_str()],
                    vec!["thread", "finalize"],
                    vec!["thread", "start", "--agent", "hostile"],
                ] {
                    outs.push(ok(self.ralph(&args, Some("FILES_DONE"))));
                }
                outs
            }
        }
    }
}

fn write(dir: &Path, rel: &str, text: &str) {
    crate::support::write(dir, rel, text);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every `ATTACK` line of every file under `dir` (the agents' and gates' logs).
fn attack_lines(dir: &Path) -> Vec<String> {
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
            } else if let Ok(mut file) = std::fs::File::open(&path) {
                let mut text = String::new();
                if file.read_to_string(&mut text).is_ok() {
                    lines.extend(
                        text.lines()
                            .filter(|l| l.contains("ATTACK ") && l.contains(": "))
                            .filter(|l| !l.contains("echo 'ATTACK") && !l.contains("report"))
                            .map(str::to_owned),
                    );
                }
            }
        }
    }
    lines
}

#[rstest]
#[case::construct(Mode::Construct)]
#[case::construct_at_once(Mode::ConstructAtOnce)]
#[case::plan_then_build(Mode::PlanThenBuild)]
#[case::thread(Mode::Thread)]
fn every_attempt_of_a_hostile_agent_is_refused_and_the_run_completes(#[case] mode: Mode) {
    if let Err(why) = ralph::__internals::process::Sandbox::bubblewrap() {
        eprintln!("skipped: no sandbox here ({why})");
        return;
    }
    let target = Target::new();
    target.setup(mode);
    let ws = target.ws();
    let head_before = git(&ws, &["rev-parse", "HEAD"]);
    let git_config = std::fs::read_to_string(ws.join(".git/config")).unwrap();

    let outs = target.run(mode);

    let printed: String = outs
        .iter()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .collect();
    // Every attempt was made, and refused.
    let lines = attack_lines(&ws);
    eprintln!("{mode:?}: {} attempts seen", lines.len());
    let succeeded: Vec<&String> = lines.iter().filter(|l| l.contains("SUCCEEDED")).collect();
    assert!(succeeded.is_empty(), "{mode:?}: {succeeded:#?}");
    for name in [
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
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("ATTACK {name}: refused"))),
            "{mode:?}: the attempt {name} was not made: {lines:#?}\n{printed}"
        );
    }
    if mode == Mode::ConstructAtOnce {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("ATTACK rewrite-worktree-git: refused")),
            "{lines:#?}"
        );
    }
    if mode != Mode::Thread {
        assert!(
            lines.iter().any(|l| l.contains("ATTACK gate-tcp: refused")),
            "{mode:?}: the gate did not try: {lines:#?}"
        );
    }

    // And nothing of it happened, seen from outside.
    assert_eq!(
        target.connections.load(Ordering::SeqCst),
        0,
        "a socket was reached"
    );
    for path in [
        target.path("home/hostile-home.txt"),
        target.path("sibling/hostile.txt"),
        PathBuf::from("/etc/hostile.txt"),
        ws.join(".git/hooks/pre-commit"),
        ws.join(".git/refs/heads/hostile"),
        PathBuf::from("/tmp/hooked"),
    ] {
        assert!(!path.exists(), "{mode:?}: {} was written", path.display());
    }
    for secret in [SSH_SECRET, AWS_SECRET, GITHUB_SECRET] {
        assert!(
            !printed.contains(secret) && !lines.iter().any(|l| l.contains(secret)),
            "{mode:?}: a secret was read"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        git_config
    );
    assert!(
        !std::fs::read_to_string(ws.join("ralph.toml"))
            .unwrap()
            .contains("max_iterations = 1"),
        "the config was edited"
    );
    for spec in ["spec.md", "specs/s.md"] {
        if let Ok(text) = std::fs::read_to_string(ws.join(spec)) {
            assert!(!text.contains("hostile"), "{mode:?}: the spec was edited");
        }
    }
    let logs = ws.join("build/ralph-logs");
    assert!(
        logs.is_dir() && !logs.is_symlink(),
        "the log folder was replaced"
    );
    if mode != Mode::Thread {
        let ledger = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap();
        assert!(
            !ledger.trim().is_empty(),
            "{mode:?}: the ledger was emptied"
        );
    }
    // The verdict stands: ralph's commits, on ralph's branch, none of the agent's.
    let log = git(
        &ws,
        &[
            "log",
            "--format=%an %s",
            &format!("{}..", head_before.trim()),
        ],
    );
    assert!(
        !log.contains("hostile"),
        "{mode:?}: the agent committed: {log}"
    );
    let tree = git(&ws, &["ls-files"]);
    assert!(!tree.contains("hostile"), "{mode:?}: {tree}");
    if mode == Mode::Thread {
        assert!(printed.contains("phase: Implemented"), "{printed}");
    } else {
        assert!(
            log.lines().count() >= 1,
            "{mode:?}: nothing was committed:\n{printed}"
        );
    }
}
