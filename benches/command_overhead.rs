//! What ralph costs per agent run when it is used as a user uses it: the installed `ralph
//! construct` on a spec, with an `[agent.NAME]` command agent standing in for a real CLI,
//! minus what the stand-in itself costs.
//!
//! - **Run**: `ralph construct spec.md --agent stand` on a fresh workspace (no git, so no
//!   commit per task; measured apart below) whose investigation yields `TASKS` tasks: one
//!   investigate, `TASKS` builds, `TASKS` verifications and one gap analysis, one at a time
//!   (`verify_concurrency = 1`). No gates. Standard output goes to a pipe that is read, as a
//!   terminal or a CI log would.
//! - **Bare**: the same agent runs with the same arguments and the same prompt sizes on
//!   stdin, spawned one after the other by this bench with nothing around them.
//! - **Startup**: `ralph construct` again on the finished workspace (load, lock, sweep, the
//!   verdict), which a run pays once, not per agent run.
//!
//! `(run - startup - bare) / agent runs`, the median over rounds of each round's own
//! difference, is ralph's overhead per agent run. Its parts: the `fdatasync`s that
//! "nothing lost" needs, and the rest (supervision, parsing, records, logs, the display).
//! The rest is measured, not derived: each round also runs the same three timings with
//! `libeatmydata` preloaded, which makes `fsync`/`fdatasync` return at once, and the overhead
//! of those runs is the rest; durability is the difference. (Counting the syncs with
//! `strace` and charging each its median time misjudges durability: in verification ralph
//! makes the store's sync once the next verifier has started, not in its way.) The syncs are still counted
//! and timed with `strace` when it is there, for the record. The target: the rest is at most
//! 0.3 ms per agent run. The same run in a git repository adds one commit per task;
//! reported as its own line.
//!
//! The runs above are unconfined (`[sandbox] mode = "off"`): the target is ralph's own
//! cost. Each round also runs the same construct in the sandbox (`mode = "required"`, where
//! bubblewrap works): the difference per agent run is what the sandbox adds, with a target
//! of at most 20 ms per run on the 2-core CI machine (a bare `bwrap` start measured 8–16 ms
//! there). Every agent run is one sandbox; the git hooks' sandbox is not in these runs (no
//! git).
//!
//! Workspaces are made under Cargo's target tmp dir (a real disk). Run with `cargo bench
//! --bench command_overhead`; under `cargo test --benches` it runs once, small, as a check.

#![allow(clippy::print_stdout)]
// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tasks the investigation yields.
fn tasks() -> usize {
    if common::measuring() { 100 } else { 3 }
}

/// Runs of each kind, for medians. Single rounds of the rest spread over ±0.15 ms on a
/// 2-vCPU VM; 21 rounds keep the median's own wander near a tenth of the target.
fn rounds() -> usize {
    if common::measuring() { 21 } else { 1 }
}

