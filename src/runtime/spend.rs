//! What the agents spent, kept so that nothing is lost and a limit holds across resumes.
//!
//! `.ralph/spend.jsonl` is the one record of spend: the budget, the board's figures
//! ([`RunState`](crate::model::RunState)'s `tokens_in`, `tokens_out`, `cost_usd`), the run's
//! summary, [`Ralph::spent`](crate::Ralph::spent) and `ralph status` are all read from it.
//!
//! Every agent run of every mode ends in one line appended to the ledger and synced before
//! the run's result is acted on: its scope, role, subject and agent, its tokens and its
//! cost, also for a run that was stopped, killed, interrupted or rate limited (whatever it
//! reported by then). While a run goes on, each usage report its agent makes (Claude's
//! per-message usage, a Codex turn, the FakeAgent's `spend` step: an
//! [`AgentEvent::Spend`](crate::agent::AgentEvent::Spend)) is appended at once as a
//! *provisional* line with the run's spend so far, synced too. So a stop, a crash or a
//! SIGKILL of ralph loses nothing the agent had reported.
//!
//! A *scope* is the state a run belongs to: `construct` (the board), `build` (build mode's
//! run over `implementation.json`), `plan`, or `thread/<id>`. A scope's spend is the sum of
//! its lines since its last `reset` line, written when its state starts afresh (a new
//! board, a new plan, a new thread), where each agent run counts once: by its final line,
//! or, for a run cut short (ralph killed while it ran), by its last provisional line. Such a
//! total is an *estimate* (the run may have spent more than it reported): [`Spent`]'s
//! `estimated_runs` counts those runs, and the summary, the dry run and `ralph status` say
//! "estimate". Run-wide limits ([`Budget`]) are checked against the total.
//!
//! # Format
//!
//! One JSON object per line:
//!
//! ```text
//! {"at":"2026-…","scope":"construct","run":"4711-18c…-3","estimate":true,"role":"build","subject":"t-1","agent":"claude","input_tokens":800,"output_tokens":100,"cache_read_tokens":5000}
//! {"at":"2026-…","scope":"construct","run":"4711-18c…-3","role":"build","subject":"t-1","agent":"claude","input_tokens":1200,"output_tokens":300,"cache_read_tokens":9000,"cost_usd":0.4}
//! {"at":"2026-…","scope":"build","reset":true}
//! {"at":"2026-…","scope":"construct","restored":true,"runs":3,"input_tokens":3000,"output_tokens":600,"cost_usd":1.2}
//! ```
//!
//! | field | meaning |
//! |---|---|
//! | `at` | when the line was written (RFC 3339, UTC) |
//! | `scope` | the state the run belongs to (see above) |
//! | `reset` | `true`: the scope starts afresh; its earlier lines no longer count (no other field but `at`) |
//! | `run` | the agent run's id (`<pid>-<hex start>-<n>`): its provisional lines and its final line share it |
//! | `estimate` | `true` on a provisional line: the run's spend so far, as its agent had reported it; the run's next line replaces it, and it counts only when the run has no final line |
//! | `restored` | `true` on a line ralph wrote after finding the ledger edited: the spend the edit took away (see [Edits](#edits)); or, after a `reset`, the spend of an archived board switched back to (`ralph construct SPEC --switch`); it carries no role, subject or agent |
//! | `runs`, `unpriced_runs`, `priced_runs`, `estimated_runs` | on a `restored` line: how many runs, runs without a cost, runs priced by `[prices]`, and estimated runs it stands for |
//! | `role`, `subject`, `agent` | what the run was for (`build`, `verify`, …), its task, issue, spec or thread, and the agent that ran it |
//! | `input_tokens`, `output_tokens` | tokens, counted against `max_tokens`; absent when 0 |
//! | `cache_read_tokens`, `cache_creation_tokens` | cache reads and writes, shown apart and not counted against `max_tokens`; absent when 0 |
//! | `cost_usd` | dollars, as the agent reported them, or by the user's `[prices]` for its model where it reported none; absent when neither gives a figure (an unpriced run: its dollars count as $0 against `max_cost_usd`) |
//! | `priced` | `true` when `cost_usd` comes from `[prices]`, not from the agent |
//!
//! A torn last line (a crash mid-write) is skipped, and cut before the next append: its
//! run was never acted on. Any other line that is not a ledger line is an error naming the
//! file and the line.
//!
//! # Edits
//!
//! ralph is the ledger's only writer, as it is `plan.jsonl`'s, and guards it the same way.
//! Beside it, `spend.jsonl.mark` holds what ralph last left there: its length, the SHA-256
//! of those bytes and every scope's spend (see `mark`). An edit ralph did not make (the file
//! emptied, truncated, deleted, a line removed or changed) is found at the next load, by
//! the mark, and under a running ralph at the next write, by the file's identity, length
//! and modification time. Then the budget does not forget: for each scope that now shows
//! less than ralph recorded, a `restored` line puts the difference back (written before the
//! next line, so a dry run still writes nothing), and a warning names the file, what
//! happened and the `next:` step. A run goes on: the ledger is whole again. A line someone
//! added counts (the budget never counts less than the file says). A run in flight when the
//! ledger was cut may be counted twice, once in the restored line: an edit errs on the side
//! of the budget. Deleting both files starts the spend afresh, as deleting `.ralph/` does.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::Error;
use crate::files::seen::{self, Seen};
use crate::store::StoreError;

