//! `JsonlStore`: the board as seed 000's `plan.jsonl`, one [`Change`] per line.
//!
//! # Format
//!
//! Each line is a whole record (`{"t":"task",…}`, `{"t":"issue",…}`, `{"t":"run",…}`,
//! `{"t":"config",…}`); a later line for the same id supersedes earlier ones, so the board is
//! the file's lines replayed in order through [`Board::apply`]. Blank lines are ignored.
//!
//! A persist of several changes is one transaction: its lines follow a header line
//! `{"t":"batch","n":<count>}`, and a batch cut short by a crash is dropped whole, so the
//! board never shows half of a transition (a decomposed task without its subtasks).
//!
//! # The chain: ralph trusts only the lines it wrote
//!
//! Every line ralph writes, records and batch headers alike, ends in a last field `"h"`:
//! the first 32 hex digits of the SHA-256 of the previous line's `h` (as its ASCII hex, or
//! nothing for the file's first line), a newline, and the line's JSON object without its
//! `h`:
//!
//! ```text
//! {"t":"task","id":"t-1","name":"write docs","s":"p","h":"6d0f…"}
//! ```
//!
//! Every load checks every line. A line whose `h` is missing (appended by someone else) or
//! does not match (edited in place) is refused with [`StoreError::NotWritten`], naming the
//! file and the line, before anything of the board is used; blank lines carry nothing and
//! are skipped. While a run goes on, the same edits are caught before the next write (see
//! [One writer](#one-writer)). A person then decides (see [Repair](#repair)).
//!
//! The chain has no key. It stops accidents and an agent's casual edit (`echo … >>
//! .ralph/plan.jsonl`, a `sed` over a record); it does not stop a determined forger who
//! reads this and recomputes the chain. A compaction starts the chain afresh.
//!
//! # Repair
//!
//! [`Store::repair`] (`ralph repair`, [`Ralph::repair`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.repair)) starts at
//! the first line that does not verify, or at the header of the batch it is in (a batch is
//! kept whole or not at all), and leaves everything before it as it is:
//!
//! - roll back (`ralph repair`): the bytes from there on are written to
//!   `plan.jsonl.removed-<UTC time>` beside the file and fsynced, then the file is cut there
//!   and fsynced: the board is what ralph last wrote, and nothing a person typed is lost;
//! - adopt (`ralph repair --adopt`): every line from there on must be a plan record or a
//!   batch header in the seed format (an error names the first that is not, and nothing
//!   changes); each is written again, signed, and the file replaced atomically.
//!
//! # Files of earlier versions
//!
//! A file in which no line carries an `h` (written by an earlier ralph, or by hand in seed
//! 000's format before ralph ever ran there) loads as before, and
//! [`recovered`](JsonlStore::recovered) says it was adopted; the first persist rewrites it
//! whole, signed (as a compaction does). The first signed write also creates a marker beside
//! the file, `plan.jsonl.chain` (one line naming the chain's version): from then on an
//! unsigned file is refused like any other unsigned line, so removing every `h` is no way
//! around the chain. A file that mixes signed and unsigned lines is always refused.
//!
//! # Durability
//!
//! [`persist`](Store::persist) appends the changes' lines with one write and `fdatasync`s
//! before returning, so a persist costs O(changes), not O(board). A crash mid-write can only
//! leave a torn last line; the next load drops it (see [`JsonlStore::recovered`]) and cuts
//! it off before appending again. (A write that reached the disk but for its final newline
//! is whole, and is kept.) Any other malformed line is an error, never skipped. Property
//! tests cut and garble the file at random to hold this.
//!
//! # Compaction
//!
//! Superseded lines pile up. When they outnumber both 1000 and twice the live records, the
//! persist that crosses the line rewrites the file as [`Board::snapshot`] instead of
//! appending (temp file, fsync, rename, fsync the directory). Each rewrite costs O(board)
//! but follows at least as many appends, so a persist stays O(1) amortized.
//!
//! # One writer
//!
//! The store assumes it is the only writer of its file: ralph's runtime holds the
//! workspace's lock (`.ralph/ralph.lock`) for every run, in every mode. What it does not
//! assume is that the file stays put: before every write it checks that the file it read
//! is still there, unreplaced, of the length and with the modification time it left it,
//! and refuses to write ([`StoreError::Changed`]) when it is not. A state file deleted,
//! replaced, truncated, appended to or rewritten in place under a running ralph therefore
//! stops the run with an error naming the file, instead of a run that reports success while
//! its state is gone or forged; the next load then names the line.
//!
//! Opening the store writes nothing, and neither does loading it: the file (and its
//! directory) is created by the first persist. A dry run can load a board safely.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::chain::{self, Link};
use super::{Repair, Store, StoreError};
use crate::files::atomic;
use crate::files::seen::{self, Seen};
use crate::model::{Board, Change};

