//! The threads of a workspace as files: creating, loading and listing them, their spec
//! revisions, the active thread, and every save, each move checked against the table of
//! [`phase`](super::phase).

use std::path::Path;

use super::phase::{self, Phase, PhaseKind};
use super::record::{self, ThreadRecord};
use super::spec::ThreadSpec;
use super::{ThreadError, Threads};

impl Threads {
    /// Creates a thread in Drafting with `spec` as revision 1, and makes it the active one.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] when the files cannot be written.
    pub fn create(&self, title: &str, spec: &str) -> Result<ThreadRecord, ThreadError> {
        let id = format!("{}-{}", self.list()?.len() + 1, slug(title));
        let mut record = ThreadRecord {
            schema_version: record::SCHEMA_VERSION,
            id: id.clone(),
            title: title.to_owned(),
            phase: Phase::Drafting,
            spec_version: 0,
            current_run_id: None,
            runner_pid: None,
            runs: 0,
            baseline: None,
            branch: None,
            config: self.run_config.clone(),
            iteration_limit: 0,
            attempts: Vec::new(),
            closest: None,
            stuck: None,
            assessment: None,
            feedback: Vec::new(),
            approved_tree: None,
            current_agent: None,
            agent_reason: None,
            transient_failures: 0,
            rate_limited_until: None,
            updated_at: String::new(),
            quick: self.quick,
        };
        self.write_spec(&mut record, spec)?;
        self.save(&mut record)?;
        self.set_active(&id)?;
        // A new thread: what an earlier one of the same id spent no longer counts.
        self.budget(&id)?
            .ledger()
            .reset()
            .map_err(super::call::ledger_error)?;
        Ok(record)
    }