mod book;
mod mark;
mod price;

pub(crate) use price::Prices;

use book::Tally;

/// The ledger's file name in ralph's state folder.
const FILE: &str = "spend.jsonl";

/// Tokens and dollars, summed over runs: a scope's spend, as the ledger holds it.
///
/// [`Ralph::spent`](crate::Ralph::spent) reads it for a scope; `Board::run`'s `tokens_in`,
/// `tokens_out` and `cost_usd` are the `construct` scope's `input_tokens`, `output_tokens`
/// and `cost_usd`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spent {
    /// Input tokens (cache reads and writes not included).
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Cache-read input tokens, shown apart and not counted against `max_tokens`.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Cache-creation input tokens, shown apart and not counted against `max_tokens`.
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Dollars, as the agents reported them.
    #[serde(default)]
    pub cost_usd: f64,
    /// Agent runs.
    #[serde(default)]
    pub runs: u64,
    /// Runs that reported no cost (an agent that reports none, a run killed before its
    /// report): their tokens count, their dollars are unknown.
    #[serde(default)]
    pub unpriced_runs: u64,
    /// Runs whose agent reported no cost, priced by the user's `[prices]` instead.
    #[serde(default)]
    pub priced_runs: u64,
    /// Runs cut short (ralph killed while they ran) that count by what they had reported
    /// so far: when not 0 the figure is an estimate, and may be below what was spent.
    #[serde(default)]
    pub estimated_runs: u64,
}

impl Spent {
    /// Input and output tokens: what `max_tokens` counts.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The share of all input (uncached, read from the caches, written to them) that was
    /// read from the providers' prompt caches, in percent; `None` with no input at all.
    ///
    pub fn cached_percent(&self) -> Option<f64> {
        let all = self
            .input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_creation_tokens);
        (all > 0).then(|| self.cache_read_tokens as f64 * 100.0 / all as f64)
    }

    /// Whether the figure is an estimate: it counts a run cut short by what it had
    /// reported ([`estimated_runs`](Self::estimated_runs) is not 0).
    pub fn is_estimate(&self) -> bool {
        self.estimated_runs > 0
    }

    fn add(&mut self, line: &Line) {
        self.input_tokens = self.input_tokens.saturating_add(line.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(line.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(line.cache_read_tokens);
        self.cache_creation_tokens = self
            .cache_creation_tokens
            .saturating_add(line.cache_creation_tokens);
        if line.restored {
            self.cost_usd += line.cost_usd.unwrap_or(0.0);
            self.runs = self.runs.saturating_add(line.runs);
            self.unpriced_runs = self.unpriced_runs.saturating_add(line.unpriced_runs);
            self.priced_runs = self.priced_runs.saturating_add(line.priced_runs);
            self.estimated_runs = self.estimated_runs.saturating_add(line.estimated_runs);
            return;
        }
        match line.cost_usd {
            Some(cost) => self.cost_usd += cost,
            None => self.unpriced_runs += 1,
        }
        self.estimated_runs += u64::from(line.estimate);
        self.priced_runs += u64::from(line.priced);
        self.runs += 1;
    }

    /// What `self` has beyond `other`, count by count (none below 0).
    fn beyond(&self, other: &Spent) -> Spent {
        Spent {
            input_tokens: self.input_tokens.saturating_sub(other.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(other.output_tokens),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_sub(other.cache_read_tokens),
            cache_creation_tokens: self
                .cache_creation_tokens
                .saturating_sub(other.cache_creation_tokens),
            // Below a cent's millionth is float noise from summing in another order.
            cost_usd: Some(self.cost_usd - other.cost_usd)
                .filter(|d| *d > 1e-9)
                .unwrap_or(0.0),
            runs: self.runs.saturating_sub(other.runs),
            unpriced_runs: self.unpriced_runs.saturating_sub(other.unpriced_runs),
            priced_runs: self.priced_runs.saturating_sub(other.priced_runs),
            estimated_runs: self.estimated_runs.saturating_sub(other.estimated_runs),
        }
    }

    fn is_nothing(&self) -> bool {
        *self == Spent::default()
    }
}

/// One line of the ledger: one agent run (final or provisional), a scope starting afresh,
/// or spend restored after an edit. See the module docs for each field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Line {
    pub(crate) at: String,
    pub(crate) scope: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) reset: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) estimate: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) restored: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) runs: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) unpriced_runs: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) priced_runs: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) estimated_runs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) input_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) cache_creation_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) priced: bool,
}

