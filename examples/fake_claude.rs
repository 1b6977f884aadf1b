//! `fake_claude`: a deterministic stand-in for the `claude` CLI, for tests and benches.
//!
//! ralph runs `claude -p --output-format stream-json --verbose [flags…]` with the prompt on
//! stdin and reads stream-json lines from stdout (`/work/shared/claude-cli/PROTOCOL.md` §2, §3
//! and §9). This binary behaves the same way from the outside, without a model or a network,
//! so timeouts, process cleanup and bounded memory can be tested. Build it with
//! `cargo build --example fake_claude`; it lands in `target/<profile>/examples/fake_claude`.
//!
//! # What it always does
//!
//! 1. Any argv is accepted and ignored, except that `--output-format stream-json` (or
//!    `--output-format=stream-json`) without `--verbose` fails like the real CLI: stderr
//!    `Error: When using --print, --output-format=stream-json requires --verbose`, exit 1,
//!    empty stdout. It fails before reading stdin (a usage error consumes no prompt). Without
//!    `--output-format` in argv nothing is checked.
//! 2. Then it reads all of stdin to EOF (the prompt) before doing anything else.
//! 3. SIGTERM, at any time, makes it exit with status 143 at once without a result line (a
//!    normal exit with that status, as the real CLI does; not death by signal). SIGTERM is
//!    blocked in every thread and taken by a thread in `sigwait`, so no unsafe signal handler
//!    is needed; child processes start with an empty signal mask (std resets it).
//! 4. Without a transcript it prints a minimal successful run, three lines: `system/init`, one
//!    `assistant` text block, and a `result` line (`subtype:"success"`, `is_error:false`,
//!    `terminal_reason:"completed"`, `num_turns:1`, `total_cost_usd:0.001`, the elapsed
//!    `duration_ms`, a `usage` block and `modelUsage` with `contextWindow:1000000`).
//!    `input_tokens` is the prompt's byte length / 4 (rounded up), `output_tokens` the answer's.
//!    Exit status 0. Keys come out sorted (so `type` is not first); the real CLI's key order
//!    varies between line kinds too, and ralph parses by name.
//!
//! # Knobs (environment variables, all optional)
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_CLAUDE_ANSWER=text` | The answer text of the default run, in the assistant line and in `result`. Default `Done.\n<TASK_DONE>`. |
//! | `FAKE_CLAUDE_SESSION=id` | The `session_id` of every default line. Default `fake-session`. |
//! | `FAKE_CLAUDE_TRANSCRIPT=path` | Replay this JSONL file to stdout instead of the default run: each line byte for byte, in order, flushed one by one. The file is streamed, not loaded whole. |
//! | `FAKE_CLAUDE_TRANSCRIPTS=a,b,…` | With `FAKE_CLAUDE_COUNTER`: a different transcript per invocation, for runs that resume the session (compaction). Invocation k (counted from 0) replays the k-th path of the comma-separated list, like `FAKE_CLAUDE_TRANSCRIPT`; once the list is used up, the last one again. Not with `FAKE_CLAUDE_TRANSCRIPT`. |
//! | `FAKE_CLAUDE_COUNTER=path` | The invocation counter of `FAKE_CLAUDE_TRANSCRIPTS`: a file holding the number of invocations so far (missing or empty = 0), read and rewritten after stdin is read. Not locked: for invocations one after the other, not concurrent ones. Required by `FAKE_CLAUDE_TRANSCRIPTS`. |
//! | `FAKE_CLAUDE_HUGE=size` | Default run whose answer is `size` bytes of filler (`x`) followed by `"\n<TASK_DONE>"`, printed twice like the real CLI (assistant line and result line). Streamed in 64 KiB chunks, never held in memory. `size` is bytes, or a number with a binary suffix `K`, `M`, `G` (or `KiB`, `MiB`, `GiB`): `200M` = 200 × 2²⁰. Ignored with a transcript. |
//! | `FAKE_CLAUDE_DELAY_MS=n` | Sleep n ms before each stdout line. |
//! | `FAKE_CLAUDE_HANG_AFTER=k` | After k lines (0 = before the first), stop printing and sleep forever with stdout open. |
//! | `FAKE_CLAUDE_EXIT_AFTER=k` | After k lines, exit at once with `FAKE_CLAUDE_EXIT_CODE` (default 1): no result line when k is below the line count. |
//! | `FAKE_CLAUDE_EXIT_CODE=n` | Exit status (0–255) of a run that prints all its lines (default 0), and of `EXIT_AFTER` (default 1). |
//! | `FAKE_CLAUDE_LINGER_MS=n` | After the last line, keep running n ms before exiting; `forever` never exits. |
//! | `FAKE_CLAUDE_IGNORE_TERM=1` | Ignore SIGTERM: only SIGKILL ends the process. Any value but empty or `0` counts. |
//! | `FAKE_CLAUDE_SPAWN=cmd` | Before the first line, start `sh -c cmd` in a new session, like the CLI's Bash tool, and do not wait for it. See below. |
//! | `FAKE_CLAUDE_SPAWN_PIDFILE=path` | Write that shell's pid (a line) to this file before the first stdout line. |
//! | `FAKE_CLAUDE_STDERR=text` | Write text to stderr, as is, before the first stdout line. |
//! | `FAKE_CLAUDE_RECORD=path` | Append one JSON line describing the invocation: `{"args":[…],"stdin":"…","cwd":"…","env":{…}}`, where `env` holds `IS_SANDBOX`, `CLAUDE_CODE_MAX_RETRIES`, `RALPH_RUN_COOKIE` and every `FAKE_CLAUDE_*` and `ANTHROPIC_*` variable that is set. One `write` to an `O_APPEND` file, so concurrent runs do not interleave. |
//!
//! `HANG_AFTER` and `EXIT_AFTER` with k at or above the number of lines act after the last
//! line; `HANG_AFTER` wins when both match. A knob with an unreadable value is an error of the
//! fake itself: a message on stderr and exit 2.
//!
//! # `FAKE_CLAUDE_SPAWN`
//!
//! The real CLI runs each Bash tool command in a shell of its own session (setsid), which
//! killing claude's process group does not reach. The fake reproduces that with the `setsid`
//! utility (util-linux), because calling `setsid(2)` between fork and exec needs `pre_exec`,
//! which is `unsafe`, and the crate forbids unsafe code:
//! `setsid sh -c 'exec 3>&1 >/dev/null; echo $$ >&3; exec 3>&-; exec sh -c "$1"' sh cmd`.
//! The inner shell moves the pipe it got as stdout to fd 3, reports its pid there and closes
//! it; the fake reads the pipe to EOF before going on, so by the time the pidfile is written
//! and the first line printed, the new session exists and the shell holds nothing of the fake
//! but its environment. It then execs `sh -c cmd` (same pid) with stdin, stdout and stderr on
//! `/dev/null`. That pid leads its own session and process group; `sh` may run `cmd` as a
//! child in that group (dash forks for `sleep 300`), so clean up with `kill -KILL -<pid>`. `cmd` may also be `nohup sleep 301 &`:
//! the shell exits at once and the job is left behind. The fake never kills what it spawned,
//! not even on SIGTERM (the real CLI kills a running tool then, but leaks background jobs and
//! everything on SIGKILL): that is ralph's job, and what this knob tests. A missing `setsid`
//! is an error (exit 2).

#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};
use std::{env, process, thread};

use nix::sys::signal::{SigSet, Signal};
use serde_json::{Value, json};

const DEFAULT_ANSWER: &str = "Done.\n<TASK_DONE>";
const DEFAULT_SESSION: &str = "fake-session";
const MODEL: &str = "claude-opus-5-5";
/// The end of a `FAKE_CLAUDE_HUGE` answer, and its JSON-escaped form.
const HUGE_SUFFIX: &str = "\n<TASK_DONE>";
const HUGE_SUFFIX_JSON: &[u8] = br"\n<TASK_DONE>";
/// Stands for the huge answer in a line's JSON until the line is written.
const HUGE_PLACEHOLDER: &str = "@@FAKE_CLAUDE_HUGE_TEXT@@";
/// One chunk of the huge answer's filler.
static FILLER: [u8; 64 * 1024] = [b'x'; 64 * 1024];

fn main() -> ExitCode {
    let result = setup_sigterm().map_err(|e| format!("cannot set up SIGTERM handling: {e}"));
    match result.and_then(|()| run()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("fake_claude: {message}");
            ExitCode::from(2)
        }
    }
}

/// Blocks SIGTERM in this thread (and so in every thread spawned later) and takes it in a
/// dedicated thread: exit 143 at once, or nothing with `FAKE_CLAUDE_IGNORE_TERM`.
fn setup_sigterm() -> nix::Result<()> {
    let ignore = env::var_os("FAKE_CLAUDE_IGNORE_TERM").is_some_and(|v| !v.is_empty() && v != "0");
    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    term.thread_block()?;
    thread::spawn(move || {
        while term.wait().is_ok() {
            if !ignore {
                process::exit(143);
            }
        }
    });
    Ok(())
}

fn run() -> Result<ExitCode, String> {
    let start = Instant::now();
    let args: Vec<String> = env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if stream_json_without_verbose(&args) {
        eprintln!("Error: When using --print, --output-format=stream-json requires --verbose");
        return Ok(ExitCode::from(1));
    }

    // Every knob is read before the first side effect, so a bad one leaves nothing behind.
    let exit_code: Option<u8> = knob("FAKE_CLAUDE_EXIT_CODE")?;
    let delay = Duration::from_millis(knob("FAKE_CLAUDE_DELAY_MS")?.unwrap_or(0));
    let hang_after = knob("FAKE_CLAUDE_HANG_AFTER")?;
    let exit_after = knob("FAKE_CLAUDE_EXIT_AFTER")?;
    let huge = huge_size()?;
    let linger = match env::var("FAKE_CLAUDE_LINGER_MS").as_deref() {
        Ok("forever") => None,
        _ => Some(Duration::from_millis(
            knob("FAKE_CLAUDE_LINGER_MS")?.unwrap_or(0),
        )),
    };
    let transcript = Transcript::from_env()?;

    let mut prompt = Vec::new();
    io::stdin()
        .read_to_end(&mut prompt)
        .map_err(|e| format!("reading stdin: {e}"))?;

    if let Some(path) = env::var_os("FAKE_CLAUDE_RECORD") {
        record(&path, &args, &prompt).map_err(|e| format!("FAKE_CLAUDE_RECORD: {e}"))?;
    }
    let transcript = transcript
        .pick()
        .map_err(|e| format!("FAKE_CLAUDE_COUNTER: {e}"))?;
    if let Some(text) = env::var_os("FAKE_CLAUDE_STDERR") {
        let mut stderr = io::stderr();
        // Best effort, like any diagnostic: a closed stderr must not change the run.
        let _ = stderr.write_all(text.as_encoded_bytes());
        let _ = stderr.flush();
    }
    if let Ok(cmd) = env::var("FAKE_CLAUDE_SPAWN") {
        let pid = spawn_in_new_session(&cmd).map_err(|e| format!("FAKE_CLAUDE_SPAWN: {e}"))?;
        if let Some(path) = env::var_os("FAKE_CLAUDE_SPAWN_PIDFILE") {
            std::fs::write(&path, format!("{pid}\n"))
                .map_err(|e| format!("FAKE_CLAUDE_SPAWN_PIDFILE: {e}"))?;
        }
    }

    let mut out = Lines {
        stdout: io::stdout().lock(),
        printed: 0,
        delay,
        hang_after,
        exit_after,
        exit_after_code: exit_code.unwrap_or(1),
    };
    out.checkpoint();
    let printed = match transcript {
        Some(path) => replay(&mut out, &path),
        None => default_run(&mut out, &prompt, huge, start),
    };
    printed.map_err(|e| format!("writing stdout: {e}"))?;
    out.finish();

    match linger {
        Some(linger) => thread::sleep(linger),
        None => sleep_forever(),
    }
    Ok(ExitCode::from(exit_code.unwrap_or(0)))
}

/// What to print instead of the default run: `FAKE_CLAUDE_TRANSCRIPT`, or this invocation's
/// entry of `FAKE_CLAUDE_TRANSCRIPTS`.
enum Transcript {
    Default,
    One(OsString),
    PerInvocation {
        paths: Vec<OsString>,
        counter: OsString,
    },
}

impl Transcript {
    /// Reads and checks the knobs, without touching the counter.
    fn from_env() -> Result<Self, String> {
        let one = env::var_os("FAKE_CLAUDE_TRANSCRIPT");
        let list = env::var_os("FAKE_CLAUDE_TRANSCRIPTS");
        let counter = env::var_os("FAKE_CLAUDE_COUNTER");
        match (one, list, counter) {
            (Some(_), Some(_), _) => {
                Err("set FAKE_CLAUDE_TRANSCRIPT or FAKE_CLAUDE_TRANSCRIPTS, not both".into())
            }
            (Some(path), None, _) => Ok(Transcript::One(path)),
            (None, Some(_), None) => {
                Err("FAKE_CLAUDE_TRANSCRIPTS needs FAKE_CLAUDE_COUNTER".into())
            }
            (None, Some(list), Some(counter)) => {
                let list = list
                    .into_string()
                    .map_err(|v| format!("FAKE_CLAUDE_TRANSCRIPTS: not UTF-8: {v:?}"))?;
                let paths: Vec<OsString> = list
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(OsString::from)
                    .collect();
                if paths.is_empty() {
                    return Err("FAKE_CLAUDE_TRANSCRIPTS: no path".into());
                }
                Ok(Transcript::PerInvocation { paths, counter })
            }
            (None, None, _) => Ok(Transcript::Default),
        }
    }

    /// The transcript of this invocation; counts the invocation.
    fn pick(self) -> io::Result<Option<OsString>> {
        match self {
            Transcript::Default => Ok(None),
            Transcript::One(path) => Ok(Some(path)),
            Transcript::PerInvocation { mut paths, counter } => {
                let text = match std::fs::read_to_string(&counter) {
                    Ok(text) => text,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
                    Err(e) => return Err(e),
                };
                let seen: usize = match text.trim() {
                    "" => 0,
                    n => n.parse().map_err(|_| {
                        io::Error::other(format!("not a count of invocations: {text:?}"))
                    })?,
                };
                std::fs::write(&counter, format!("{}\n", seen + 1))?;
                let last = paths.len() - 1;
                Ok(Some(paths.swap_remove(seen.min(last))))
            }
        }
    }
}

/// `--output-format stream-json` is in argv and `--verbose` is not.
fn stream_json_without_verbose(args: &[String]) -> bool {
    let stream_json = args.iter().enumerate().any(|(i, arg)| {
        arg == "--output-format=stream-json"
            || (arg == "--output-format" && args.get(i + 1).is_some_and(|v| v == "stream-json"))
    });
    stream_json && !args.iter().any(|arg| arg == "--verbose")
}

/// An optional numeric environment variable; a value that does not parse is an error.
fn knob<T: FromStr>(name: &str) -> Result<Option<T>, String> {
    match env::var(name) {
        Err(env::VarError::NotPresent) => Ok(None),
        Ok(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}: not a valid number: {value:?}")),
        Err(env::VarError::NotUnicode(value)) => Err(format!("{name}: not UTF-8: {value:?}")),
    }
}

/// `FAKE_CLAUDE_HUGE`: bytes, or a number with a binary suffix (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`).
fn huge_size() -> Result<Option<u64>, String> {
    let Ok(value) = env::var("FAKE_CLAUDE_HUGE") else {
        return Ok(None);
    };
    let text = value.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits);
    let unit: u64 = match suffix.trim() {
        "" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => return Err(format!("FAKE_CLAUDE_HUGE: unknown size {value:?}")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .map(Some)
        .ok_or_else(|| format!("FAKE_CLAUDE_HUGE: not a valid size: {value:?}"))
}

fn record(path: &OsString, args: &[String], prompt: &[u8]) -> io::Result<()> {
    let env: BTreeMap<String, String> = env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "IS_SANDBOX" | "CLAUDE_CODE_MAX_RETRIES" | "RALPH_RUN_COOKIE"
            ) || k.starts_with("FAKE_CLAUDE_")
                || k.starts_with("ANTHROPIC_")
        })
        .collect();
    let entry = json!({
        "args": args,
        "stdin": String::from_utf8_lossy(prompt),
        "cwd": env::current_dir()?.to_string_lossy(),
        "env": env,
    });
    let mut line = serde_json::to_vec(&entry)?;
    line.push(b'\n');
    // O_APPEND and a single write: lines of concurrent runs do not interleave.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(&line)
}

