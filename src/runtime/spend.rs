//! What the agents spent, kept so that nothing is lost and a limit holds across resumes.
//!
//! Every agent run of every mode ends in one line appended to `.ralph/spend.jsonl` and
//! synced before the run's result is acted on: its scope, role, subject and agent, its
//! tokens and its cost, also for a run that was stopped, killed, interrupted or rate
//! limited (whatever it reported by then). A stop, a crash or a SIGKILL between two runs
//! loses nothing; a kill during a run loses only that run's line.
//!
//! A *scope* is the state a run belongs to: `construct` (the board), `build` (build mode's
//! run over `implementation.json`), `plan`, or `thread/<id>`. A scope's spend is the sum of
//! its lines since its last `reset` line, written when its state starts afresh (a new
//! board, a new plan, a new thread). Run-wide limits ([`Budget`]) are checked against it.
//!
//! ```text
//! {"at":"2026-…","scope":"construct","role":"build","subject":"t-1","agent":"claude","input_tokens":1200,"output_tokens":300,"cost_usd":0.4}
//! {"at":"2026-…","scope":"build","reset":true}
//! ```

#[cfg(feature = "internals")]
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::error::Error;
use crate::store::StoreError;

/// The ledger's file name in ralph's state folder.
const FILE: &str = "spend.jsonl";

/// Tokens and dollars, summed over runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
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
}

impl Spent {
    /// Input and output tokens: what `max_tokens` counts.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
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
        match line.cost_usd {
            Some(cost) => self.cost_usd += cost,
            None => self.unpriced_runs += 1,
        }
        self.runs += 1;
    }
}

/// One line of the ledger: one agent run, or a scope starting afresh.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Line {
    /// When it was written (RFC 3339).
    pub(crate) at: String,
    /// The state the run belongs to.
    pub(crate) scope: String,
    /// The scope starts afresh here: the lines before it no longer count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) reset: bool,
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
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The spend of one scope, as written so far: appended to by every agent run of the scope.
#[derive(Clone, Debug)]
pub(crate) struct Ledger {
    path: PathBuf,
    scope: String,
    total: Arc<Mutex<Spent>>,
    /// Where a torn last line starts, to be cut before the first append (reading writes
    /// nothing: a dry run opens the ledger too).
    torn_at: Arc<Mutex<Option<u64>>>,
    /// The file once the first append opened it: every agent run appends a line, and
    /// opening (with its folder check) each time cost more syscalls than the line itself.
    file: Arc<Mutex<Option<std::fs::File>>>,
}

impl Ledger {
    /// The ledger of `scope` in `workspace`, with the spend its lines hold since its last
    /// reset.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the file cannot be read;
    /// [`StoreError::MalformedAt`] naming the file and the line when a line is not a ledger
    /// line (a torn last line, left by a crash, is skipped, and cut before the next append:
    /// its run was never acted on).
    pub(crate) fn open(workspace: &Path, scope: &str) -> Result<Ledger, Error> {
        let path = super::workspace::state_dir(workspace).join(FILE);
        let (lines, whole) = read(&path)?;
        let torn = std::fs::metadata(&path).is_ok_and(|m| m.len() > whole);
        let mut total = Spent::default();
        for line in lines {
            if line.scope != scope {
                continue;
            }
            match line.reset {
                true => total = Spent::default(),
                false => total.add(&line),
            }
        }
        Ok(Ledger {
            path,
            scope: scope.to_owned(),
            total: Arc::new(Mutex::new(total)),
            torn_at: Arc::new(Mutex::new(torn.then_some(whole))),
            file: Arc::new(Mutex::new(None)),
        })
    }

    /// The scope's spend so far.
    pub(crate) fn spent(&self) -> Spent {
        *self.total.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The scope starts afresh: what came before no longer counts.
    pub(crate) fn reset(&self) -> Result<(), Error> {
        let line = Line {
            at: crate::time::now_rfc3339(),
            scope: self.scope.clone(),
            reset: true,
            ..Line::default()
        };
        self.append(&line)?;
        *self.total.lock().unwrap_or_else(PoisonError::into_inner) = Spent::default();
        Ok(())
    }

    /// Records one agent run of the scope (its `scope` and `at` are filled in), synced
    /// before it returns.
    pub(crate) fn record(&self, mut line: Line) -> Result<(), Error> {
        line.scope = self.scope.clone();
        line.at = crate::time::now_rfc3339();
        self.append(&line)?;
        self.total
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(&line);
        Ok(())
    }

    fn append(&self, line: &Line) -> Result<(), Error> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let mut text = serde_json::to_string(line).unwrap_or_default();
        text.push('\n');
        let mut open = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let file = match open.as_mut() {
            Some(file) => file,
            None => open.insert(self.open_for_append()?),
        };
        // One write: a crash leaves a whole line or a torn last one, never a mix of two.
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)
    }

    /// Opens the file to append to, its folder made and a torn last line cut first.
    fn open_for_append(&self) -> Result<std::fs::File, Error> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        crate::files::own::create_dir_all(&crate::files::atomic::dir_of(&self.path)).map_err(io)?;
        if let Some(whole) = self
            .torn_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            cut_torn_line(&self.path, whole)?;
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io)
    }
}

/// The run-wide limits (`max_cost_usd`, `max_tokens`) over one scope's ledger: checked
/// before every agent run, told every run's spend.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    ledger: Ledger,
    max_cost_usd: Option<f64>,
    max_tokens: Option<u64>,
}

impl Budget {
    pub(crate) fn new(ledger: Ledger, max_cost_usd: Option<f64>, max_tokens: Option<u64>) -> Self {
        Budget {
            ledger,
            max_cost_usd,
            max_tokens,
        }
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
            format!("spent {} ({}){over}", limits.join(", "), self.ledger.scope)
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

/// Every scope's spend since its last reset, split by subject and by agent: what `ralph
/// status` shows (through `__internals`).
#[cfg(feature = "internals")]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// By scope.
    pub scopes: BTreeMap<String, Spent>,
    /// By scope, then subject (`t-3`, a spec, `iteration-2`).
    pub subjects: BTreeMap<(String, String), Spent>,
    /// By scope, then agent.
    pub agents: BTreeMap<(String, String), Spent>,
}

#[cfg(feature = "internals")]
impl Totals {
    /// The totals of the ledger in `workspace` (empty when there is none).
    ///
    /// # Errors
    ///
    /// As [`Ledger::open`].
    pub fn read(workspace: &Path) -> Result<Totals, Error> {
        let path = super::workspace::state_dir(workspace).join(FILE);
        let mut totals = Totals::default();
        for line in read(&path)?.0 {
            let scope = line.scope.clone();
            if line.reset {
                totals.scopes.remove(&scope);
                totals.subjects.retain(|(s, _), _| *s != scope);
                totals.agents.retain(|(s, _), _| *s != scope);
                continue;
            }
            totals.scopes.entry(scope.clone()).or_default().add(&line);
            if let Some(subject) = &line.subject {
                let key = (scope.clone(), subject.clone());
                totals.subjects.entry(key).or_default().add(&line);
            }
            if let Some(agent) = &line.agent {
                let key = (scope, agent.clone());
                totals.agents.entry(key).or_default().add(&line);
            }
        }
        Ok(totals)
    }
}

/// The ledger's lines (none when there is no file) and the length of its whole lines.
fn read(path: &Path) -> Result<(Vec<Line>, u64), Error> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
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
        Ok(meta) if meta.len() > whole => OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(whole))
            .map_err(io),
        _ => Ok(()),
    }
}

#[cfg(test)]
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

    #[cfg(feature = "internals")]
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
}
