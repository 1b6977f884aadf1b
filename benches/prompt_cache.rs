//! How much of ralph's prompts the providers' prompt caches can reuse: a construct loop on a
//! spec of 9 KiB with 20 tasks, two built at once (`build_concurrency = 2`) and one retry,
//! run by a [`FakeAgent`] that records every prompt, twice in one run of the bench: with the
//! templates as they were on 2026-12-05 (`benches/common/templates-2026-12-05/`, given as
//! `[prompts]` overrides) and with today's built-in ones.
//!
//! Reported per role:
//!
//! - (a) the share of each prompt's bytes that is a prefix of an earlier prompt of the same
//!   role (every prompt after the role's first; the target is ≥ 80 % for BUILD and VERIFY);
//! - (b) the input billed per accepted task, in tokens at the uncached price (4 bytes a
//!   token), under each provider's rules as stated below, against the same figure with no
//!   cache at all (the target: ≤ 0.5 × the old templates' figure).
//!
//! The rules: **OpenAI** (Codex) reuses the longest prefix a prompt shares with an earlier
//! one, from 1,024 tokens on, in steps of 128 tokens, billed at 0.1× (the GPT-5 models'
//! cached price). **Anthropic** (Claude) reads a cache only up to a `cache_control`
//! breakpoint the client sets, of at least 1,024 tokens (Sonnet, Opus), written at 1.25×
//! and read at 0.1× within 5 minutes: the Claude CLI sets one at the end of its system
//! prompt, where ralph puts its prompt's stable part (`stable_prefix`), and one at the end
//! of the user's message; a prompt with no stable part shares only the whole message, which
//! another task's never matches. Calls started at once all miss: each writes, none reads (the
//! first two builds, `build_concurrency`, and the first four verifiers, `verify_concurrency`,
//! of the one VERIFY stage). The CLIs' own system
//! prompt and tools, which come before ralph's text, are left out here: the same for both
//! template sets. (c), the requests the real Claude and Codex CLIs send, measured end to end
//! against the scripted APIs, is `benches/prompt_cache_cli.rs`.
//!
//! A count, not a time: `cargo bench --bench prompt_cache`. Results: `benches/RESULTS.md`.

// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// A bench reports on stdout.
#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "common/inventory.rs"]
mod inventory;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ralph::agent::{AgentRequest, Script};
use ralph::{FakeAgent, Ralph, Role};
use serde_json::json;

/// Tasks on the board.
const TASKS: usize = 20;
/// Bytes a token, for the bills.
const BYTES_PER_TOKEN: f64 = 4.0;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let before = rt.block_on(run(true));
    let after = rt.block_on(run(false));
    println!(
        "spec: {} bytes, {TASKS} tasks, build_concurrency 2, one retry\n",
        inventory::spec(TASKS).len()
    );
    println!("| role | calls | (a) reused prefix, mean (min) 2026-12-05 | today | target |");
    println!("|---|---:|---:|---:|---|");
    for role in ["build", "verify", "gap_analysis"] {
        let (old, new) = (&before[role], &after[role]);
        let target = match role {
            "build" | "verify" => verdict(mean(&prefix_shares(new)) >= 0.8, "≥ 80 %"),
            _ => "-".to_owned(),
        };
        println!(
            "| {role} | {} | {} | {} | {target} |",
            new.len(),
            shares(old),
            shares(new)
        );
    }
    println!("\n| (b) input billed per accepted task, tokens | no cache | OpenAI | Anthropic |");
    println!("|---|---:|---:|---:|");
    let per_task = |tokens: f64| tokens / TASKS as f64;
    let mut bills = Vec::new();
    for (name, runs) in [
        ("templates of 2026-12-05", &before),
        ("today's templates", &after),
    ] {
        let all: Vec<AgentRequest> = runs.values().flatten().cloned().collect();
        let bill = (per_task(openai_bill(runs)), per_task(anthropic_bill(runs)));
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            per_task(uncached(&all)),
            bill.0,
            bill.1
        );
        bills.push(bill);
    }
    let (old, new) = (bills[0], bills[1]);
    println!(
        "\ntoday ÷ 2026-12-05: OpenAI {:.2} ({}), Anthropic {:.2} ({})",
        new.0 / old.0,
        verdict(new.0 <= 0.5 * old.0, "≤ 0.5"),
        new.1 / old.1,
        verdict(new.1 <= 0.5 * old.1, "≤ 0.5"),
    );
}

fn verdict(met: bool, target: &str) -> String {
    format!("{target}: {}", if met { "met" } else { "MISSED" })
}