fn main() {
    let ralph = PathBuf::from(env!("CARGO_BIN_EXE_ralph"));
    let n = tasks();
    let runs = 2 * n + 2;
    let no_sync = no_sync_library();
    let mut plain = Vec::new();
    let mut startup = Vec::new();
    let mut bare = Vec::new();
    let mut git = Vec::new();
    // Each round's own difference: the machine's pace drifts between rounds more than
    // within one, and a median of differences follows it where a difference of medians
    // mixes rounds.
    let mut overheads = Vec::new();
    let mut rests = Vec::new();
    let sandbox = ralph_loop_process::process::Sandbox::bubblewrap().is_ok();
    let mut sandbox_costs = Vec::new();
    for _ in 0..rounds() {
        let ws = workspace(n, false);
        let run = time_construct(&ralph, ws.path(), None);
        let start = time_construct(&ralph, ws.path(), None);
        let agents = time_bare(ws.path(), n, None);
        overheads.push(run.saturating_sub(start).saturating_sub(agents));
        if let Some(library) = &no_sync {
            let ws = workspace(n, false);
            let run = time_construct(&ralph, ws.path(), Some(library));
            let start = time_construct(&ralph, ws.path(), Some(library));
            let agents = time_bare(ws.path(), n, Some(library));
            rests.push(run.saturating_sub(start).saturating_sub(agents));
        }
        plain.push(run);
        startup.push(start);
        bare.push(agents);
        let repo = workspace(n, true);
        git.push(time_construct(&ralph, repo.path(), None));
        if sandbox {
            let confined = workspace_in(n, false, "required");
            let confined = time_construct(&ralph, confined.path(), None);
            sandbox_costs.push(confined.saturating_sub(run));
        }
    }
    let (plain, startup, bare, git) = (median(plain), median(startup), median(bare), median(git));
    let per_run = |d: Duration| d.as_secs_f64() * 1e3 / runs as f64;
    let spread = |samples: &[Duration]| {
        (
            samples.iter().copied().min().map_or(0.0, per_run),
            samples.iter().copied().max().map_or(0.0, per_run),
        )
    };
    let overhead = per_run(median(overheads.clone()));
    let syncs = trace_syncs(&ralph, n);
    let per_task_git = git.saturating_sub(plain).as_secs_f64() / n as f64;

    println!(
        "command_overhead: {n} tasks, {runs} agent runs (medians of {} rounds)",
        rounds()
    );
    println!("  ralph construct            {:>10.1} ms", ms(plain));
    println!("  startup (a finished board) {:>10.1} ms", ms(startup));
    println!("  the bare agent runs        {:>10.1} ms", ms(bare));
    let (low, high) = spread(&overheads);
    println!(
        "  overhead per agent run     {overhead:>10.3} ms  (rounds from {low:.3} to {high:.3} ms)"
    );
    if let Some(syncs) = &syncs {
        println!(
            "    fdatasync calls          {:>10.2} per run, {:.3} ms the median one in the run (one alone: {:.3} ms)",
            syncs.len() as f64 / runs as f64,
            if syncs.is_empty() {
                0.0
            } else {
                ms(median(syncs.clone()))
            },
            ms(time_sync())
        );
    }
    if rests.is_empty() {
        println!(
            "    (libeatmydata is not installed: the run without syncs is not measured, so the rest is not known)"
        );
    } else {
        let rest = per_run(median(rests.clone()));
        let (low, high) = spread(&rests);
        println!(
            "    durability (the syncs)   {:>10.3} ms  (the overhead minus the rest)",
            overhead - rest
        );
        println!(
            "    the rest                 {rest:>10.3} ms  (rounds from {low:.3} to {high:.3} ms; target ≤ 0.300: {})",
            if rest <= 0.3 { "met" } else { "MISSED" }
        );
    }
    println!(
        "  one commit per task (git)  {:>10.3} ms per task",
        per_task_git * 1e3
    );
    if sandbox_costs.is_empty() {
        println!("  the sandbox: bubblewrap cannot run here, not measured");
    } else {
        let cost = per_run(median(sandbox_costs.clone()));
        let (low, high) = spread(&sandbox_costs);
        println!(
            "  the sandbox per agent run  {cost:>10.3} ms  (rounds from {low:.3} to {high:.3} ms; target ≤ 20: {})",
            if cost <= 20.0 { "met" } else { "MISSED" }
        );
    }
}

/// `libeatmydata.so`, which turns `fsync` and `fdatasync` into calls that return at once:
/// preloaded into the same runs, it measures the overhead without the syncs, the part of it
/// that is not durability. `None` when it is not installed (Debian: `eatmydata`).
fn no_sync_library() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("RALPH_BENCH_NO_SYNC_LIBRARY") {
        return Some(PathBuf::from(path));
    }
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .map(|dir| Path::new(dir).join("libeatmydata.so"))
    .find(|path| path.exists())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// A workspace with the spec, a `ralph.toml` naming the stand-in agent, and the stand-in;
/// unconfined.
fn workspace(tasks: usize, git: bool) -> tempfile::TempDir {
    workspace_in(tasks, git, "off")
}

/// [`workspace`], its runs in `[sandbox] mode = sandbox`.
fn workspace_in(tasks: usize, git: bool, sandbox: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("command-overhead-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a workspace");
    let path = dir.path();
    std::fs::write(path.join("spec.md"), "# Bench\nDo the tasks.\n").expect("spec");
    let stand = path.join("stand.sh");
    std::fs::write(&stand, stand_in(tasks)).expect("stand-in");
    std::fs::write(
        path.join("ralph.toml"),
        format!(
            "verify_concurrency = 1\n[sandbox]\nmode = \"{sandbox}\"\n\
             [agent.stand]\ncommand = [\"/bin/sh\", \"{}\", \"{{role}}\", \"{{subject}}\"]\n",
            stand.display()
        ),
    )
    .expect("ralph.toml");
    if git {
        std::fs::write(path.join(".gitignore"), ".ralph/\nbuild/\nstand.sh\n").expect("ignore");
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
                "commit",
                "-qm",
                "base",
            ],
        ] {
            let ok = Command::new("git").args(args).current_dir(path).status();
            assert!(ok.is_ok_and(|s| s.success()), "git {args:?}");
        }
    }
    dir
}