/// Superseded lines always tolerated before compacting, however small the board.
const MIN_SUPERSEDED: usize = 1000;

/// The board as `plan.jsonl` lines: append-only, fsynced, compacted.
///
/// The file is read once, on the first [`load`](Store::load) or
/// [`persist`](Store::persist); afterwards the store answers from an in-memory board it
/// keeps in step with every persist. A change made to the file from outside while the store
/// is in use is caught at the next persist, which then fails (see the module docs).
///
/// The store must be used inside a tokio runtime. On a current-thread runtime its file I/O
/// runs on the calling task's thread (the task awaits it anyway; a handoff to another
/// thread would cost two wake-ups across cores per persist); on a multi-thread runtime it
/// runs on tokio's blocking pool.
///
/// ```
/// # tokio_test_block_on(async {
/// use ralph::{JsonlStore, Store, model::{Change, Task}};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join(".ralph/plan.jsonl");
///
/// let store = JsonlStore::open(&path)?;
/// assert!(store.load().await?.tasks().next().is_none());
/// assert!(!path.exists(), "opening and loading write nothing");
/// store.persist(&[Change::Task(Task::new("t-1", "write docs"))]).await?;
/// drop(store);
///
/// // The next start resumes from the file: one line, signed with its "h".
/// let store = JsonlStore::open(&path)?;
/// assert_eq!(store.load().await?.tasks().len(), 1);
/// let text = std::fs::read_to_string(&path)?;
/// assert!(text.starts_with(r#"{"t":"task","id":"t-1","name":"write docs","s":"p","h":""#));
///
/// // A line ralph did not write is refused, naming the file and the line.
/// std::fs::write(&path, text + "{\"t\":\"task\",\"id\":\"t-2\",\"name\":\"x\",\"s\":\"a\"}\n")?;
/// let err = JsonlStore::open(&path)?.load().await.unwrap_err();
/// assert!(err.to_string().contains("plan.jsonl:2: not written by ralph"), "{err}");
///
/// // A state file deleted under the store is not silently recreated.
/// std::fs::remove_file(&path)?;
/// let err = store.persist(&[Change::Task(Task::new("t-2", "more"))]).await.unwrap_err();
/// assert!(err.to_string().contains("was deleted"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub struct JsonlStore {
    shared: Arc<JsonlShared>,
}

/// What the blocking tasks share with the store handle.
struct JsonlShared {
    path: PathBuf,
    /// `None` until the file is read, and again after a failed write, so that the next call
    /// re-reads what is really on disk instead of trusting a board that may have drifted.
    log: Mutex<Option<PlanLog>>,
    /// Kept apart from `log` so that asking does not wait behind an fsync.
    recovered: Mutex<Option<String>>,
}

/// What the file holds, and how to tell it is still the file that was read.
struct PlanLog {
    /// Opened for appending by the first write; `None` until then.
    file: Option<File>,
    board: Board,
    /// Record lines in the file, superseded or not.
    lines: usize,
    /// Length of the good part of the file: everything up to the end of the last record.
    end: u64,
    tail: Tail,
    /// The file as last read or written: `None` when it did not exist.
    seen: Option<Seen>,
    /// The `h` of the last line of the good part: the next line's chain starts from it.
    last: Option<Link>,
    /// The file holds lines but none is signed, and no marker says it ever was: an earlier
    /// ralph's file, adopted as read. The next write rewrites it whole, signed.
    legacy: bool,
    /// The marker beside the file exists (or this log created it).
    marked: bool,
}

