//! What the providers' prompt caches can reuse of the requests the **real** Claude and Codex
//! CLIs send for ralph: issue 38's figure (c), end to end. `prompt_cache` measures ralph's
//! own prompt text; the API sees that text wrapped in the CLI's system prompt, tools and
//! environment, and this bench measures the requests as they reach the API.
//!
//! Each CLI found runs a construct loop through [`ralph::Ralph`] (the pinned CLI, spawned
//! by `ClaudeCli` or `CodexCli`, in ralph's default sandbox) against the scripted API of the
//! tests (`tests/support/messages_api.rs`, `tests/support/responses_api.rs`) on 127.0.0.1,
//! which records every request: a spec of 8,456 bytes, 6 tasks on the board, each built
//! (answer `<TASK_DONE>`) and accepted by a verifier, then one gap analysis. Twice per CLI:
//! with `build_concurrency = 1`, where every build runs in the workspace, and with 2, where
//! each task is built in a git work tree of its own. A request's role is told by the
//! heading of ralph's template it carries (`# Build One Task of a Spec`, `# Verify One
//! Task`).
//!
//! Reported per role, for every request after the role's first, the share of its bytes the
//! provider's cache could serve from an earlier request of the same role (mean and least):
//!
//! - **Claude** (Anthropic Messages API): the request as the cache reads it, `tools`, then
//!   `system`, then each message's content blocks, every element as compact JSON (keys
//!   sorted, as `serde_json` writes them) without its `cache_control` (a marker, not
//!   content), concatenated. A breakpoint follows each
//!   element that carries `cache_control`. An earlier request wrote a cache entry at each of
//!   its breakpoints: its bytes up to there. This request reads the longest of its own
//!   prefixes that equals such an entry and ends at an element boundary at, or up to 20
//!   elements before, one of its breakpoints (the API's look-back). The share is that
//!   prefix's bytes over all the bytes.
//! - **Codex** (OpenAI Responses API): `instructions` (the CLI sends none: its own prompt is
//!   the first `input` message), then each `input` item without its `id` (a new one each
//!   session, naming the item, not text of the prompt), as compact JSON (keys sorted),
//!   concatenated in the order sent. The share is the longest common prefix, in bytes, with an earlier request
//!   of the same role, over all the bytes; OpenAI needs no breakpoint. The `tools` and the
//!   output schema, which OpenAI also caches, are not counted: the bench prints whether they
//!   are the same across each role's requests.
//!
//! What the figure leaves out: timing (calls started at once all miss, as `prompt_cache`'s
//! bill accounts for; here "earlier" is the order in which the API received them), the
//! least prefix a cache keeps (1,024 tokens) and OpenAI's steps of 128 tokens, and the
//! cache's routing (Codex sends a `prompt_cache_key` of its own each session, and OpenAI
//! uses it to pick a machine, so requests with different keys may miss what they share).
//! The CLIs' own system prompts and tools count in the bytes, as the API bills them.
//!
//! A CLI is `$RALPH_CLAUDE_BIN` (else `claude` on `PATH`) and `$TEST_CODEX_BIN` (else
//! `codex` on `PATH`), as the tests find them; without it, its half is skipped, saying so.
//! Set `PROMPT_CACHE_CLI_DUMP` to a folder to keep the request bodies there.
//!
//! A count, not a time: `cargo bench --bench prompt_cache_cli`. Results: `benches/RESULTS.md`.

// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// A bench reports on stdout.
#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

// The tests' scripted APIs, used as they are: they `unwrap`, and their items are `pub` for
// the test binaries (each file allows its own unused helpers).
#[allow(unreachable_pub, clippy::unwrap_used)]
#[path = "../tests/support/messages_api.rs"]
mod messages_api;
#[allow(unreachable_pub, clippy::unwrap_used)]
#[path = "../tests/support/responses_api.rs"]
mod responses_api;

#[path = "common/inventory.rs"]
mod inventory;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::agent::{Agent, CodexCli};
use ralph::{ClaudeCli, Ralph};
use serde_json::{Value, json};

use messages_api::{ClaudeHome, MessagesApi};
use responses_api::ResponsesApi;