/// The stand-in CLI: reads its prompt, answers for its role at once. Each build writes a
/// file, so a git workspace has something to commit.
fn stand_in(tasks: usize) -> String {
    let list: Vec<String> = (1..=tasks)
        .map(|i| format!(r#"{{"name":"Task {i}","accept":"done {i}"}}"#))
        .collect();
    format!(
        r#"cat > /dev/null
case "$1" in
investigate) printf '%s\n' '{{"tasks":[{}]}}' ;;
build) echo "$2" > "out-$2.txt"; printf 'Done.\n<TASK_DONE>\n' ;;
verify) printf '{{"verdict":"accept","reason":"ok"}}\n' ;;
gap_analysis) printf '{{"tasks":[],"issues":[]}}\n' ;;
*) exit 1 ;;
esac
"#,
        list.join(",")
    )
}

/// Wall time of `ralph construct spec.md --agent stand` in `dir`, its output read through a
/// pipe; with `no_sync` preloaded into it (and so into its agents) when given.
fn time_construct(ralph: &Path, dir: &Path, no_sync: Option<&Path>) -> Duration {
    let mut command = construct(ralph, dir);
    if let Some(library) = no_sync {
        command.env("LD_PRELOAD", library);
    }
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ralph starts");
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.as_mut() {
        let _ = stdout.read_to_end(&mut out);
    }
    let output = child.wait_with_output().expect("ralph ends");
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "ralph construct failed: {}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

/// `ralph construct spec.md --agent stand` in `dir`. Git is not let look above `dir`: the
/// workspaces sit in this repository's target folder, which is not theirs.
fn construct(ralph: &Path, dir: &Path) -> Command {
    let mut command = Command::new(ralph);
    command
        .args(["construct", "spec.md", "--agent", "stand"])
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir));
    command
}

/// The same agent runs as a construct of `tasks` tasks makes, spawned one after the other
/// with prompts of about the size ralph sends (with the same preload as ralph's runs: it
/// reaches the agents ralph starts too).
fn time_bare(dir: &Path, tasks: usize, no_sync: Option<&Path>) -> Duration {
    let stand = dir.join("stand.sh");
    let prompt = vec![b'x'; 2048];
    let mut runs: Vec<(String, String)> = vec![("investigate".into(), "i-1".into())];
    for i in 1..=tasks {
        runs.push(("build".into(), format!("t-{i}")));
    }
    for i in 1..=tasks {
        runs.push(("verify".into(), format!("t-{i}")));
    }
    runs.push(("gap_analysis".into(), "iteration-1".into()));
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch");
    let started = Instant::now();
    for (role, subject) in &runs {
        let mut command = Command::new("/bin/sh");
        if let Some(library) = no_sync {
            command.env("LD_PRELOAD", library);
        }
        let mut child = command
            .arg(&stand)
            .args([role, subject])
            .current_dir(scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the stand-in starts");
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&prompt);
        }
        let _ = child.wait_with_output();
    }
    started.elapsed()
}

/// The `fdatasync` and `fsync` calls of one construct of `tasks` tasks, traced with
/// `strace` (only those calls are stopped, with `--seccomp-bpf`) and each timed (`-T`);
/// `None` when strace is not there.
fn trace_syncs(ralph: &Path, tasks: usize) -> Option<Vec<Duration>> {
    let ws = workspace(tasks, false);
    let log = ws.path().join("strace.txt");
    let status = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-T",
            "-e",
            "trace=fdatasync,fsync",
            "-o",
        ])
        .arg(&log)
        .arg(ralph)
        .args(["construct", "spec.md", "--agent", "stand"])
        .current_dir(ws.path())
        .env("GIT_CEILING_DIRECTORIES", env!("CARGO_TARGET_TMPDIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(&log).ok()?;
    Some(text.lines().filter_map(sync_time).collect())
}

/// The time a traced `fdatasync(…) = 0 <0.000412>` line took.
fn sync_time(line: &str) -> Option<Duration> {
    if !(line.contains("fdatasync(") || line.contains("fsync(")) {
        return None;
    }
    let secs = line.rsplit_once('<')?.1.strip_suffix('>')?;
    secs.parse::<f64>().ok().map(Duration::from_secs_f64)
}

/// What one small append and its `fdatasync` cost in the folder the workspaces are in.
fn time_sync() -> Duration {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a folder");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("plan.jsonl"))
        .expect("a file");
    let line = [b'x'; 200];
    let n = if common::measuring() { 300 } else { 3 };
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        file.write_all(&line).expect("write");
        file.sync_data().expect("fdatasync");
        samples.push(started.elapsed());
    }
    median(samples)
}