/// How the file ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tail {
    /// With a newline (or empty).
    Clean,
    /// With a good record that lacks its newline (a hand-edited file).
    Unterminated,
    /// With a torn line past `end`, to cut off before the next append.
    Torn,
}

impl JsonlStore {
    /// The store at `path`. Writes nothing: the file and its directory are created by the
    /// first [`persist`](Store::persist); a missing file loads as an empty board.
    ///
    /// # Errors
    ///
    /// None today; the `Result` leaves room for stores that must check their path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let shared = JsonlShared {
            path: path.as_ref().to_path_buf(),
            log: Mutex::new(None),
            recovered: Mutex::new(None),
        };
        Ok(JsonlStore {
            shared: Arc::new(shared),
        })
    }

    /// The `plan.jsonl` file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// What the last read of the file had to repair or adopt, if anything: a torn final
    /// line, left by a write that a crash interrupted, was dropped (the changes on it were
    /// never reported as persisted, so nothing acknowledged is lost); a file of an earlier
    /// ralph, whose lines carry no chain, was adopted (see the module docs). Also given by
    /// [`Store::recovered`], which the runtime reports as an event.
    pub fn recovered(&self) -> Option<String> {
        lock_ignoring_poison(&self.shared.recovered).clone()
    }

    /// Runs `f`'s file I/O: see [`super::file_io`].
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&JsonlShared) -> Result<T, StoreError> + Send + 'static,
    {
        super::file_io(&self.shared.path, &self.shared, f).await
    }
}

impl fmt::Debug for JsonlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for JsonlStore {
    async fn load(&self) -> Result<Board, StoreError> {
        self.blocking(JsonlShared::load).await
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let changes = changes.to_vec();
        self.blocking(move |shared| shared.persist(changes)).await
    }

    fn recovered(&self) -> Option<String> {
        JsonlStore::recovered(self)
    }

    fn location(&self) -> Option<String> {
        Some(self.path().display().to_string())
    }

    async fn repair(&self, adopt: bool) -> Result<Option<Repair>, StoreError> {
        self.blocking(move |shared| shared.repair(adopt)).await
    }
}

impl JsonlShared {
    fn load(&self) -> Result<Board, StoreError> {
        let mut slot = self.slot();
        // A load returns what is on disk: a file moved, replaced or rewritten since it was
        // read (a spec switch archived it) is read again. A write never does (it refuses).
        if slot
            .as_ref()
            .is_some_and(|log| log.check_unchanged(&self.path).is_err())
        {
            *slot = None;
        }
        Ok(self.loaded(&mut slot)?.board.clone())
    }

    fn persist(&self, changes: Vec<Change>) -> Result<(), StoreError> {
        let mut slot = self.slot();
        let log = self.loaded(&mut slot)?;
        // Encoded (and signed, which needs the last link) before the board changes: a record
        // that cannot be written must not reach the board either.
        let (bytes, last) =
            encode(&changes, log.last.as_ref()).map_err(|source| StoreError::Encode {
                path: self.path.clone(),
                source,
            })?;
        // Checked before the board changes: a refused write leaves the store as it was.
        log.check_unchanged(&self.path)?;
        log.lines += changes.len() + usize::from(changes.len() > 1);
        log.board.apply_all(changes);
        let written = if log.legacy || log.should_compact() {
            log.compact(&self.path)
        } else {
            log.append(&self.path, bytes, last)
        };
        let written = written.and_then(|()| log.mark(&self.path));
        if written.is_err() {
            *slot = None;
        }
        written
    }