/// Tasks on the board: enough for a mean, few enough that the four runs take about 20 s.
const TASKS: usize = 6;
/// Sections of the spec: it is one of 8 KiB, as in `prompt_cache`, whatever the tasks.
const SECTIONS: usize = 20;
/// How many elements before a breakpoint Anthropic's cache looks back for an entry.
const LOOKBACK: usize = 20;
/// The roles reported: the ones called once per task.
const ROLES: [&str; 2] = ["build", "verify"];

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let claude = find("RALPH_CLAUDE_BIN", "claude");
    let codex = find("TEST_CODEX_BIN", "codex");
    println!(
        "spec: {} bytes, {TASKS} tasks, each built once and accepted, then one gap analysis\n",
        inventory::spec(SECTIONS).len()
    );
    let mut rows = Vec::new();
    for concurrency in [1, 2] {
        match &claude {
            Some(bin) => {
                let requests = rt.block_on(claude_run(bin, concurrency));
                dump("claude", concurrency, &requests);
                rows.extend(report("Claude", concurrency, &requests, claude_reused));
                if concurrency == 1 {
                    describe_breakpoints(&requests);
                }
            }
            None if concurrency == 1 => println!(
                "skipped Claude: no CLI (set RALPH_CLAUDE_BIN, e.g. to \
                 ~/.cache/ralph-claude/2.1.328/node_modules/.bin/claude, or put `claude` on PATH)"
            ),
            None => {}
        }
        match &codex {
            Some(bin) => {
                let requests = rt.block_on(codex_run(bin, concurrency));
                dump("codex", concurrency, &requests);
                rows.extend(report("Codex", concurrency, &requests, codex_reused));
                if concurrency == 1 {
                    describe_codex(&requests);
                }
            }
            None if concurrency == 1 => println!(
                "skipped Codex: no CLI (set TEST_CODEX_BIN, e.g. to \
                 ~/.cache/ralph-codex/0.169.0/node_modules/.bin/codex, or put `codex` on PATH)"
            ),
            None => {}
        }
    }
    if rows.is_empty() {
        return;
    }
    println!(
        "\n| CLI | build_concurrency | role | requests | mean request bytes | reusable share, mean (least) |"
    );
    println!("|---|---:|---|---:|---:|---:|");
    for row in rows {
        println!("{row}");
    }
}

/// `$var`, else `name` on `PATH`.
fn find(var: &str, name: &str) -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os(var).filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A request's role, from the heading of ralph's template it carries.
fn role_of(body: &Value) -> &'static str {
    let text = body.to_string();
    if text.contains("# Build One Task of a Spec") {
        "build"
    } else if text.contains("# Verify One Task") {
        "verify"
    } else if text.contains("# Gap Analysis") {
        "gap_analysis"
    } else {
        "other"
    }
}

/// The table rows of one run: per role, its requests, their mean size, and the share
/// `reused` finds of each after the first.
fn report(
    cli: &str,
    concurrency: usize,
    requests: &[Value],
    reused: fn(&[&Value], &Value) -> (usize, usize),
) -> Vec<String> {
    let mut by_role: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for body in requests {
        by_role.entry(role_of(body)).or_default().push(body);
    }
    let mut rows = Vec::new();
    for role in ROLES {
        let bodies = by_role.get(role).map(Vec::as_slice).unwrap_or_default();
        assert!(
            bodies.len() == TASKS,
            "{cli}: {} {role} requests, not {TASKS}",
            bodies.len()
        );
        let sizes: Vec<usize> = bodies.iter().map(|b| reused(&[], b).1).collect();
        let shares: Vec<f64> = (1..bodies.len())
            .map(|i| {
                let (hit, all) = reused(&bodies[..i], bodies[i]);
                hit as f64 / all as f64
            })
            .collect();
        let least = shares.iter().copied().fold(f64::INFINITY, f64::min);
        rows.push(format!(
            "| {cli} | {concurrency} | {role} | {} | {:.0} | {:.0} % ({:.0} %) |",
            bodies.len(),
            sizes.iter().sum::<usize>() as f64 / sizes.len() as f64,
            100.0 * shares.iter().sum::<f64>() / shares.len() as f64,
            100.0 * least,
        ));
    }
    rows
}

/// With `PROMPT_CACHE_CLI_DUMP=dir`, every body as `dir/<cli>-<concurrency>-<n>-<role>.json`.
fn dump(cli: &str, concurrency: usize, requests: &[Value]) {
    let Some(dir) = std::env::var_os("PROMPT_CACHE_CLI_DUMP") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("the dump folder");
    for (n, body) in requests.iter().enumerate() {
        let name = format!("{cli}-{concurrency}-{n:02}-{}.json", role_of(body));
        let text = serde_json::to_string_pretty(body).expect("JSON");
        std::fs::write(dir.join(name), text).expect("a dumped body");
    }
}

// Claude.