/// Starts `sh -c cmd` in a new session and returns its pid (see the module docs). Never waited
/// for, like a tool's background job: once the shell ends, it is a zombie until the fake exits.
fn spawn_in_new_session(cmd: &str) -> io::Result<u32> {
    let mut child = Command::new("setsid")
        .args([
            "sh",
            "-c",
            r#"exec 3>&1 >/dev/null; echo $$ >&3; exec 3>&-; exec sh -c "$1""#,
            "sh",
            cmd,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run setsid (util-linux): {e}")))?;
    let mut reported = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        pipe.read_to_string(&mut reported)?; // to EOF: the shell has let go of the pipe
    }
    let pid = reported.trim().parse();
    pid.map_err(|_| io::Error::other(format!("the new session's shell said {reported:?}")))
}

/// Stdout, one line at a time, with the delay, hang and exit knobs applied.
struct Lines {
    stdout: io::StdoutLock<'static>,
    printed: u64,
    delay: Duration,
    hang_after: Option<u64>,
    exit_after: Option<u64>,
    exit_after_code: u8,
}

impl Lines {
    /// Writes one line (`write` writes it whole, newline included) and flushes it.
    fn line(&mut self, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
        thread::sleep(self.delay);
        write(&mut self.stdout)?;
        self.stdout.flush()?;
        self.printed += 1;
        self.checkpoint();
        Ok(())
    }

    /// Hangs or exits when the number of lines printed so far says so.
    fn checkpoint(&self) {
        if self.hang_after == Some(self.printed) {
            sleep_forever();
        }
        if self.exit_after == Some(self.printed) {
            process::exit(i32::from(self.exit_after_code));
        }
    }

    /// After the last line: a K beyond the line count acts now.
    fn finish(&self) {
        if self.hang_after.is_some_and(|k| k > self.printed) {
            sleep_forever();
        }
        if self.exit_after.is_some_and(|k| k > self.printed) {
            process::exit(i32::from(self.exit_after_code));
        }
    }
}

fn sleep_forever() -> ! {
    loop {
        thread::park();
    }
}

/// Copies the transcript's lines to stdout byte for byte.
fn replay(out: &mut Lines, path: &OsString) -> io::Result<()> {
    let mut file = BufReader::new(File::open(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("FAKE_CLAUDE_TRANSCRIPT {}: {e}", path.display()),
        )
    })?);
    let mut line = Vec::new();
    loop {
        line.clear();
        if file.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        out.line(|w| w.write_all(&line))?;
    }
}