    /// The log, reading the file if it is not in memory.
    fn loaded<'a>(&self, slot: &'a mut Option<PlanLog>) -> Result<&'a mut PlanLog, StoreError> {
        let log = match slot.take() {
            Some(log) => log,
            None => {
                let (log, note) = PlanLog::read(&self.path)?;
                *lock_ignoring_poison(&self.recovered) = note;
                log
            }
        };
        Ok(slot.insert(log))
    }

    fn slot(&self) -> MutexGuard<'_, Option<PlanLog>> {
        self.log.lock().unwrap_or_else(|poisoned| {
            // A panic mid-persist may have applied changes in memory that never reached the
            // file: forget the board so the next call re-reads the truth.
            let mut slot = poisoned.into_inner();
            *slot = None;
            self.log.clear_poison();
            slot
        })
    }
}

/// Why a read stopped: the file cannot be read, or a line of it is not ralph's.
enum ReadError {
    Store(StoreError),
    Unverified(Unverified),
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        ReadError::Store(e)
    }
}

/// The first line that does not verify, and where a repair starts.
struct Unverified {
    /// 1-based.
    line: usize,
    how: String,
    cut: CutPoint,
}

/// Where a rollback cuts the file and an adoption starts signing: the first line that does
/// not verify, or the header of the batch it is in (a batch is kept whole or not at all).
#[derive(Clone, Copy, Debug)]
struct CutPoint {
    /// Byte offset of the line's start.
    offset: u64,
    /// Its 1-based number.
    line: usize,
    /// The link of the line before it.
    last: Option<Link>,
}

/// How far the lines read so far are ralph's.
#[derive(Clone, Copy, Debug)]
enum Trust {
    /// No line yet, and no marker: the file may still be an earlier ralph's.
    Open,
    /// No line yet, but the marker says ralph signed this file before.
    Marked,
    /// Every line so far is signed and verifies.
    Chained,
    /// No line so far is signed; the first one is at `CutPoint`.
    Unsigned(CutPoint),
}

impl Trust {
    /// The trust after one more non-blank line, number `line`: signed with the link it
    /// carries and the one it should, or not signed. A repair of it would start at `cut`.
    fn next(
        self,
        signed: Option<(Link, Link)>,
        line: usize,
        cut: CutPoint,
    ) -> Result<Trust, Unverified> {
        let refused = |how: String| Unverified { line, how, cut };
        match (self, signed) {
            (Trust::Unsigned(first), Some(_)) => Err(Unverified {
                line: first.line,
                how: format!(
                    "it carries no \"h\", but line {line} does: ralph's lines and others are \
                     mixed"
                ),
                cut: first,
            }),
            (_, Some((carried, expected))) if carried == expected => Ok(Trust::Chained),
            (_, Some(_)) => Err(refused(
                "its \"h\" does not match: the line was edited after ralph wrote it, or a line \
                 before it removed"
                    .into(),
            )),
            (Trust::Open, None) => Ok(Trust::Unsigned(cut)),
            (Trust::Unsigned(first), None) => Ok(Trust::Unsigned(first)),
            (Trust::Marked, None) => Err(refused(
                "it carries no \"h\", though ralph signed this file before (the marker \
                 plan.jsonl.chain is beside it)"
                    .into(),
            )),
            (Trust::Chained, None) => Err(refused(
                "it carries no \"h\", so it was added by someone else".into(),
            )),
        }
    }
}

impl Unverified {
    fn error(self, path: &Path) -> StoreError {
        StoreError::NotWritten {
            path: path.to_path_buf(),
            line: self.line,
            how: self.how,
        }
    }
}

impl PlanLog {
    fn empty() -> PlanLog {
        PlanLog {
            file: None,
            board: Board::new(),
            lines: 0,
            end: 0,
            tail: Tail::Clean,
            seen: None,
            last: None,
            legacy: false,
            marked: false,
        }
    }

    /// Reads and checks the whole file (a missing one is an empty board); writes nothing.
    /// Returns a note if a torn tail was dropped or an earlier ralph's file adopted.
    fn read(path: &Path) -> Result<(PlanLog, Option<String>), StoreError> {
        PlanLog::scan(path).map_err(|e| match e {
            ReadError::Store(e) => e,
            ReadError::Unverified(bad) => bad.error(path),
        })
    }