/// The request as Anthropic's cache reads it: tools, system, then messages' content
/// blocks, each as compact JSON without `cache_control`, and whether a breakpoint follows.
fn claude_elements(body: &Value) -> Vec<(String, bool)> {
    let mut elements = Vec::new();
    let mut push = |value: &Value, label: Value| {
        let mut value = value.clone();
        let breakpoint = value
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        // The label keeps a message's role in its blocks: a user's text and an
        // assistant's same text are not the same prefix.
        elements.push((json!([label, value]).to_string(), breakpoint));
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push(tool, json!("tool"));
    }
    match &body["system"] {
        Value::Array(blocks) => blocks.iter().for_each(|b| push(b, json!("system"))),
        Value::Null => {}
        text => push(text, json!("system")),
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].clone();
        match &message["content"] {
            Value::Array(blocks) => blocks.iter().for_each(|b| push(b, role.clone())),
            text => push(text, role),
        }
    }
    elements
}

/// The prefixes a request writes to the cache: its bytes up to each breakpoint.
fn claude_written(body: &Value) -> Vec<String> {
    let mut prefix = String::new();
    let mut written = Vec::new();
    for (element, breakpoint) in claude_elements(body) {
        prefix.push_str(&element);
        if breakpoint {
            written.push(prefix.clone());
        }
    }
    written
}

/// `(bytes read from the cache, bytes of the request)`: the longest prefix of `body`
/// ending at an element boundary within [`LOOKBACK`] elements before one of its
/// breakpoints that an earlier request wrote.
fn claude_reused(earlier: &[&Value], body: &Value) -> (usize, usize) {
    let written: HashSet<String> = earlier.iter().flat_map(|b| claude_written(b)).collect();
    let elements = claude_elements(body);
    let breakpoints: Vec<usize> = (0..elements.len()).filter(|&i| elements[i].1).collect();
    let mut prefix = String::new();
    let mut best = 0;
    for (i, (element, _)) in elements.iter().enumerate() {
        prefix.push_str(element);
        let near_a_breakpoint = breakpoints.iter().any(|&b| b >= i && b - i <= LOOKBACK);
        if near_a_breakpoint && written.contains(&prefix) {
            best = prefix.len();
        }
    }
    (best, prefix.len())
}

/// Where the CLI sets its breakpoints, on the first BUILD request, and what comes first.
fn describe_breakpoints(requests: &[Value]) {
    let Some(body) = requests.iter().find(|b| role_of(b) == "build") else {
        return;
    };
    let elements = claude_elements(body);
    let mut at = 0;
    let mut marks = Vec::new();
    for (element, breakpoint) in &elements {
        at += element.len();
        if *breakpoint {
            let label: Value = serde_json::from_str(element).expect("JSON");
            let kind = label[0].as_str().unwrap_or("-").to_owned();
            marks.push(format!("after a {kind} element at byte {at}"));
        }
    }
    println!(
        "Claude, first BUILD request: {at} bytes in {} elements ({} tools); breakpoints: {}",
        elements.len(),
        body["tools"].as_array().map_or(0, Vec::len),
        marks.join(", ")
    );
}

/// One construct run by the real Claude CLI; the bodies it sent, in order.
async fn claude_run(bin: &Path, concurrency: usize) -> Vec<Value> {
    let accept = || {
        messages_api::Reply::tool_use(
            "StructuredOutput",
            json!({"verdict": "accept", "reason": "it is there"}),
        )
    };
    let mut replies: Vec<messages_api::Reply> = (0..TASKS)
        .map(|_| messages_api::Reply::text("Done.\n<TASK_DONE>"))
        .collect();
    replies.extend((0..TASKS).map(|_| accept()));
    replies.push(messages_api::Reply::tool_use(
        "StructuredOutput",
        json!({"tasks": [], "issues": []}),
    ));
    let api = MessagesApi::with_script(replies).await;
    let home = ClaudeHome::new();
    // No retries: a scripted API that errs is a broken bench, not a load to ride out.
    let mut claude = ClaudeCli::new()
        .bin(bin)
        .max_retries(0)
        .idle_timeout(Duration::from_secs(60));
    for (key, value) in api.env().into_iter().chain(home.env()) {
        claude = claude.env(key, value);
    }
    construct(claude, concurrency).await;
    api.requests().await
}

// Codex.

/// A request's `input` items, each as compact JSON without its `id`: the CLI gives every
/// message a new id in each session, and an id names the item for the API, it is not text
/// of the prompt; left in, it would end every shared prefix at the first item.
fn codex_items(body: &Value) -> Vec<(String, String)> {
    let items = body["input"].as_array().into_iter().flatten();
    items
        .map(|item| {
            let mut item = item.clone();
            if let Some(item) = item.as_object_mut() {
                item.remove("id");
            }
            let role = item["role"].as_str().unwrap_or("-").to_owned();
            (role, item.to_string())
        })
        .collect()
}

