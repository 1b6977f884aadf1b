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

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rstest::rstest;

use crate::support::hostile::{Target, assert_all_refused, attack_lines};

/// The agent: every attempt, reported on stderr (in its log), then the honest answer of
/// its role.
const AGENT: &str = r#"role="$1"; subject="$2"
cat > /dev/null
sh "$HOSTILE_ATTACKS"
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

/// A hostile run's target, set up for `ralph`.
struct Hostile(Target);

impl Hostile {
    fn new() -> Hostile {
        let target = Target::new();
        std::fs::write(target.path("scripts/hostile.sh"), AGENT).unwrap();
        Hostile(target)
    }

    fn ws(&self) -> PathBuf {
        self.0.ws()
    }

    /// `ralph.toml`: the hostile agent, a gate that tries the TCP listener and checks the
    /// work, and the test's variables passed into the sandbox.
    fn config(&self, concurrency: usize) -> String {
        let agent = self.0.path("scripts/hostile.sh").display().to_string();
        let gate = self.0.tcp_gate("ls *.txt > /dev/null");
        format!(
            "agents = [\"hostile\"]\nretries = 1\nbuild_concurrency = {concurrency}\n\
             stage_timeout = \"2m\"\nagent_timeout = \"1m\"\n\n\
             [sandbox]\nmode = \"required\"\nenv = [\"HOSTILE_*\"]\n\n\
             [agent.hostile]\ncommand = [\"sh\", {agent:?}, \"{{role}}\", \"{{subject}}\"]\n\n\
             [[gates]]\nname = \"work\"\ncommand = {gate:?}\n"
        )
    }

    /// The workspace of `mode`, committed, with the log folder made before the run so
    /// that the attempts meet it.
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
        std::fs::create_dir_all(ws.join("build/ralph-logs")).unwrap();
    }

    /// `ralph ARGS` in the workspace, with the secrets in its environment and its own pid
    /// told to the agent (the shell's, which `exec` makes ralph's).
    fn ralph(&self, args: &[&str], marker: Option<&str>) -> Output {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("HOSTILE_RALPH_PID=$$ exec \"$0\" \"$@\"")
            .arg(crate::support::ralph_bin())
            .arg("-C")
            .arg(self.ws())
            .args(args)
            .envs(self.0.env(None))
            .env("HOSTILE_ATTACKS", self.0.attacks())
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
                let spec = self.0.path("scripts/thread-spec.md");
                let criterion = self.0.tcp_gate("ls *.txt");
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

#[rstest]
#[case::construct(Mode::Construct)]
#[case::construct_at_once(Mode::ConstructAtOnce)]
#[case::plan_then_build(Mode::PlanThenBuild)]
#[case::thread(Mode::Thread)]
fn every_attempt_of_a_hostile_agent_is_refused_and_the_run_completes(#[case] mode: Mode) {
    if let Err(why) = ralph_loop_process::process::Sandbox::bubblewrap() {
        eprintln!("skipped: no sandbox here ({why})");
        return;
    }
    let hostile = Hostile::new();
    hostile.setup(mode);
    let ws = hostile.ws();
    let head_before = git(&ws, &["rev-parse", "HEAD"]);
    let git_config = std::fs::read_to_string(ws.join(".git/config")).unwrap();

    let outs = hostile.run(mode);

    let printed: String = outs
        .iter()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .collect();
    // Every attempt was made in every agent run, and refused.
    let lines = attack_lines(&ws);
    let mut more = Vec::new();
    if mode == Mode::ConstructAtOnce {
        more.push("rewrite-worktree-git");
    }
    if mode != Mode::Thread {
        more.push("gate-tcp");
    }
    assert_all_refused(&lines, &more, &format!("{mode:?}"));
    // And nothing of it happened, seen from outside.
    hostile
        .0
        .assert_untouched(&ws, &git_config, &printed, &lines);
    if mode != Mode::Thread {
        let ledger = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap();
        assert!(
            !ledger.trim().is_empty(),
            "{mode:?}: the ledger was emptied"
        );
    }
    // The verdict stands: ralph's commits on the user's branch, none of the agent's.
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

/// The hooks of ralph's own commits are code from the workspace: they run in the sandbox
/// too, with the work tree and git writable and nothing else, and the commit goes on.
#[tokio::test]
async fn the_hooks_of_ralphs_commits_run_in_the_sandbox() {
    use crate::support::{accept, no_gaps, tasks};
    use ralph::agent::Script;
    use ralph::{FakeAgent, Ralph, Role};

    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no sandbox here");
        return;
    }
    let target = Target::new();
    let ws = target.ws();
    git(&ws, &["init", "-q", "-b", "main"]);
    write(&ws, ".gitignore", ".ralph/\nbuild/\nhook-report.txt\n");
    write(&ws, "spec.md", "# A\nWrite a.\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    let home = target.path("home");
    let hook = format!(
        "#!/bin/sh\nr=hook-report.txt\n\
         (echo x > {home}/hooked.txt) 2>/dev/null && echo 'home: SUCCEEDED' >> $r || echo 'home: refused' >> $r\n\
         (: > .ralph/spend.jsonl) 2>/dev/null && echo 'ledger: SUCCEEDED' >> $r || echo 'ledger: refused' >> $r\n\
         (echo x > /etc/hooked.txt) 2>/dev/null && echo 'etc: SUCCEEDED' >> $r || echo 'etc: refused' >> $r\n\
         echo ran >> $r\n",
        home = home.display()
    );
    write(&ws, ".git/hooks/pre-commit", &hook);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        ws.join(".git/hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let agent = FakeAgent::new()
        .on(Role::Investigate, "i-1", tasks(&[("Write a", "a exists")]))
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("a.txt", "a\n")
                .answer("Wrote a.\n<TASK_DONE>"),
        )
        .on(Role::Verify, "t-1", accept("ok"))
        .always(Role::GapAnalysis, no_gaps());
    let ralph = Ralph::builder()
        .workspace(&ws)
        .agent(agent)
        .config("sandbox.mode", "required")
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, ralph::Outcome::Complete { .. }),
        "{outcome:?}"
    );
    let report = std::fs::read_to_string(ws.join("hook-report.txt")).unwrap();
    assert!(report.contains("ran"), "the hook did not run: {report}");
    assert!(!report.contains("SUCCEEDED"), "{report}");
    assert!(!home.join("hooked.txt").exists() && !Path::new("/etc/hooked.txt").exists());
    let log = git(&ws, &["log", "--format=%s"]);
    assert!(log.lines().count() >= 2, "the task's commit: {log}");
}