    /// [`read`](Self::read), telling a line that does not verify apart, for a repair.
    fn scan(path: &Path) -> Result<(PlanLog, Option<String>), ReadError> {
        let marked = marker_path(path)
            .try_exists()
            .map_err(|e| io_error(&marker_path(path), e))?;
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok((
                    PlanLog {
                        marked,
                        ..PlanLog::empty()
                    },
                    None,
                ));
            }
            Err(e) => return Err(io_error(path, e).into()),
        };
        let meta = file.metadata().map_err(|e| io_error(path, e))?;
        let mut log = PlanLog {
            seen: Some(Seen::of(&meta)),
            marked,
            ..PlanLog::empty()
        };
        let mut trust = if marked { Trust::Marked } else { Trust::Open };
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut batch: Option<Batch> = None;
        let mut torn = None;
        for number in 1.. {
            line.clear();
            let len = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| io_error(path, e))?;
            if len == 0 {
                break;
            }
            let terminated = line.last() == Some(&b'\n');
            let here = log.cut_at(number);
            let signed = unsign(&mut line, log.last.as_ref());
            let parsed = parse_line(&line);
            // Only a write that a crash cut short leaves a line without its newline.
            if parsed.is_err() && !terminated {
                torn = Some(torn_note(number, len));
                break;
            }
            if !matches!(parsed, Ok(JsonLine::Blank)) {
                let cut = batch.as_ref().map_or(here, |open| open.cut);
                trust = trust
                    .next(signed, number, cut)
                    .map_err(ReadError::Unverified)?;
                log.last = signed.map(|(carried, _)| carried);
            }
            let parsed = parsed.map_err(|message| malformed(path, number, message))?;
            log.take_line(parsed, &mut batch, here, len, terminated)
                .map_err(|message| malformed(path, number, message))?;
        }
        Ok(log.ended(path, torn, batch, &trust))
    }

    /// Where line `number`, the next to read, starts.
    fn cut_at(&self, number: usize) -> CutPoint {
        CutPoint {
            offset: self.end,
            line: number,
            last: self.last,
        }
    }

    /// Takes in one parsed line of `len` bytes starting at `here`, into the open batch if
    /// there is one. Refuses a batch header inside a batch.
    fn take_line(
        &mut self,
        parsed: JsonLine,
        batch: &mut Option<Batch>,
        here: CutPoint,
        len: usize,
        terminated: bool,
    ) -> Result<(), String> {
        match (parsed, &mut *batch) {
            (JsonLine::Batch(_), Some(_)) => return Err("a batch header inside a batch".into()),
            (JsonLine::Batch(count), None) => {
                *batch = Some(Batch::new(count, here));
                self.keep_line(None, len, terminated);
                self.lines += 1;
            }
            (JsonLine::Record(change), Some(open)) => {
                open.changes.push(change);
                self.keep_line(None, len, terminated);
                self.lines += 1;
                if open.changes.len() == open.count {
                    self.board.apply_all(std::mem::take(&mut open.changes));
                    *batch = None;
                }
            }
            (JsonLine::Record(change), None) => self.keep_line(Some(change), len, terminated),
            (JsonLine::Blank, _) => self.keep_line(None, len, terminated),
        }
        Ok(())
    }

    /// The log once every line is read, with the note of what reading it found: a torn
    /// write or an incomplete batch cut off, a file of an earlier ralph's adopted.
    fn ended(
        mut self,
        path: &Path,
        torn: Option<String>,
        batch: Option<Batch>,
        trust: &Trust,
    ) -> (PlanLog, Option<String>) {
        let note = match (torn, batch) {
            (Some(note), open) => {
                self = self.torn(open.as_ref());
                Some(note)
            }
            // Fewer lines than the header promised: the write was cut after a newline.
            (None, Some(open)) => {
                self = self.torn(Some(&open));
                Some(format!(
                    "dropped an incomplete batch (line {}: {} of {} records) left by an \
                     interrupted write; it is cut off before the next write",
                    open.cut.line,
                    open.changes.len(),
                    open.count
                ))
            }
            (None, None) => None,
        };
        if let Trust::Unsigned(_) = trust {
            self.legacy = true;
            let adopted = adopted_note(path);
            return (
                self,
                Some(note.map_or(adopted.clone(), |n| adopted + "; " + &n)),
            );
        }
        (self, note)
    }

    /// Accounts for one good (or blank) line of `len` bytes.
    fn keep_line(&mut self, change: Option<Change>, len: usize, terminated: bool) {
        if let Some(change) = change {
            self.board.apply(change);
            self.lines += 1;
        }
        self.end += len as u64;
        self.tail = if terminated {
            Tail::Clean
        } else {
            Tail::Unterminated
        };
    }

    /// Marks the file as ending in a torn write, which starts at the open batch if any.
    fn torn(mut self, batch: Option<&Batch>) -> PlanLog {
        if let Some(open) = batch {
            self.end = open.cut.offset;
            self.last = open.cut.last;
        }
        self.tail = Tail::Torn;
        self
    }

    fn should_compact(&self) -> bool {
        let live = live_records(&self.board);
        self.lines.saturating_sub(live) > MIN_SUPERSEDED.max(2 * live)
    }

    /// Refuses to write when the file is not the one this log last read or wrote: deleted,
    /// replaced, truncated, grown or rewritten in place by someone else.
    fn check_unchanged(&self, path: &Path) -> Result<(), StoreError> {
        let now = Seen::at(path).map_err(|e| io_error(path, e))?;
        match seen::change(self.seen, now) {
            None => Ok(()),
            Some(how) => Err(StoreError::Changed {
                path: path.to_path_buf(),
                how,
            }),
        }
    }

    /// Appends `bytes` (whole signed lines, the last linked `last`) with one write, then
    /// fsyncs; the first write creates the file.
    fn append(
        &mut self,
        path: &Path,
        mut bytes: Vec<u8>,
        last: Option<Link>,
    ) -> Result<(), StoreError> {
        let io = |e| io_error(path, e);
        let file = match self.file.take() {
            Some(file) => file,
            None => {
                if self.seen.is_none() {
                    // The first write of a new file: its directory may not exist yet.
                    let dir = atomic::dir_of(path);
                    crate::files::own::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
                    atomic::remove_stale_temps(path);
                }
                crate::files::journal::open_readable(path).map_err(io)?
            }
        };
        let file = self.file.insert(file);
        match self.tail {
            Tail::Clean => {}
            Tail::Unterminated => bytes.insert(0, b'\n'),
            Tail::Torn => crate::files::journal::cut(file, self.end).map_err(io)?,
        }
        file.write_all(&bytes).map_err(io)?;
        file.sync_data().map_err(io)?;
        self.end += bytes.len() as u64;
        self.tail = Tail::Clean;
        self.last = last;
        // What this write left is what the next write must find: only someone else's write
        // changes it.
        self.seen = Some(Seen::of(&file.metadata().map_err(io)?));
        Ok(())
    }

    /// Replaces the file with the board's snapshot, its chain started afresh.
    fn compact(&mut self, path: &Path) -> Result<(), StoreError> {
        let snapshot = self.board.snapshot();
        let (bytes, last) = encode_lines(&snapshot, None).map_err(|source| StoreError::Encode {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = atomic::dir_of(path);
        crate::files::own::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        atomic::remove_stale_temps(path);
        atomic::replace(path, &bytes).map_err(|e| io_error(path, e))?;
        // The old handle still points at the replaced file; appends must go to the new one.
        let file = crate::files::journal::open_readable(path).map_err(|e| io_error(path, e))?;
        self.seen = Some(Seen::of(&file.metadata().map_err(|e| io_error(path, e))?));
        self.file = Some(file);
        self.lines = snapshot.len();
        self.end = bytes.len() as u64;
        self.tail = Tail::Clean;
        self.last = last;
        self.legacy = false;
        Ok(())
    }

    /// Creates the marker after the first signed write: from then on an unsigned file is
    /// refused, not adopted. Written after the lines, so that a crash between the two
    /// leaves a signed file without a marker (which loads), never the other way round.
    fn mark(&mut self, path: &Path) -> Result<(), StoreError> {
        if !self.marked {
            write_marker(path)?;
            self.marked = true;
        }
        Ok(())
    }
}

/// What one line of the file holds.
#[derive(Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per line read, consumed at once
enum JsonLine {
    Blank,
    Batch(usize),
    Record(Change),
}

/// The header of a multi-change persist: `{"t":"batch","n":3}`.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchHeader {
    t: String,
    n: usize,
}