/// `instructions` (when sent), then [`codex_items`], concatenated.
fn codex_text(body: &Value) -> String {
    let mut text = match &body["instructions"] {
        Value::Null => String::new(),
        instructions => instructions.to_string(),
    };
    for (_, item) in codex_items(body) {
        text.push_str(&item);
    }
    text
}

/// `(bytes of the longest common prefix with an earlier request, bytes of the request)`.
fn codex_reused(earlier: &[&Value], body: &Value) -> (usize, usize) {
    let text = codex_text(body);
    let best = earlier
        .iter()
        .map(|e| {
            let other = codex_text(e);
            text.bytes()
                .zip(other.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (best, text.len())
}

/// Whether each role's requests carry the same tools and output schema, and how many
/// `prompt_cache_key`s they use: what the prefix figure does not count. Then what the
/// first BUILD request is made of.
fn describe_codex(requests: &[Value]) {
    for role in ROLES {
        let bodies: Vec<&Value> = requests.iter().filter(|b| role_of(b) == role).collect();
        let same = |field: &str| bodies.windows(2).all(|w| w[0][field] == w[1][field]);
        let keys: HashSet<String> = bodies
            .iter()
            .map(|b| b["prompt_cache_key"].to_string())
            .collect();
        println!(
            "Codex {role}: tools the same across requests: {}, output schema the same: {}, \
             {} distinct prompt_cache_key over {} requests",
            same("tools"),
            same("text"),
            keys.len(),
            bodies.len(),
        );
    }
    let Some(body) = requests.iter().find(|b| role_of(b) == "build") else {
        return;
    };
    let items: Vec<String> = codex_items(body)
        .iter()
        .map(|(role, item)| format!("{role} {}", item.len()))
        .collect();
    println!(
        "Codex, first BUILD request: {} bytes; instructions {}; input items (role, bytes): {}",
        codex_text(body).len(),
        match &body["instructions"] {
            Value::Null => "not sent".to_owned(),
            text => format!("{} bytes", text.to_string().len()),
        },
        items.join(", ")
    );
}

/// One construct run by the real Codex CLI; the bodies it sent, in order.
async fn codex_run(bin: &Path, concurrency: usize) -> Vec<Value> {
    use responses_api::Reply;
    let mut replies: Vec<Reply> = (0..TASKS)
        .map(|_| Reply::text("Done.\n<TASK_DONE>"))
        .collect();
    // Strict structured outputs answer every property: null for what they leave out.
    replies.extend((0..TASKS).map(|_| {
        Reply::text(r#"{"task_id":null,"verdict":"accept","reason":"it is there","gaps":null}"#)
    }));
    replies.push(Reply::text(r#"{"tasks":[],"issues":[]}"#));
    let api = ResponsesApi::with_script(replies).await;
    let home = tempfile::tempdir().expect("a home for the CLI");
    let codex = api
        .args()
        .into_iter()
        .fold(CodexCli::new().bin(bin).model("gpt-5-codex"), CodexCli::arg);
    let codex = api
        .env(home.path())
        .into_iter()
        .fold(codex, |c, (k, v)| c.env(k, v));
    construct(codex, concurrency).await;
    // Only the model turns: the CLI may ask the server for other things.
    api.requests()
        .await
        .into_iter()
        .filter(|b| b.get("input").is_some())
        .collect()
}

// The run.

/// A construct run of `agent` on a fresh git workspace whose board holds [`TASKS`] tasks
/// (seeded, so no planning call); panics unless every task is accepted.
async fn construct(agent: impl Agent + 'static, concurrency: usize) {
    let dir = tempfile::tempdir().expect("a temp workspace");
    let ws = dir.path();
    std::fs::write(ws.join("spec.md"), inventory::spec(SECTIONS)).expect("the spec");
    std::fs::write(ws.join(".gitignore"), ".ralph/\n").expect("ignore");
    inventory::commit_all(ws);
    let store = inventory::board(TASKS).await;
    let outcome = Ralph::builder()
        .workspace(ws)
        .agent(agent)
        .store(store)
        .build_concurrency(concurrency)
        .build()
        .expect("ralph builds")
        .construct("spec.md")
        .await
        .expect("the run");
    assert!(
        matches!(outcome, ralph::Outcome::Complete { accepted, .. } if accepted == TASKS),
        "{outcome:?}"
    );
}