    /// The thread `id`, to run its lifecycle: see [`Thread`](super::Thread). Nothing is read
    /// yet; a thread that does not exist is refused by its first call
    /// ([`ThreadError::NotFound`]).
    pub fn thread(&self, id: &str) -> super::Thread<'_> {
        super::Thread::new(self, id)
    }

    /// Loads thread `id`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::NotFound`], or a corrupt or newer `thread.json` (naming the file).
    pub fn get(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let path = self.record_path(id);
        if !path.exists() {
            return Err(ThreadError::NotFound(
                id.to_owned(),
                self.root.join("threads"),
            ));
        }
        let (record, unsealed) = record::load_checked(&path)?;
        if unsealed {
            // Written by an earlier ralph: taken as it is, and sealed at its next save.
            self.emitter.emit(&crate::event::Event::StateRepaired {
                note: format!(
                    "adopted {} (written by an earlier ralph, without a seal); its next save seals it",
                    path.display()
                ),
            });
        }
        self.saw(&path)?;
        Ok(record)
    }

    /// The ids of every thread, sorted.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] when `.ralph/threads` cannot be listed.
    pub fn list(&self) -> Result<Vec<String>, ThreadError> {
        let dir = self.root.join("threads");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ThreadError::Io {
                    path: dir,
                    error: source,
                });
            }
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("thread.json").exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The active thread's id (`.ralph/active_thread`), if one is set.
    pub fn active(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("active_thread")).ok()?;
        let id = text.trim();
        (!id.is_empty()).then(|| id.to_owned())
    }

    /// Makes `id` the active thread.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming `active_thread`.
    pub fn set_active(&self, id: &str) -> Result<(), ThreadError> {
        let path = self.root.join("active_thread");
        crate::files::atomic::replace(&path, format!("{id}\n").as_bytes())
            .map_err(|error| ThreadError::Io { path, error })
    }

    /// The text of the spec revision in force.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming the file.
    pub fn spec_text(&self, record: &ThreadRecord) -> Result<String, ThreadError> {
        let path = self.spec_path(&record.id, record.spec_version);
        std::fs::read_to_string(&path).map_err(|error| ThreadError::Io { path, error })
    }

    /// Why `start` would refuse the spec revision in force, in the words of its preflight
    /// (no promise tag, no acceptance criteria, a criterion it cannot read, with the line);
    /// `None` when the spec would do. A draft may be finished later: this is for a warning.
    ///
    /// ```no_run
    /// # async fn demo(threads: ralph::thread::Threads) -> Result<(), ralph::thread::ThreadError> {
    /// let record = threads.get("t-1")?;
    /// if let Some(why) = threads.spec_refusal(&record)? {
    ///     eprintln!("`start` would refuse the spec: {why}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming the file, when the revision cannot be read.
    pub fn spec_refusal(&self, record: &ThreadRecord) -> Result<Option<String>, ThreadError> {
        let text = self.spec_text(record)?;
        Ok(ThreadSpec::parse(&text).err().map(|e| e.to_string()))
    }

    /// The thread's spec on record, as written and parsed: the loop and polish work from it.
    pub(super) fn spec_on_record(
        &self,
        record: &ThreadRecord,
    ) -> Result<(String, ThreadSpec), ThreadError> {
        let text = self.spec_text(record)?;
        let spec = ThreadSpec::parse(&text).map_err(|e| ThreadError::Corrupt {
            path: self.spec_path(&record.id, record.spec_version),
            message: e.to_string(),
        })?;
        Ok((text, spec))
    }

    /// Writes `text` as the next spec revision (revisions are never rewritten).
    pub(super) fn write_spec(
        &self,
        record: &mut ThreadRecord,
        text: &str,
    ) -> Result<(), ThreadError> {
        let version = record.spec_version + 1;
        let path = self.spec_path(&record.id, version);
        let io = |source| ThreadError::Io {
            path: path.clone(),
            error: source,
        };
        if let Some(dir) = path.parent() {
            crate::files::own::create_dir_all(dir).map_err(io)?;
        }
        // `create_new`: an existing revision is immutable, whatever the record says.
        crate::files::atomic::create_new(&path, text.as_bytes()).map_err(io)?;
        record.spec_version = version;
        Ok(())
    }

    /// Saves `record`, refusing when its `thread.json` was deleted, replaced or rewritten by
    /// someone else since this handle read or wrote it: a thread's state lost under a
    /// running loop stops the loop with an error naming the file.
    pub(super) fn save(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let path = self.record_path(&record.id);
        let io = |error| ThreadError::Io {
            path: path.clone(),
            error,
        };
        if let Some(how) = self.seen.change(&path).map_err(io)? {
            return Err(ThreadError::Changed { path, how });
        }
        record::save(&path, record)?;
        self.saw(&path)
    }

    pub(super) fn saw(&self, path: &Path) -> Result<(), ThreadError> {
        self.seen.saw(path).map_err(|error| ThreadError::Io {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Moves `record` to `to` if the table allows it, and saves. A new value of the same
    /// phase (the next iteration of Running) is an update, not a move.
    pub(super) fn advance(&self, record: &mut ThreadRecord, to: Phase) -> Result<(), ThreadError> {
        let from = record.phase.kind();
        if from != to.kind() {
            phase::check(from, to.kind()).map_err(|e| ThreadError::transition(&record.id, e))?;
        }
        record.phase = to;
        self.save(record)
    }

    /// Loads `id` and refuses unless it is in one of `allowed`; the error of a refused move
    /// names both phases.
    pub(super) fn load_for(&self, id: &str, to: PhaseKind) -> Result<ThreadRecord, ThreadError> {
        let record = self.get(id)?;
        phase::check(record.phase.kind(), to).map_err(|e| ThreadError::transition(id, e))?;
        Ok(record)
    }

    pub(super) fn wrong_phase(
        record: &ThreadRecord,
        action: &'static str,
        needed: &'static str,
    ) -> ThreadError {
        ThreadError::WrongPhase {
            id: record.id.clone(),
            phase: record.phase.kind(),
            action,
            needed,
        }
    }

    /// Loads `id` and refuses (naming both phases) unless it is in one of `from`: for calls
    /// that are one row of the table although the table has other rows into `to`.
    pub(super) fn only(
        &self,
        id: &str,
        from: &[PhaseKind],
        to: PhaseKind,
    ) -> Result<ThreadRecord, ThreadError> {
        let record = self.get(id)?;
        if from.contains(&record.phase.kind()) {
            Ok(record)
        } else {
            Err(transition(&record, to))
        }
    }

    pub(super) fn simple(&self, id: &str, to: Phase) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, to.kind())?;
        self.advance(&mut record, to)?;
        Ok(record)
    }
}

pub(super) fn transition(record: &ThreadRecord, to: PhaseKind) -> ThreadError {
    ThreadError::Transition {
        id: record.id.clone(),
        from: record.phase.kind(),
        to,
    }
}

/// `Add a greeting!` → `add-a-greeting` (at most 40 characters; `thread` if nothing is left).
fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "thread".to_owned()
    } else {
        out.to_owned()
    }
}