impl BatchHeader {
    const TAG: &str = "batch";

    fn new(n: usize) -> Self {
        BatchHeader {
            t: Self::TAG.to_owned(),
            n,
        }
    }
}

/// A batch being read: its records are applied only once all have been read.
struct Batch {
    count: usize,
    changes: Vec<Change>,
    /// Where its header is: where a torn batch is cut off and a repair starts.
    cut: CutPoint,
}

impl Batch {
    fn new(count: usize, cut: CutPoint) -> Self {
        Batch {
            count,
            changes: Vec::with_capacity(count.min(4096)),
            cut,
        }
    }
}

/// Takes a signed line's link off, leaving in `line` the object it was signed as, and
/// returns the link it carries with the one it should carry after `prev`; `None` (leaving
/// the line as it is) when it carries none.
fn unsign(line: &mut Vec<u8>, prev: Option<&Link>) -> Option<(Link, Link)> {
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    let (head, carried) = chain::split(content)?;
    let (len, expected) = (head.len(), Link::of(prev, head));
    line.truncate(len);
    line.push(b'}');
    Some((carried, expected))
}

/// A line's record or batch header, or what is wrong with it.
fn parse_line(line: &[u8]) -> Result<JsonLine, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Ok(JsonLine::Blank);
    }
    if text.contains(r#""batch""#)
        && let Ok(header) = serde_json::from_str::<BatchHeader>(text)
        && header.t == BatchHeader::TAG
    {
        return match header.n {
            0 => Err("a batch header with no records".into()),
            n => Ok(JsonLine::Batch(n)),
        };
    }
    serde_json::from_str(text)
        .map(JsonLine::Record)
        .map_err(|e| format!("not a plan record: {e}"))
}