impl Line {
    /// The `restored` line that puts `spent` back into `scope`.
    fn restoring(scope: &str, spent: &Spent) -> Line {
        Line {
            at: crate::time::now_rfc3339(),
            scope: scope.to_owned(),
            restored: true,
            runs: spent.runs,
            unpriced_runs: spent.unpriced_runs,
            priced_runs: spent.priced_runs,
            estimated_runs: spent.estimated_runs,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
            cache_read_tokens: spent.cache_read_tokens,
            cache_creation_tokens: spent.cache_creation_tokens,
            cost_usd: (spent.cost_usd > 0.0).then_some(spent.cost_usd),
            ..Line::default()
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A fresh id for an agent run's lines: unique across processes (the pid and when the
/// process first asked) and within one (a counter).
pub(crate) fn run_id() -> String {
    static START: OnceLock<u128> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let start = START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{start:x}-{n}", std::process::id())
}

/// The spend of one scope, as written so far: appended to by every agent run of the scope.
#[derive(Clone, Debug)]
pub(crate) struct Ledger {
    path: PathBuf,
    scope: String,
    state: Arc<Mutex<State>>,
}

/// What a ledger knows of its file: every scope's tally, and what it last left there.
struct State {
    tallies: BTreeMap<String, Tally>,
    /// The length of the file's whole lines.
    len: u64,
    /// The SHA-256 of those bytes so far, for the mark.
    hasher: Sha256,
    /// The file as this ledger last read or wrote it: anything else is someone's edit.
    seen: Option<Seen>,
    /// Where a torn last line starts, to be cut before the first append (reading writes
    /// nothing: a dry run opens the ledger too).
    torn_at: Option<u64>,
    /// The file once the first append opened it: every agent run appends a line, and
    /// opening (with its folder check) each time cost more syscalls than the line itself.
    file: Option<std::fs::File>,
    mark: Option<mark::Writer>,
    /// `restored` lines counted already and written before the next line.
    pending: Vec<Line>,
    /// A warning not said yet: the ledger was edited, or its mark not written.
    notice: Option<String>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("tallies", &self.tallies)
            .field("len", &self.len)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl State {
    /// The state of a file whose whole lines are `whole`, parsed as `lines`; the lines of
    /// the runs in `open` stay open.
    fn of(whole: &[u8], lines: Vec<Line>, open: &[String]) -> State {
        State {
            tallies: Tally::of(&book::counted(lines), open),
            len: whole.len() as u64,
            hasher: Sha256::new_with_prefix(whole),
            seen: None,
            torn_at: None,
            file: None,
            mark: None,
            pending: Vec::new(),
            notice: None,
        }
    }

    fn scopes(&self) -> BTreeMap<String, Spent> {
        self.tallies
            .iter()
            .map(|(scope, tally)| (scope.clone(), tally.spent()))
            .collect()
    }

    /// After an edit of `path` (`how`): each scope below what was `recorded` gets the
    /// difference back in a `restored` line, and the warning says so.
    fn restore(&mut self, path: &Path, recorded: &BTreeMap<String, Spent>, how: &str) {
        let now = self.scopes();
        let lines = restoring(recorded, &now);
        for line in &lines {
            self.tallies
                .entry(line.scope.clone())
                .or_default()
                .push(line.clone());
        }
        self.notice = Some(edit_notice(path, how, &lines));
        self.pending.extend(lines);
    }
}

/// The `restored` lines that bring each scope of `now` up to what was `recorded`.
fn restoring(recorded: &BTreeMap<String, Spent>, now: &BTreeMap<String, Spent>) -> Vec<Line> {
    recorded
        .iter()
        .filter_map(|(scope, recorded)| {
            let missing = recorded.beyond(&now.get(scope).copied().unwrap_or_default());
            (!missing.is_nothing()).then(|| Line::restoring(scope, &missing))
        })
        .collect()
}

/// The warning of an edit of the ledger at `path` (`how`), with what `restored` put back.
fn edit_notice(path: &Path, how: &str, restored: &[Line]) -> String {
    let back = match restored {
        [] => "nothing ralph recorded there is missing".to_owned(),
        lines => {
            let each: Vec<String> = lines
                .iter()
                .map(|l| {
                    format!(
                        "{}: ${:.2}, {} tokens",
                        l.scope,
                        l.cost_usd.unwrap_or(0.0),
                        l.input_tokens.saturating_add(l.output_tokens)
                    )
                })
                .collect();
            format!(
                "the spend it no longer shows ({}) is restored from {} and still counts \
                 against the limits",
                each.join("; "),
                mark::path_of(path).display()
            )
        }
    };
    format!(
        "{} {how}, an edit ralph did not make: {back}. next: leave the ledger to ralph; to \
         spend more, raise max_cost_usd or max_tokens (--max-cost)",
        path.display()
    )
}

/// `event` (a run's [`Finished`](crate::Event::Finished)) with what `scope` spent, as the
/// ledger in `workspace` has it; as it is when the ledger cannot be read (the run's own
/// error says why).
pub(crate) fn stamped(
    event: crate::event::Event,
    workspace: &Path,
    scope: &str,
) -> crate::event::Event {
    match Ledger::open(workspace, scope) {
        Ok(ledger) => {
            let spent = ledger.spent();
            let cached = (spent.cache_read_tokens, spent.cache_creation_tokens);
            event.with_spent(spent.cost_usd, spent.tokens(), cached, spent.is_estimate())
        }
        Err(_) => event,
    }
}

impl Ledger {
    /// The ledger of `scope` in `workspace`, with the spend its lines hold since its last
    /// reset, checked against its mark (an edit found is restored and said by
    /// [`take_notice`](Self::take_notice); reading writes nothing).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the file cannot be read;
    /// [`StoreError::MalformedAt`] naming the file and the line when a line is not a ledger
    /// line (a torn last line, left by a crash, is skipped, and cut before the next append:
    /// its run was never acted on).
    pub(crate) fn open(workspace: &Path, scope: &str) -> Result<Ledger, Error> {
        let path = super::workspace::state_dir(workspace).join(FILE);
        let state = load(&path, &[])?;
        Ok(Ledger {
            path,
            scope: scope.to_owned(),
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The scope's spend so far, the provisional lines of its runs going on included.
    pub(crate) fn spent(&self) -> Spent {
        self.lock()
            .tallies
            .get(&self.scope)
            .map(Tally::spent)
            .unwrap_or_default()
    }

    /// The warning of an edit found (once), for the caller to say.
    pub(crate) fn take_notice(&self) -> Option<String> {
        self.lock().notice.take()
    }

    /// The scope starts afresh: what came before no longer counts.
    pub(crate) fn reset(&self) -> Result<(), Error> {
        self.append(Some(Line {
            reset: true,
            ..Line::default()
        }))
    }

    /// The scope starts afresh from `spent`: a board's spend kept in its archive, brought
    /// back with the board (a `reset` line, then a `restored` line holding it).
    pub(crate) fn restart_from(&self, spent: &Spent) -> Result<(), Error> {
        self.reset()?;
        match spent.is_nothing() {
            true => Ok(()),
            false => self.append(Some(Line::restoring(&self.scope, spent))),
        }
    }

    /// Writes the `restored` lines of an edit found at load, if any: a run that starts
    /// makes the ledger whole at once, even one the budget then refuses (a dry run, which
    /// never calls this, writes nothing).
    pub(crate) fn settle(&self) -> Result<(), Error> {
        if self.lock().pending.is_empty() {
            return Ok(());
        }
        self.append(None)
    }

    /// Records one agent run of the scope (its `scope` and `at` are filled in; a `run` id
    /// closes that run's provisional lines), synced before it returns.
    pub(crate) fn record(&self, line: Line) -> Result<(), Error> {
        self.append(Some(Line {
            estimate: false,
            ..line
        }))
    }

    /// Records what the run `line.run` has spent so far, while it goes on: a provisional
    /// line, synced before it returns, that counts until the run's next line.
    pub(crate) fn provisional(&self, line: Line) -> Result<(), Error> {
        debug_assert!(line.run.is_some(), "a provisional line names its run");
        self.append(Some(Line {
            estimate: true,
            ..line
        }))
    }

    /// Appends `line` (and any `restored` line before it) with one write, synced, then
    /// counts it and rewrites the mark.
    fn append(&self, mut line: Option<Line>) -> Result<(), Error> {
        if let Some(line) = &mut line {
            line.scope = self.scope.clone();
            line.at = crate::time::now_rfc3339();
        }
        let mut state = self.lock();
        self.check_unchanged(&mut state)?;
        let mut text = String::new();
        for line in state.pending.iter().chain(&line) {
            text.push_str(&serde_json::to_string(line).unwrap_or_default());
            text.push('\n');
        }
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        if state.file.is_none() {
            state.file = Some(self.open_for_append(&mut state)?);
        }
        let file = state
            .file
            .as_mut()
            .ok_or_else(|| io(std::io::Error::other("closed")))?;
        // One write: a crash leaves whole lines or a torn last one, never a mix of two.
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)?;
        let seen = Seen::of(&file.metadata().map_err(io)?);
        state.pending.clear();
        state.seen = Some(seen);
        state.len += text.len() as u64;
        state.hasher.update(text.as_bytes());
        if let Some(line) = line {
            state
                .tallies
                .entry(self.scope.clone())
                .or_default()
                .push(line);
        }
        self.write_mark(&mut state);
        Ok(())
    }

    /// Before a write: a file someone else changed since this ledger last saw it is read
    /// again; unless the mark says ralph left it so (another ledger of this workspace), it
    /// was edited, and what it lost against this ledger's figures is restored.
    fn check_unchanged(&self, state: &mut State) -> Result<(), Error> {
        let now = Seen::at(&self.path).map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })?;
        let Some(how) = seen::change(state.seen, now) else {
            return Ok(());
        };
        let open: Vec<String> = state
            .tallies
            .values()
            .flat_map(|t| t.open_runs().cloned())
            .collect();
        let (mut fresh, _) = load_unchecked(&self.path, &open)?;
        let ours = mark::read(&mark::path_of(&self.path))
            .is_some_and(|m| m.len == fresh.len && m.sha256 == mark::digest(&fresh.hasher));
        if !ours {
            // What this process recorded (restored lines not yet written included) is the
            // floor, whatever the file says now.
            fresh.restore(&self.path, &state.scopes(), &how);
        }
        fresh.mark = state.mark.take();
        *state = fresh;
        Ok(())
    }

    /// Opens the file to append to, its folder made and a torn last line cut first.
    fn open_for_append(&self, state: &mut State) -> Result<std::fs::File, Error> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        crate::files::own::create_dir_all(&crate::files::atomic::dir_of(&self.path)).map_err(io)?;
        if let Some(whole) = state.torn_at.take() {
            cut_torn_line(&self.path, whole)?;
        }
        crate::files::journal::open(&self.path).map_err(io)
    }

    /// Rewrites the mark after a line. A mark not written weakens the guard, not the
    /// record: a warning, and the next line tries again.
    fn write_mark(&self, state: &mut State) {
        let path = mark::path_of(&self.path);
        let mark = mark::Mark {
            len: state.len,
            sha256: mark::digest(&state.hasher),
            scopes: state.scopes(),
        };
        let written = match &state.mark {
            Some(writer) => writer.write(&mark),
            None => mark::Writer::open(&path).and_then(|writer| {
                writer.write(&mark)?;
                state.mark = Some(writer);
                Ok(())
            }),
        };
        if let Err(e) = written {
            state.notice = Some(format!(
                "{} was not written ({e}): an edit of {} may go unnoticed",
                path.display(),
                self.path.display()
            ));
        }
    }
}

/// The ledger at `path` as it is now, checked against its mark: an edit found leaves
/// `restored` lines pending and a notice; the lines of the runs in `open` stay open.
fn load(path: &Path, open: &[String]) -> Result<State, Error> {
    let (mut state, whole) = load_unchecked(path, open)?;
    if let Some(mark) = mark::read(&mark::path_of(path))
        && let Some(how) = mark::edit(&mark, &whole)
    {
        state.restore(path, &mark.scopes, &how);
    }
    Ok(state)
}

/// The ledger at `path` as it is now, and its whole lines' bytes.
fn load_unchecked(path: &Path, open: &[String]) -> Result<(State, Vec<u8>), Error> {
    let mut bytes = read_bytes(path)?;
    let seen = Seen::at(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let (lines, whole) = parse(path, &bytes)?;
    let torn = bytes.len() as u64 > whole;
    bytes.truncate(usize::try_from(whole).unwrap_or(bytes.len()));
    let mut state = State::of(&bytes, lines, open);
    state.seen = seen;
    state.torn_at = torn.then_some(whole);
    Ok((state, bytes))
}

/// The run-wide limits (`max_cost_usd`, `max_tokens`) over one scope's ledger: checked
/// before every agent run, told every run's spend.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    ledger: Ledger,
    max_cost_usd: Option<f64>,
    max_tokens: Option<u64>,
    prices: Prices,
}

impl Budget {
    pub(crate) fn new(ledger: Ledger, max_cost_usd: Option<f64>, max_tokens: Option<u64>) -> Self {
        Budget {
            ledger,
            max_cost_usd,
            max_tokens,
            prices: Prices::default(),
        }
    }

    /// The budget, pricing the runs whose agent reports no cost by `prices`.
    pub(crate) fn with_prices(self, prices: Prices) -> Self {
        Budget { prices, ..self }
    }

    /// What `usage` of `model` cost by the user's `[prices]`, when they price the model.
    pub(crate) fn price(&self, model: Option<&str>, usage: &crate::agent::Usage) -> Option<f64> {
        self.prices.cost(model, usage)
    }

    /// The ledger it counts on.
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Whether a limit is reached: then no new agent run may start.
    pub(crate) fn exhausted(&self) -> bool {
        let spent = self.ledger.spent();
        self.max_cost_usd.is_some_and(|max| spent.cost_usd >= max)
            || self.max_tokens.is_some_and(|max| spent.tokens() >= max)
    }

    /// Dollars left under `max_cost_usd`, if it is set.
    pub(crate) fn dollars_left(&self) -> Option<f64> {
        let spent = self.ledger.spent().cost_usd;
        self.max_cost_usd.map(|max| (max - spent).max(0.0))
    }

    /// The event of a run refused at the limit.
    pub(crate) fn exhausted_event(&self) -> crate::event::Event {
        let spent = self.ledger.spent();
        crate::event::Event::BudgetExhausted {
            scope: self.ledger.scope.clone(),
            spent_usd: spent.cost_usd,
            spent_tokens: spent.tokens(),
            max_cost_usd: self.max_cost_usd,
            max_tokens: self.max_tokens,
        }
    }

    /// The limits and what was spent against them, for a dry run; `None` without limits.
    pub(crate) fn describe(&self) -> Option<String> {
        let spent = self.ledger.spent();
        let mut limits = Vec::new();
        if let Some(max) = self.max_cost_usd {
            limits.push(format!("${:.2} of max_cost_usd = {max}", spent.cost_usd));
        }
        if let Some(max) = self.max_tokens {
            limits.push(format!("{} of max_tokens = {max}", spent.tokens()));
        }
        (!limits.is_empty()).then(|| {
            let over = if self.exhausted() {
                " — exhausted: no agent run would start"
            } else {
                ""
            };
            let estimate = estimate_note(&spent);
            format!(
                "spent {} ({}){estimate}{over}",
                limits.join(", "),
                self.ledger.scope
            )
        })
    }

    /// The error that ends a run at the limit, with the spend and the limits.
    pub(crate) fn exhausted_error(&self) -> Error {
        let spent = self.ledger.spent();
        Error::BudgetExhausted {
            spent_usd: spent.cost_usd,
            spent_tokens: spent.tokens(),
            max_cost_usd: self.max_cost_usd,
            max_tokens: self.max_tokens,
        }
    }
}

/// `, an estimate (N runs cut short count by what they reported)` when `spent` is one;
/// nothing when it is not.
pub(crate) fn estimate_note(spent: &Spent) -> String {
    match spent.estimated_runs {
        0 => String::new(),
        1 => ", an estimate (1 run cut short counts by what it reported)".to_owned(),
        n => format!(", an estimate ({n} runs cut short count by what they reported)"),
    }
}

/// Every scope's spend since its last reset, split by subject and by agent: what `ralph
/// status` shows.
///
/// ```
/// # fn main() -> Result<(), ralph::Error> {
/// let workspace = tempfile::tempdir().unwrap();
/// let totals = ralph::Totals::read(workspace.path())?;
/// assert!(totals.scopes.is_empty()); // no ledger yet: nothing spent
/// for ((scope, agent), spent) in &totals.agents {
///     println!("{scope} {agent}: {} tokens, ${:.2}", spent.input_tokens, spent.cost_usd);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// By scope.
    pub scopes: BTreeMap<String, Spent>,
    /// By scope, then subject (`t-3`, a spec, `iteration-2`).
    pub subjects: BTreeMap<(String, String), Spent>,
    /// By scope, then agent.
    pub agents: BTreeMap<(String, String), Spent>,
    /// The warning of an edit ralph did not make, found by the mark: the scopes hold what
    /// it restores (not split by subject or agent).
    pub notice: Option<String>,
}

impl Totals {
    /// The totals of the ledger in `workspace` (empty when there is none), as a run would
    /// count them: an edit found by the mark is restored here too, and nothing is written.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the ledger cannot be read; [`StoreError::MalformedAt`] naming the
    /// file and the line when a line is not a ledger line.
    pub fn read(workspace: &Path) -> Result<Totals, Error> {
        let path = super::workspace::state_dir(workspace).join(FILE);
        let bytes = read_bytes(&path)?;
        let (lines, whole) = parse(&path, &bytes)?;
        let mut totals = Totals::default();
        let counted = book::counted(lines);
        totals.scopes = book::by_scope(&counted);
        for line in &counted {
            let scope = line.scope.clone();
            if let Some(subject) = &line.subject {
                let key = (scope.clone(), subject.clone());
                totals.subjects.entry(key).or_default().add(line);
            }
            if let Some(agent) = &line.agent {
                let key = (scope, agent.clone());
                totals.agents.entry(key).or_default().add(line);
            }
        }
        let whole = &bytes[..usize::try_from(whole).unwrap_or(bytes.len())];
        if let Some(mark) = mark::read(&mark::path_of(&path))
            && let Some(how) = mark::edit(&mark, whole)
        {
            let lines = restoring(&mark.scopes, &totals.scopes);
            for line in &lines {
                totals
                    .scopes
                    .entry(line.scope.clone())
                    .or_default()
                    .add(line);
            }
            totals.notice = Some(edit_notice(&path, &how, &lines));
        }
        Ok(totals)
    }
}

/// The ledger's bytes; none when there is no file.
fn read_bytes(path: &Path) -> Result<Vec<u8>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The ledger's lines and the length of its whole lines.
fn parse(path: &Path, bytes: &[u8]) -> Result<(Vec<Line>, u64), Error> {
    let mut lines = Vec::new();
    let mut whole = 0;
    for (n, raw) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        let Some(text) = raw.strip_suffix(b"\n") else {
            // A torn last line: the run it was about never got past its record.
            break;
        };
        whole += raw.len() as u64;
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = serde_json::from_slice(text).map_err(|e| StoreError::MalformedAt {
            path: path.to_path_buf(),
            line: n + 1,
            column: e.column(),
            message: e.to_string(),
        })?;
        lines.push(line);
    }
    Ok((lines, whole))
}

/// Cuts a torn last line off the file, so the next line appended starts a line of its own.
fn cut_torn_line(path: &Path, whole: u64) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() > whole => {
            let file = crate::files::journal::open(path).map_err(io)?;
            crate::files::journal::cut(&file, whole)
                .and_then(|()| file.sync_all())
                .map_err(io)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    fn run(subject: &str, agent: &str, input: u64, cost: Option<f64>) -> Line {
        Line {
            role: Some("build".into()),
            subject: Some(subject.into()),
            agent: Some(agent.into()),
            input_tokens: input,
            output_tokens: 10,
            cache_read_tokens: 5,
            cost_usd: cost,
            ..Line::default()
        }
    }

    #[test]
    fn the_cached_share_is_of_all_input() {
        let spent = Spent {
            input_tokens: 100,
            cache_read_tokens: 300,
            ..Spent::default()
        };
        assert_eq!(spent.cached_percent(), Some(75.0));
        assert_eq!(Spent::default().cached_percent(), None);
    }

    #[test]
    fn a_scope_sums_its_runs_since_its_last_reset_across_opens() {
        let ws = tempfile::tempdir().unwrap();
        let build = Ledger::open(ws.path(), "construct").unwrap();
        build.record(run("t-1", "claude", 100, Some(0.4))).unwrap();
        let other = Ledger::open(ws.path(), "thread/1-x").unwrap();
        other.record(run("1-x", "codex", 7, None)).unwrap();
        build.record(run("t-2", "claude", 50, None)).unwrap();

        let again = Ledger::open(ws.path(), "construct").unwrap();
        let spent = again.spent();
        assert_eq!(spent, build.spent());
        assert_eq!((spent.input_tokens, spent.output_tokens), (150, 20));
        assert_eq!((spent.tokens(), spent.cache_read_tokens), (170, 10));
        assert!((spent.cost_usd - 0.4).abs() < 1e-9);
        assert_eq!((spent.runs, spent.unpriced_runs), (2, 1));

        again.reset().unwrap();
        assert_eq!(
            Ledger::open(ws.path(), "construct").unwrap().spent(),
            Spent::default()
        );
        assert_eq!(
            Ledger::open(ws.path(), "thread/1-x").unwrap().spent().runs,
            1
        );
    }

    #[test]
    fn totals_split_by_subject_and_agent() {
        let ws = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(ws.path(), "construct").unwrap();
        ledger.record(run("t-1", "claude", 100, Some(0.4))).unwrap();
        ledger.record(run("t-1", "codex", 20, Some(0.1))).unwrap();
        let totals = Totals::read(ws.path()).unwrap();
        let key = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(totals.subjects[&key("construct", "t-1")].input_tokens, 120);
        assert_eq!(totals.agents[&key("construct", "codex")].input_tokens, 20);
        assert_eq!(totals.scopes["construct"].runs, 2);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_a_bad_line_is_named() {
        let ws = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(ws.path(), "construct").unwrap();
        ledger.record(run("t-1", "claude", 100, Some(0.4))).unwrap();
        let path = ws.path().join(".ralph/spend.jsonl");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"scope\":\"construct\",\"inp");
        std::fs::write(&path, &text).unwrap();
        let reopened = Ledger::open(ws.path(), "construct").unwrap();
        assert_eq!(reopened.spent().runs, 1);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "reading writes nothing"
        );
        // Cut before the next append: that line starts a line of its own.
        reopened.record(run("t-2", "claude", 1, None)).unwrap();
        assert_eq!(
            Ledger::open(ws.path(), "construct").unwrap().spent().runs,
            2
        );

        std::fs::write(&path, "not json\n").unwrap();
        let err = Ledger::open(ws.path(), "construct")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("spend.jsonl") && err.contains("line 1"),
            "{err}"
        );
    }

    // newcomer row 67: an edit of the ledger under a running ralph is found at the next
    // write, and one between runs at the next load; neither makes the budget count less.
    #[test]
    fn an_edit_is_found_at_the_next_write_and_load_and_nothing_is_forgotten() {
        let ws = tempfile::tempdir().unwrap();
        let path = ws.path().join(".ralph/spend.jsonl");
        let ledger = Ledger::open(ws.path(), "construct").unwrap();
        ledger.record(run("t-1", "claude", 100, Some(0.4))).unwrap();
        ledger.record(run("t-2", "claude", 100, Some(0.4))).unwrap();
        std::fs::write(&path, "").unwrap();
        ledger.record(run("t-3", "claude", 100, Some(0.4))).unwrap();
        let notice = ledger.take_notice().expect("the edit is said");
        assert!(
            notice.contains("was truncated") && notice.contains("next:"),
            "{notice}"
        );
        let spent = ledger.spent();
        assert!(
            (spent.cost_usd - 1.2).abs() < 1e-9 && spent.runs == 3,
            "{spent:?}"
        );
        let reopened = Ledger::open(ws.path(), "construct").unwrap();
        assert_eq!(
            reopened.take_notice(),
            None,
            "restored in the file: no edit left"
        );
        assert!((reopened.spent().cost_usd - 1.2).abs() < 1e-9);

        // A line changed between runs: the mark finds it, the figure stays ralph's.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replacen("\"cost_usd\":0.4", "\"cost_usd\":0.0", 1),
        )
        .unwrap();
        let edited = Ledger::open(ws.path(), "construct").unwrap();
        let notice = edited.take_notice().expect("the edit is said");
        assert!(notice.contains("is not what ralph wrote"), "{notice}");
        assert!(
            (edited.spent().cost_usd - 1.2).abs() < 1e-9,
            "{:?}",
            edited.spent()
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().lines().count(),
            text.lines().count(),
            "reading writes nothing"
        );
    }

    #[test]
    fn a_runs_provisional_lines_count_until_its_final_line() {
        let ws = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(ws.path(), "construct").unwrap();
        let id = run_id();
        let so_far = |cost| Line {
            run: Some(id.clone()),
            ..run("t-1", "claude", 100, Some(cost))
        };
        ledger.provisional(so_far(0.1)).unwrap();
        ledger.provisional(so_far(0.3)).unwrap();
        assert_eq!(ledger.spent().estimated_runs, 1);
        // A kill here: the next start counts the last report.
        let after_kill = Ledger::open(ws.path(), "construct").unwrap().spent();
        assert!((after_kill.cost_usd - 0.3).abs() < 1e-9 && after_kill.is_estimate());
        ledger.record(so_far(0.5)).unwrap();
        let spent = Ledger::open(ws.path(), "construct").unwrap().spent();
        assert_eq!((spent.runs, spent.estimated_runs), (1, 0));
        assert!((spent.cost_usd - 0.5).abs() < 1e-9);
        assert_ne!(run_id(), id, "each run has its own id");
    }
}
