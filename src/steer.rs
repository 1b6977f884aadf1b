//! Steering a run from outside it: `ralph tell`, `ralph answer` and `ralph stop` from
//! another terminal, and the signals a terminal or a CI runner sends.
//!
//! A steering call never waits for the workspace's lock the run holds: it posts a message
//! to the workspace's inbox (`.ralph/inbox/`), which the run reads between steps. Each call
//! refuses to run inside a run (in an agent, a gate or a hook, which carry the run's cookie):
//! steering a run is a person's, not the agent's.
//!
//! ```no_run
//! # fn main() -> Result<(), ralph::Error> {
//! // In another process than the run's, while it runs on `.`:
//! let run = ralph::steer::stop(".")?;
//! println!("asked {run} to stop once its agents and gates are done");
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use crate::process::StopToken;
use crate::runtime::error::{EditError, Error};
use crate::runtime::guidance::{Journal, MAX_TEXT, Told};
use crate::runtime::inbox::{Inbox, InboxMessage};
use crate::runtime::questions::{Answered, Questions};
use crate::runtime::workspace;

/// Asks the run in progress on `workspace` to stop gently: the agent runs and gates in
/// flight finish and their results are recorded, then the run ends with its stopped outcome
/// ([`Outcome::Stopped`](crate::Outcome::Stopped), exit 4 from the `ralph` command), its
/// state saved for the next run to resume. A thread's loop ends Paused. Returns the run's
/// lock note (`pid N, since T`).
///
/// To stop at once instead: [`stop_now`], or a signal ([`listen_for_signals`]).
///
/// # Errors
///
/// [`Error::NoRunInProgress`] when no run holds the workspace (a stop is never queued);
/// [`Error::InsideARun`] when called from an agent's, a gate's or a hook's process;
/// [`Error::Io`] when the inbox cannot be written.
pub fn stop(workspace: impl AsRef<Path>) -> Result<String, Error> {
    let workspace = workspace.as_ref();
    refuse_inside_a_run("ralph stop")?;
    let run = in_progress(workspace)?;
    let at = jiff::Timestamp::now().to_string();
    post(
        workspace,
        &InboxMessage::Stop {
            run: run.clone(),
            at,
        },
    )?;
    Ok(run)
}

