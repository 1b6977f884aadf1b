//! ralph's peak memory while another vendor's CLI prints a huge output: one run of each
//! process agent against a stand-in script that prints ≈ 200 MiB (then its final answer in
//! the agent's own format), as `claude_memory` does for the Claude CLI.
//!
//! - `CommandAgent`: stdout through a pipe, its last MiB kept (`ANSWER_KEPT`).
//! - `CodexCli`: JSON event lines through a pipe, the last 8 MiB kept (`EVENTS_KEPT`).
//! - `GeminiCli`, `OpencodeCli`: stdout to a file, its last 8 MiB read after the run.
//!
//! Reported: this process's peak resident set (`VmHWM`) after each run, reset between runs.
//! Target: at most 64 MB (61 MiB), as for Claude. `cargo bench --bench agent_memory` prints
//! the numbers; without `--bench` (`cargo test --benches`) it checks itself with 1 MiB.

#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Instant;

use ralph::agent::{
    Agent, AgentExit, AgentRequest, Claim, CodexCli, CommandAgent, GeminiCli, OpencodeCli, Role,
};

fn main() {
    let mib: u64 = if common::measuring() { 200 } else { 1 };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let script = |name: &str, last: &str| {
        let path = dir.path().join(name);
        // `yes` fills fast; the stand-in ignores its arguments and its stdin.
        let text = format!(
            "#!/bin/sh\ncat > /dev/null\nyes '{{\"type\":\"noise\",\"text\":\"0123456789abcdef\"}}' | head -c {}\nprintf '\\n%s\\n' '{last}'\n",
            mib << 20
        );
        std::fs::write(&path, text).expect("script");
        let mut perms = std::fs::metadata(&path).expect("script").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).expect("chmod");
        path
    };
    let command = CommandAgent::new(
        "sh",
        [script("command.sh", "<TASK_DONE>").display().to_string()],
    );
    let codex = CodexCli::new().bin(script(
        "codex.sh",
        r#"{"type":"item.completed","item":{"type":"agent_message","text":"Done.\n<TASK_DONE>"}}"#,
    ));
    let gemini = GeminiCli::new().bin(script(
        "gemini.sh",
        r#"{"type":"message","role":"assistant","content":"Done.\n<TASK_DONE>","delta":true}
{"type":"result","status":"success","stats":{}}"#,
    ));
    let opencode = OpencodeCli::new().bin(script(
        "opencode.sh",
        r#"{"type":"text","part":{"text":"Done.\n<TASK_DONE>"}}"#,
    ));
    let agents: [(&str, &dyn Agent); 4] = [
        ("CommandAgent", &command),
        ("CodexCli", &codex),
        ("GeminiCli", &gemini),
        ("OpencodeCli", &opencode),
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("{mib} MiB of output, then the answer");
    for (name, agent) in agents {
        common::reset_peak();
        let log = dir.path().join(format!("{name}.log"));
        let request = AgentRequest::new(Role::Build, "Print it all.", dir.path()).log_path(&log);
        let started = Instant::now();
        let run = runtime.block_on(agent.run(request)).expect("run");
        let elapsed = started.elapsed();
        assert_eq!(run.exit, AgentExit::Completed, "{name}: {:?}", run.exit);
        assert_eq!(run.claim(), Claim::Done, "{name}");
        println!(
            "{name}: peak RSS {:.1} MiB, {:.2} s",
            common::peak_kib() as f64 / 1024.0,
            elapsed.as_secs_f64()
        );
    }
}