fn malformed(path: &Path, line: usize, message: String) -> StoreError {
    StoreError::Malformed {
        path: path.to_path_buf(),
        line,
        message,
    }
}

fn torn_note(line: usize, len: usize) -> String {
    format!(
        "dropped a torn final line (line {line}, {len} bytes without a newline) left by an \
         interrupted write; it is cut off before the next write"
    )
}

fn adopted_note(path: &Path) -> String {
    format!(
        "adopted {}: no line carries ralph's chain (\"h\"), as an earlier ralph or a person \
         wrote it; the next write signs every line, and from then on a line without it is \
         refused",
        path.display()
    )
}

/// The changes as signed lines after the line linked `prev`, ready for one write; several
/// changes get a batch header. Returns them with the last line's link.
fn encode(
    changes: &[Change],
    prev: Option<&Link>,
) -> Result<(Vec<u8>, Option<Link>), serde_json::Error> {
    let mut bytes = Vec::new();
    let mut last = prev.copied();
    if changes.len() > 1 {
        last = Some(write_signed(
            &mut bytes,
            &BatchHeader::new(changes.len()),
            last,
        )?);
    }
    for change in changes {
        last = Some(write_signed(&mut bytes, change, last)?);
    }
    Ok((bytes, last))
}

/// The changes as bare signed lines (a snapshot needs no header: it replaces the file
/// atomically).
fn encode_lines(
    changes: &[Change],
    prev: Option<&Link>,
) -> Result<(Vec<u8>, Option<Link>), serde_json::Error> {
    let mut bytes = Vec::new();
    let mut last = prev.copied();
    for change in changes {
        last = Some(write_signed(&mut bytes, change, last)?);
    }
    Ok((bytes, last))
}

/// Writes `value` as one signed line after the line linked `prev`; returns its link.
fn write_signed(
    out: &mut Vec<u8>,
    value: &impl serde::Serialize,
    prev: Option<Link>,
) -> Result<Link, serde_json::Error> {
    let start = out.len();
    serde_json::to_writer(&mut *out, value)?;
    let link = chain::sign(out, start, prev.as_ref()).ok_or_else(|| {
        <serde_json::Error as serde::ser::Error>::custom("the record is not a JSON object")
    })?;
    out.push(b'\n');
    Ok(link)
}