/// `41 % (0 %)`: the mean and the least of the shares.
fn shares(requests: &[AgentRequest]) -> String {
    let shares = prefix_shares(requests);
    if shares.is_empty() {
        return "-".into();
    }
    let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
    format!("{:.0} % ({:.0} %)", mean(&shares) * 100.0, min * 100.0)
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// For each prompt after the first, the share of its bytes that is a prefix of an earlier
/// prompt of the same role.
fn prefix_shares(requests: &[AgentRequest]) -> Vec<f64> {
    (1..requests.len())
        .map(|i| {
            let reused = reused_prefix(requests, i);
            reused as f64 / requests[i].prompt.len() as f64
        })
        .collect()
}

/// The longest prefix prompt `i` shares with an earlier prompt of the list.
fn reused_prefix(requests: &[AgentRequest], i: usize) -> usize {
    let prompt = requests[i].prompt.as_bytes();
    requests[..i]
        .iter()
        .map(|earlier| common_prefix(prompt, earlier.prompt.as_bytes()))
        .max()
        .unwrap_or(0)
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn tokens(bytes: usize) -> f64 {
    bytes as f64 / BYTES_PER_TOKEN
}

fn uncached(requests: &[AgentRequest]) -> f64 {
    requests.iter().map(|r| tokens(r.prompt.len())).sum()
}

/// OpenAI: the prefix shared with an earlier prompt of the role, from 1,024 tokens on, in
/// steps of 128, at 0.1×; the rest at 1×.
fn openai_bill(runs: &BTreeMap<String, Vec<AgentRequest>>) -> f64 {
    let mut billed = 0.0;
    for requests in runs.values() {
        for (i, request) in requests.iter().enumerate() {
            let all = tokens(request.prompt.len());
            let shared = tokens(reused_prefix(requests, i));
            let cached = match shared >= 1024.0 {
                true => (shared / 128.0).floor() * 128.0,
                false => 0.0,
            };
            billed += (all - cached) + 0.1 * cached;
        }
    }
    billed
}

/// Anthropic: a call's stable part (before the CLI's breakpoint) is read at 0.1× when an
/// earlier call that had ended wrote the same one, else written at 1.25×; the rest is
/// billed at 1×. Below 1,024 tokens nothing is cached. The calls a stage starts at once
/// (the first two builds, `build_concurrency`; the first four verifiers,
/// `verify_concurrency`) all miss: none has written the cache yet.
fn anthropic_bill(runs: &BTreeMap<String, Vec<AgentRequest>>) -> f64 {
    let mut billed = 0.0;
    for (role, requests) in runs {
        let at_once = match role.as_str() {
            "build" => 2,
            "verify" => 4,
            _ => 1,
        };
        let mut written: Vec<&str> = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let all = tokens(request.prompt.len());
            let stable = &request.prompt[..request.stable_prefix];
            let size = tokens(stable.len());
            if size < 1024.0 {
                billed += all;
                continue;
            }
            let hit = i >= at_once && written.contains(&stable);
            billed += (all - size) + size * if hit { 0.1 } else { 1.25 };
            written.push(stable);
        }
    }
    billed
}

/// One construct run; its agents' requests by role, in the order they came.
async fn run(old_templates: bool) -> BTreeMap<String, Vec<AgentRequest>> {
    let dir = tempfile::tempdir().expect("a temp workspace");
    let ws = dir.path();
    std::fs::write(ws.join("spec.md"), inventory::spec(TASKS)).expect("the spec");
    std::fs::write(ws.join(".gitignore"), ".ralph/\nbuild/\nold/\nralph.toml\n").expect("ignore");
    if old_templates {
        override_with_old_templates(ws);
    }
    inventory::commit_all(ws);
    let store = inventory::board(TASKS).await;
    let done = Script::new().answer("Done.\n<TASK_DONE>");
    let agent = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Build, "t-5", 1, Script::new().answer("Not yet."))
            .always(Role::Build, done)
            .always(
                Role::Verify,
                Script::new().json(json!({"verdict": "accept", "reason": "ok"})),
            )
            .always(
                Role::GapAnalysis,
                Script::new().json(json!({"tasks": [], "issues": []})),
            ),
    );
    let outcome = Ralph::builder()
        .workspace(ws)
        .agent(agent.clone())
        .store(store)
        .build_concurrency(2)
        .build()
        .expect("ralph builds")
        .construct("spec.md")
        .await
        .expect("the run");
    assert!(
        matches!(outcome, ralph::Outcome::Complete { .. }),
        "{outcome:?}"
    );
    let mut by_role: BTreeMap<String, Vec<AgentRequest>> = BTreeMap::new();
    for request in agent.requests() {
        by_role
            .entry(request.role.to_string())
            .or_default()
            .push(request);
    }
    by_role
}

/// The templates of 2026-12-05 as `[prompts]` overrides in `ws`.
fn override_with_old_templates(ws: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/common/templates-2026-12-05");
    std::fs::create_dir(ws.join("old")).expect("old/");
    let mut toml = String::from("[prompts]\n");
    for name in ["build", "retry", "verify", "gap_analysis"] {
        std::fs::copy(
            from.join(format!("{name}.md")),
            ws.join(format!("old/{name}.md")),
        )
        .expect("a template");
        toml.push_str(&format!("{name} = \"old/{name}.md\"\n"));
    }
    std::fs::write(ws.join("ralph.toml"), toml).expect("ralph.toml");
}