/// init, one assistant text block, result.
fn default_run(
    out: &mut Lines,
    prompt: &[u8],
    huge: Option<u64>,
    start: Instant,
) -> io::Result<()> {
    let session = env::var("FAKE_CLAUDE_SESSION").unwrap_or_else(|_| DEFAULT_SESSION.into());
    let answer = match huge {
        Some(_) => HUGE_PLACEHOLDER.to_owned(),
        None => env::var("FAKE_CLAUDE_ANSWER").unwrap_or_else(|_| DEFAULT_ANSWER.into()),
    };
    let answer_len = huge.map_or(answer.len() as u64, |n| n + HUGE_SUFFIX.len() as u64);
    let input_tokens = (prompt.len() as u64).div_ceil(4);
    let output_tokens = answer_len.div_ceil(4);
    let cwd = env::current_dir()?;

    let init = json!({
        "type": "system", "subtype": "init", "cwd": cwd.to_string_lossy(),
        "session_id": session, "tools": ["Bash", "Edit", "Read"], "mcp_servers": [],
        "model": MODEL, "permissionMode": "bypassPermissions",
        "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "fake",
        "uuid": "fake-uuid-1",
    });
    out.line(|w| write_json_line(w, &init, None))?;

    let assistant = json!({
        "type": "assistant",
        "message": {
            "id": "msg_fake_1", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": answer}],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        },
        "parent_tool_use_id": null, "session_id": session, "uuid": "fake-uuid-2",
    });
    out.line(|w| write_json_line(w, &assistant, huge))?;

    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let result = json!({
        "type": "result", "subtype": "success", "is_error": false,
        "duration_ms": duration_ms, "duration_api_ms": duration_ms, "num_turns": 1,
        "result": answer, "stop_reason": "end_turn", "session_id": session,
        "total_cost_usd": 0.001,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": output_tokens},
        "modelUsage": {MODEL: {"inputTokens": input_tokens, "outputTokens": output_tokens,
                               "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
                               "costUSD": 0.001, "contextWindow": 1_000_000,
                               "maxOutputTokens": 128_000}},
        "permission_denials": [], "terminal_reason": "completed", "api_error_status": null,
        "uuid": "fake-uuid-3",
    });
    out.line(|w| write_json_line(w, &result, huge))
}

/// Writes `value` as one line. With `huge`, the placeholder string in it becomes that many
/// bytes of filler plus the `<TASK_DONE>` suffix, streamed in chunks.
fn write_json_line(w: &mut dyn Write, value: &Value, huge: Option<u64>) -> io::Result<()> {
    let text = serde_json::to_string(value)?;
    let placeholder = format!("\"{HUGE_PLACEHOLDER}\"");
    match huge.and_then(|n| Some((n, text.split_once(&placeholder)?))) {
        None => w.write_all(text.as_bytes())?,
        Some((mut left, (before, after))) => {
            w.write_all(before.as_bytes())?;
            w.write_all(b"\"")?;
            while left > 0 {
                let n = FILLER
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                w.write_all(&FILLER[..n])?;
                left -= n as u64;
            }
            w.write_all(HUGE_SUFFIX_JSON)?;
            w.write_all(b"\"")?;
            w.write_all(after.as_bytes())?;
        }
    }
    w.write_all(b"\n")
}