/// How many lines [`Board::snapshot`] would write, without building it.
fn live_records(board: &Board) -> usize {
    board.tasks.len() + board.issues.len() + 1 + usize::from(board.config.is_some())
}

/// `plan.jsonl.chain`: the marker beside `path` that says its lines are signed.
fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".chain");
    PathBuf::from(name)
}

/// What the marker says: the chain's version, and what it is.
const MARKER: &str = "ralph chain 1: every line of the file beside this one ends in \"h\", the \
                      first 32 hex digits of SHA-256 over the previous line's h, a newline and \
                      the line without its h\n";

fn write_marker(path: &Path) -> Result<(), StoreError> {
    let marker = marker_path(path);
    atomic::replace(&marker, MARKER.as_bytes()).map_err(|e| io_error(&marker, e))
}

fn io_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only ever assigned whole, so a panic cannot leave it half-written.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;
    use crate::model::Task;
    use std::fs;

    fn task(id: &str) -> Change {
        Change::Task(Task::new(id, "x"))
    }

    #[test]
    fn blank_lines_are_skipped_and_bad_ones_explained() {
        assert_eq!(parse_line(b"  \r\n").unwrap(), JsonLine::Blank);
        assert!(
            parse_line(b"{\"t\":\"task\"}\n")
                .unwrap_err()
                .contains("not a plan record")
        );
        assert!(parse_line(b"\xff\n").unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn compaction_waits_for_max_of_floor_and_twice_live() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = PlanLog::read(&dir.path().join("plan.jsonl")).unwrap();
        log.board
            .apply_all((0..10).map(|i| task(&format!("t-{i}"))));
        let live = live_records(&log.board);
        log.lines = live + MIN_SUPERSEDED;
        assert!(!log.should_compact());
        log.lines += 1;
        assert!(log.should_compact());

        log.board
            .apply_all((0..1000).map(|i| task(&format!("u-{i}"))));
        let live = live_records(&log.board);
        log.lines = 3 * live;
        assert!(!log.should_compact());
        log.lines += 1;
        assert!(log.should_compact());
    }

    #[test]
    fn live_records_match_snapshot() {
        let mut board = Board::new();
        assert_eq!(live_records(&board), board.snapshot().len());
        board.apply(task("t-1"));
        board.apply(Change::Config(serde_json::Map::new()));
        assert_eq!(live_records(&board), board.snapshot().len());
    }

    #[test]
    fn unterminated_good_line_gets_its_newline_on_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.jsonl");
        let (line, _) = encode(&[task("t-1")], None).unwrap();
        fs::write(&path, line.strip_suffix(b"\n").unwrap()).unwrap();
        let (mut log, note) = PlanLog::read(&path).unwrap();
        assert_eq!((note, log.tail, log.lines), (None, Tail::Unterminated, 1));
        let (bytes, last) = encode(&[task("t-2")], log.last.as_ref()).unwrap();
        log.append(&path, bytes, last).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains("\"t-2\",\"name\":\"x\",\"s\":\"p\",\"h\":"));
        assert_eq!(
            PlanLog::read(&path).unwrap().0.board.tasks.len(),
            2,
            "still verifies"
        );
    }

    #[test]
    fn a_batch_is_signed_line_by_line_and_its_header_too() {
        let (bytes, last) = encode(&[task("t-1"), task("t-2")], None).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with(r#"{"t":"batch","n":2,"h":""#),
            "{text}"
        );
        let mut prev = None;
        for line in &lines {
            let (head, link) = chain::split(line.as_bytes()).expect("signed");
            assert_eq!(Link::of(prev.as_ref(), head), link);
            prev = Some(link);
        }
        assert_eq!(prev, last);
    }
}

#[cfg(test)]
#[path = "jsonl_props.rs"]
mod props;

#[path = "jsonl_repair.rs"]
mod repair;