/// The run in progress on `workspace` (its lock note, `pid N, since T`) and whether a person
/// asked it to stop ([`stop`]); `None` when no run holds the workspace. What `ralph status`
/// shows.
///
/// # Errors
///
/// [`Error::Io`] when a run holds the workspace but its lock note cannot be read.
pub fn in_progress_run(workspace: impl AsRef<Path>) -> Result<Option<(String, bool)>, Error> {
    let workspace = workspace.as_ref();
    match in_progress(workspace) {
        Ok(run) => {
            let asked = Inbox::in_state(&workspace::state_dir(workspace)).has_stop(&run);
            Ok(Some((run, asked)))
        }
        Err(Error::NoRunInProgress { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Stops the run in progress on `workspace` at once, as SIGTERM does (`ralph stop
/// --now`): the running agent or gate is stopped (the grace, then SIGKILL and the sweep),
/// the state is saved, and the run returns its interrupted outcome (a thread is Paused).
/// Returns the run's lock note.
///
/// # Errors
///
/// As [`stop`]; [`Error::Io`] when the run's process cannot be signalled.
pub fn stop_now(workspace: impl AsRef<Path>) -> Result<String, Error> {
    let workspace = workspace.as_ref();
    refuse_inside_a_run("ralph stop --now")?;
    let run = in_progress(workspace)?;
    let io = |source| Error::Io {
        path: workspace.to_path_buf(),
        source,
    };
    // The note is `pid N, since T`, written by the process that holds the lock.
    let pid = run
        .strip_prefix("pid ")
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.parse::<i32>().ok())
        .ok_or_else(|| {
            io(std::io::Error::other(format!(
                "no pid in the lock note {run:?}"
            )))
        })?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(|errno| io(std::io::Error::from(errno)))?;
    Ok(run)
}

/// Stops a run by a signal, the same way in every mode: SIGINT (Ctrl+C), SIGTERM (what CI
/// runners, `timeout` and `kill` send) and SIGHUP (a closed terminal).
///
/// The first signal stops `stop` (the run's [`StopToken`], which then names the signal):
/// the running agent or gate stops its processes (SIGTERM, the grace, SIGKILL, then the
/// sweep of everything they started), the state is saved, and the run returns its
/// interrupted outcome (a thread is Paused); `on_first` gets the signal's name, to tell the
/// person what happens now. An attempt cut short this way is not counted against the task's
/// retries. A second signal does not wait out the grace: it kills at once every process
/// the runs on `workspace` started, and exits the process with the first signal's exit code.
/// Call it inside a tokio runtime.
///
/// ```no_run
/// use ralph::{FakeAgent, Ralph};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ralph = Ralph::builder().workspace(".").agent(FakeAgent::new()).build()?;
/// ralph::steer::listen_for_signals(ralph.workspace(), ralph.stop_token(), |signal| {
///     eprintln!("{signal}: stopping the running agent or gate and saving the state…");
/// })?;
/// let outcome = ralph.resume().await?;
/// let code = ralph.stop_token().signal_exit_code().map_or(outcome.exit_code(), i32::from);
/// std::process::exit(code);
/// # }
/// ```
///
/// # Errors
///
/// When a signal handler cannot be installed.
pub fn listen_for_signals(
    workspace: &Path,
    stop: StopToken,
    on_first: impl Fn(&'static str) + Send + 'static,
) -> std::io::Result<()> {
    crate::runtime::interrupt::listen(workspace, stop, on_first)
}

/// Gives the agents of `workspace` a person's guidance (`ralph tell`), while a run is in
/// progress or between runs: it is the last section of the prompt of every agent call of its
/// `scope` from the next one on (the subject of the calls: a task's id, `t-3`; in build mode
/// a spec's id, for its planner and verifier, or a task's, for that task of any spec; a
/// thread's id; `None`
/// for every call), until it is [withdrawn](withdraw) or its scope ends (the task accepted,
/// the thread Done or Abandoned, the workspace's spec complete). `from` names who said it
/// (default: `$USER`). Returns its id, `g-<n>`.
///
/// ```no_run
/// # fn main() -> Result<(), ralph::Error> {
/// let id = ralph::steer::tell(".", "Keep the public API unchanged.", None, Some("ana"))?;
/// ralph::steer::tell(".", "Use the existing parser.", Some("t-3"), None)?;
/// ralph::steer::withdraw(".", &id)?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`Error::Edit`] with [`EditError::Invalid`] for an empty
/// text, one over 16 KiB, or one holding a control character; [`Error::InsideARun`] from an
/// agent's, a gate's or a hook's process; [`Error::Io`] when the inbox cannot be written.
pub fn tell(
    workspace: impl AsRef<Path>,
    text: &str,
    scope: Option<&str>,
    from: Option<&str>,
) -> Result<String, Error> {
    let workspace = workspace.as_ref();
    refuse_inside_a_run("ralph tell")?;
    let text = checked_text("tell", text)?;
    let state = workspace::state_dir(workspace);
    let _posting = posting(workspace)?;
    let id = Journal::in_state(&state).standing(true).next_id();
    let told = Told {
        id: id.clone(),
        text,
        from: who(from),
        at: jiff::Timestamp::now().to_string(),
        scope: scope.map(str::to_owned),
    };
    post(workspace, &InboxMessage::Tell(told))?;
    Ok(id)
}

/// Withdraws the guidance `id` ([`tell`]): no prompt holds it from the next agent call on.
///
/// # Errors
///
/// [`Error::Edit`] with [`EditError::Invalid`] when no guidance
/// `id` is in force; as [`tell`] otherwise.
pub fn withdraw(workspace: impl AsRef<Path>, id: &str) -> Result<(), Error> {
    let workspace = workspace.as_ref();
    refuse_inside_a_run("ralph tell --withdraw")?;
    let _posting = posting(workspace)?;
    let standing = Journal::in_state(&workspace::state_dir(workspace)).standing(true);
    if !standing.holds(id) {
        let known: Vec<&str> = standing.told.iter().map(|t| t.id.as_str()).collect();
        return Err(EditError::Invalid {
            edit: "tell --withdraw",
            field: "id".into(),
            reason: format!(
                "{id:?} names no guidance in force (in force: {})",
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ),
        }
        .into());
    }
    let at = jiff::Timestamp::now().to_string();
    post(workspace, &InboxMessage::Withdraw { id: id.into(), at })
}

/// Answers the question an agent asked about `subject` (`ralph answer t-3 "TEXT"`): a task
/// (`t-3`; in build mode `SPEC/t-3`, or a spec's id for its planner), an issue or a thread.
/// The answer reaches the next agent call of that subject, in a run in progress (without a
/// restart) or the next one, as a section of its prompt with the question; where the
/// asking attempt's changes were set aside, they are given back to it. `from` names who
/// answered (default: `$USER`). Returns the question's id, `q-<n>`.
///
/// ```no_run
/// # fn main() -> Result<(), ralph::Error> {
/// for (subject, question, _age) in ralph::steer::questions(".") {
///     println!("{subject} asks: {question}");
/// }
/// ralph::steer::answer(".", "t-3", "Use SQLite; we ship one binary.", Some("ana"))?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`Error::Edit`] with [`EditError::Invalid`] when no question of `subject` waits for an
/// answer (naming those that do), or for an empty text, one over 16 KiB, or one holding a
/// control character; [`Error::InsideARun`] from an agent's, a gate's or a hook's process;
/// [`Error::Io`] when the inbox cannot be written.
pub fn answer(
    workspace: impl AsRef<Path>,
    subject: &str,
    text: &str,
    from: Option<&str>,
) -> Result<String, Error> {
    let workspace = workspace.as_ref();
    refuse_inside_a_run("ralph answer")?;
    let text = checked_text("answer", text)?;
    let _posting = posting(workspace)?;
    let open = Questions::in_state(&workspace::state_dir(workspace)).open(true);
    let Some(question) = open.waiting_on(subject) else {
        let waiting: Vec<&str> = open
            .unanswered()
            .map(|q| q.asked.subject.as_str())
            .collect();
        return Err(EditError::Invalid {
            edit: "answer",
            field: "subject".into(),
            reason: format!(
                "no question of {subject:?} waits for an answer (waiting: {})",
                if waiting.is_empty() {
                    "none".into()
                } else {
                    waiting.join(", ")
                }
            ),
        }
        .into());
    };
    let id = question.asked.id.clone();
    let answered = Answered {
        id: id.clone(),
        subject: subject.to_owned(),
        text,
        from: who(from),
        at: jiff::Timestamp::now().to_string(),
    };
    post(workspace, &InboxMessage::Answer(answered))?;
    Ok(id)
}

/// The questions on `workspace` that wait for a person's answer, oldest first: the subject,
/// the question, and how long it has waited (`12m`). What `ralph status` lists.
pub fn questions(workspace: impl AsRef<Path>) -> Vec<(String, String, String)> {
    Questions::in_state(&workspace::state_dir(workspace.as_ref()))
        .open(true)
        .unanswered()
        .map(|q| (q.asked.subject.clone(), q.asked.question.clone(), q.age()))
        .collect()
}

/// The guidance in force on `workspace`, oldest first, one line each (`g-1 (for t-3, from
/// ana, 2026-…): text`): what `ralph status` lists, a run's and what waits for the next.
pub fn guidance(workspace: impl AsRef<Path>) -> Vec<String> {
    Journal::in_state(&workspace::state_dir(workspace.as_ref()))
        .standing(true)
        .told
        .iter()
        .map(Told::line)
        .collect()
}

/// A handle that steers the run on one workspace, or one subject of it, from anywhere:
/// another task of the process that runs it, another process, between runs. What
/// [`Ralph::steering`](crate::Ralph::steering) hands out for its workspace and
/// [`Thread::steering`](crate::thread::Thread::steering) for one thread; [`about`](Self::about)
/// narrows it to a task, an issue or a spec. Each call is the free function of this module
/// of the same name, with the handle's workspace, subject and author: it posts to the
/// workspace's inbox, which the run reads between steps, and never waits for the run's lock.
///
/// ```no_run
/// use ralph::{FakeAgent, Ralph};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ralph = Ralph::builder().workspace(".").agent(FakeAgent::new()).build()?;
/// let steering = ralph.steering().from("ana");
/// let person = tokio::spawn(async move {
///     steering.tell("Keep the public API unchanged.")?;
///     for (subject, question, _age) in steering.questions() {
///         println!("{subject} asks: {question}");
///         steering.about(&subject).answer("Use SQLite; we ship one binary.")?;
///     }
///     steering.stop()
/// });
/// let outcome = ralph.resume().await?;
/// person.await??;
/// println!("{outcome}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Steering {
    workspace: std::path::PathBuf,
    subject: Option<String>,
    from: Option<String>,
}

impl Steering {
    /// A handle on the runs of `workspace`, for every subject.
    pub fn new(workspace: impl Into<std::path::PathBuf>) -> Self {
        Steering {
            workspace: workspace.into(),
            subject: None,
            from: None,
        }
    }

    /// The same handle narrowed to one subject: a task (`t-3`; in build mode `SPEC/t-3`), an
    /// issue, a spec's id (its planner and verifier) or a thread's id.
    #[must_use]
    pub fn about(&self, subject: &str) -> Self {
        Steering {
            subject: Some(subject.to_owned()),
            ..self.clone()
        }
    }

    /// The same handle, saying who speaks (default: `$USER`).
    #[must_use]
    pub fn from(mut self, name: &str) -> Self {
        self.from = Some(name.to_owned());
        self
    }

    /// The workspace it steers.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The subject it is narrowed to, if any.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// Gives guidance to the agent calls of the handle's subject (every call without one);
    /// returns its id. As [`tell`].
    ///
    /// # Errors
    ///
    /// As [`tell`].
    pub fn tell(&self, text: &str) -> Result<String, Error> {
        tell(
            &self.workspace,
            text,
            self.subject.as_deref(),
            self.from.as_deref(),
        )
    }

    /// Withdraws the guidance `id`. As [`withdraw`].
    ///
    /// # Errors
    ///
    /// As [`withdraw`].
    pub fn withdraw(&self, id: &str) -> Result<(), Error> {
        withdraw(&self.workspace, id)
    }

    /// Answers the question of the handle's subject; returns the question's id. A handle
    /// without a subject answers the one question that waits, and is refused when none or
    /// several do. As [`answer`].
    ///
    /// # Errors
    ///
    /// As [`answer`]; [`Error::Edit`] with [`EditError::Invalid`] for a handle without a
    /// subject when not exactly one question waits.
    pub fn answer(&self, text: &str) -> Result<String, Error> {
        let subject = match &self.subject {
            Some(subject) => subject.clone(),
            None => {
                let mut waiting: Vec<String> = questions(&self.workspace)
                    .into_iter()
                    .map(|(subject, _, _)| subject)
                    .collect();
                waiting.dedup();
                match waiting.as_slice() {
                    [one] => one.clone(),
                    _ => {
                        return Err(EditError::Invalid {
                            edit: "answer",
                            field: "subject".into(),
                            reason: format!(
                                "{} questions wait: name the one to answer with `about` (waiting: {})",
                                waiting.len(),
                                if waiting.is_empty() {
                                    "none".into()
                                } else {
                                    waiting.join(", ")
                                }
                            ),
                        }
                        .into());
                    }
                }
            }
        };
        answer(&self.workspace, &subject, text, self.from.as_deref())
    }

    /// The questions that wait for an answer: the handle's subject's, or every one. As
    /// [`questions`].
    pub fn questions(&self) -> Vec<(String, String, String)> {
        let mut all = questions(&self.workspace);
        if let Some(subject) = &self.subject {
            all.retain(|(of, _, _)| of == subject);
        }
        all
    }

    /// The guidance in force on the workspace, one line each. As [`guidance`].
    pub fn guidance(&self) -> Vec<String> {
        guidance(&self.workspace)
    }

    /// Asks the run in progress on the workspace to stop gently (a thread's loop ends
    /// Paused). As [`stop`].
    ///
    /// # Errors
    ///
    /// As [`stop`].
    pub fn stop(&self) -> Result<String, Error> {
        stop(&self.workspace)
    }

    /// Stops the run in progress on the workspace at once. As [`stop_now`].
    ///
    /// # Errors
    ///
    /// As [`stop_now`].
    pub fn stop_now(&self) -> Result<String, Error> {
        stop_now(&self.workspace)
    }
}

/// Who said it: `from`, else the user's login name.
fn who(from: Option<&str>) -> String {
    from.map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "a person".into())
}

/// A person's `text` for `edit` (`tell`, `answer`), trimmed; refused when empty, too long,
/// or holding a control character.
fn checked_text(edit: &'static str, text: &str) -> Result<String, Error> {
    let invalid = |reason: String| EditError::Invalid {
        edit,
        field: "text".into(),
        reason,
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(invalid("is empty".into()).into());
    }
    if text.len() > MAX_TEXT {
        return Err(invalid(format!("is {} bytes, more than {MAX_TEXT}", text.len())).into());
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return Err(invalid(format!("holds the control character {c:?}")).into());
    }
    Ok(text.to_owned())
}

/// Holds the inbox for one poster at a time, so two `tell`s never take the same id.
fn posting(workspace: &Path) -> Result<crate::files::FolderLock, Error> {
    let state = workspace::state_dir(workspace);
    let io = |source| Error::Io {
        path: state.clone(),
        source,
    };
    crate::files::own::create_dir_all(&state).map_err(io)?;
    crate::files::lock::FolderLock::wait(&state).map_err(io)
}

fn post(workspace: &Path, message: &InboxMessage) -> Result<(), Error> {
    let state = workspace::state_dir(workspace);
    Inbox::in_state(&state)
        .post(message)
        .map(drop)
        .map_err(|source| Error::Io {
            path: state,
            source,
        })
}

/// The lock note of the run holding `workspace`.
pub(crate) fn in_progress(workspace: &Path) -> Result<String, Error> {
    match workspace::running(workspace) {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(Error::NoRunInProgress {
            workspace: workspace.to_path_buf(),
        }),
        Err(source) => Err(Error::Io {
            path: workspace.to_path_buf(),
            source,
        }),
    }
}

/// Refuses `command` in a process of a run: every agent, gate and hook a run starts carries
/// its cookie, and so does everything they start.
fn refuse_inside_a_run(command: &str) -> Result<(), Error> {
    let cookie = crate::process::COOKIE_VAR;
    match std::env::var_os(cookie) {
        Some(_) => Err(Error::InsideARun {
            command: command.into(),
            cookie: cookie.into(),
        }),
        None => Ok(()),
    }
}
