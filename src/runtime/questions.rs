//! An agent's question for a person, and the person's answer (`ralph answer`).
//!
//! An agent that needs a decision ends its final answer with `<TASK_QUESTION
//! question="…">` (a structured role: its `question` field). Its pipeline records the
//! question here, in `.ralph/questions.jsonl`, and the subject (a task, a spec, a thread)
//! waits for a person: not failed, not counted against its retries. `ralph answer` posts the
//! answer to the inbox (see `inbox.rs`), so it reaches a run in progress without its lock;
//! the run takes it in here before its next step, and the next agent call of that subject
//! (of a role that may ask) gets the question and the answer as a section of its prompt,
//! just before a person's guidance. Once a call that got it gave a final answer, the
//! question is closed; a call cut short gets it again. An answer taken in twice (the run
//! died between the journal's append and the inbox's delete) is one: the journal is read by
//! question id.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::Error;
pub(crate) use super::inbox::Answered;
use super::inbox::{Inbox, InboxMessage, MAX_TEXT};
use super::logs::Emitter;
use crate::agent::Role;
use crate::event::Event;

/// The journal's file, in the state folder.
const JOURNAL: &str = "questions.jsonl";

/// A question an agent asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Asked {
    /// `q-<n>`.
    pub(crate) id: String,
    /// What it is about: a task (`t-3`; in build mode `spec/t-3` or a spec's id for its
    /// planner), a thread's id, or an issue (`i-2`).
    pub(crate) subject: String,
    /// The role of the call that asked (`build`, `planner`, …).
    pub(crate) role: String,
    /// The question.
    pub(crate) question: String,
    /// When (RFC 3339).
    pub(crate) at: String,
}

/// A line of the journal.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum QuestionLine {
    Asked(Asked),
    Answered(Answered),
    /// The answer reached an agent call that gave a final answer: closed.
    /// The CLI session of the run that asked the next question of `subject`, which the
    /// answer's call resumes (an agent that can resume sessions: Claude). Written by the
    /// call, before the pipeline records the question.
    Session {
        subject: String,
        session: String,
    },
    Given {
        id: String,
    },
}

/// One question and, once given, its answer.
#[derive(Clone, Debug)]
pub(crate) struct Question {
    pub(crate) asked: Asked,
    pub(crate) answer: Option<Answered>,
    /// The CLI session of the run that asked, when its agent reported one.
    pub(crate) session: Option<String>,
}

impl Question {
    /// The prompt's section that gives a question and its answer back to the agent.
    pub(crate) fn section(&self) -> String {
        let Some(answer) = &self.answer else {
            return String::new();
        };
        format!(
            "\n\n## Your question, answered\n\nAn earlier attempt at this stopped to ask a \
             person:\n\n> {}\n\n{} answered:\n\n{}\n",
            self.asked.question.replace('\n', "\n> "),
            answer.from,
            answer.text
        )
    }

    /// How long it has waited, for `ralph status`: `12m`, `3h 5m`.
    pub(crate) fn age(&self) -> String {
        let Ok(at) = self.asked.at.parse::<jiff::Timestamp>() else {
            return "?".into();
        };
        let secs = jiff::Timestamp::now()
            .duration_since(at)
            .as_secs()
            .max(0)
            .unsigned_abs();
        // Minutes are enough to say how long a person has been waited for.
        let rounded = std::time::Duration::from_secs(secs - secs % 60);
        match rounded.is_zero() {
            true => format!("{secs}s"),
            false => humantime::format_duration(rounded).to_string(),
        }
    }
}

/// The questions of a workspace: its journal, and the answers waiting in its inbox.
#[derive(Clone, Debug)]
pub(crate) struct Questions {
    state: PathBuf,
}

/// What a read of the journal found, by question id, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Open {
    /// Questions not closed: unanswered, or answered and not yet given.
    pub(crate) questions: Vec<Question>,
    /// The highest number of an id ever used.
    last: u64,
}

impl Open {
    /// The next free id, `q-<n>`.
    pub(crate) fn next_id(&self) -> String {
        format!("q-{}", self.last + 1)
    }

    /// The questions still waiting for an answer.
    pub(crate) fn unanswered(&self) -> impl Iterator<Item = &Question> {
        self.questions.iter().filter(|q| q.answer.is_none())
    }

    /// The question of `subject` that waits for an answer, if any.
    pub(crate) fn waiting_on(&self, subject: &str) -> Option<&Question> {
        self.unanswered().find(|q| q.asked.subject == subject)
    }

    /// The answered question of `subject` not yet given to an agent, if any.
    pub(crate) fn answered_for(&self, subject: &str) -> Option<&Question> {
        self.questions
            .iter()
            .find(|q| q.answer.is_some() && q.asked.subject == subject)
    }
}

impl Questions {
    /// The questions of the workspace whose state folder is `state` (`.ralph/`).
    pub(crate) fn in_state(state: &Path) -> Questions {
        Questions {
            state: state.to_path_buf(),
        }
    }

    fn path(&self) -> PathBuf {
        self.state.join(JOURNAL)
    }

    fn inbox(&self) -> Inbox {
        Inbox::in_state(&self.state)
    }

    /// The open questions: the journal's, and, with `pending`, the answers that wait in
    /// the inbox (for `ralph status` and `ralph answer`, which read without taking in).
    pub(crate) fn open(&self, pending: bool) -> Open {
        let mut lines = self.lines();
        if pending {
            lines.extend(
                self.inbox()
                    .read()
                    .into_iter()
                    .filter_map(|f| match f.message {
                        Ok(InboxMessage::Answer(answered)) => {
                            Some(QuestionLine::Answered(answered))
                        }
                        _ => None,
                    }),
            );
        }
        fold(lines)
    }

    /// Records a question `asked`, giving it the next id; returns that id.
    pub(crate) fn ask(&self, mut asked: Asked) -> io::Result<String> {
        asked.id = self.open(false).next_id();
        asked.question = bounded(&asked.question);
        let id = asked.id.clone();
        self.append(&QuestionLine::Asked(asked))?;
        Ok(id)
    }

    /// Takes the inbox's answers into the journal (each durably, then deleted from the
    /// inbox); returns the subjects answered. Only the run holding the workspace calls it.
    pub(crate) fn take_in(&self) -> io::Result<Vec<String>> {
        let inbox = self.inbox();
        let mut subjects = Vec::new();
        for found in inbox.read() {
            let Ok(InboxMessage::Answer(answered)) = &found.message else {
                continue;
            };
            subjects.push(answered.subject.clone());
            self.append(&QuestionLine::Answered(answered.clone()))?;
            inbox.remove(&found);
        }
        Ok(subjects)
    }

    /// The answered question a call about `subject` gets in its prompt, after taking in
    /// the inbox.
    pub(crate) fn for_call(&self, subject: &str) -> io::Result<Option<Question>> {
        self.take_in()?;
        Ok(self.open(false).answered_for(subject).cloned())
    }

    /// Notes `session`, the CLI session of a run about `subject` that ended with a
    /// question: the question recorded next for `subject` carries it, for the answer's call
    /// to resume.
    pub(crate) fn session(&self, subject: &str, session: &str) -> io::Result<()> {
        self.append(&QuestionLine::Session {
            subject: subject.to_owned(),
            session: session.to_owned(),
        })
    }

    /// Closes question `id`: its answer reached an agent that gave a final answer.
    pub(crate) fn given(&self, id: &str) -> io::Result<()> {
        self.append(&QuestionLine::Given { id: id.to_owned() })
    }

    fn append(&self, line: &QuestionLine) -> io::Result<()> {
        super::inbox::append_line(&self.path(), line)
    }

    /// The journal's lines; a torn or foreign line is skipped (it holds no question).
    fn lines(&self) -> Vec<QuestionLine> {
        super::inbox::read_lines(&self.path())
    }
}

/// Records `question`, asked by `role`'s agent about `subject`, in the journal of
/// `workspace`; returns the event that announces it ([`Event::QuestionAsked`], which runs
/// the `needs_person` hooks), for the pipeline to emit once it has saved the subject as
/// waiting. The journal comes first: a question a crash left without a waiting subject is
/// answered harmlessly.
///
/// # Errors
///
/// [`Error::Io`] naming the journal when it cannot be written.
pub(crate) fn record(
    workspace: &Path,
    subject: &str,
    role: Role,
    question: &str,
) -> Result<Event, Error> {
    let questions = Questions::in_state(&super::workspace::state_dir(workspace));
    let asked = Asked {
        id: String::new(),
        subject: subject.to_owned(),
        role: role.as_str().to_owned(),
        question: question.to_owned(),
        at: jiff::Timestamp::now().to_string(),
    };
    let id = questions.ask(asked).map_err(|source| Error::Io {
        path: questions.path(),
        source,
    })?;
    Ok(Event::QuestionAsked {
        id,
        subject: subject.to_owned(),
        role,
        question: question.to_owned(),
    })
}

/// Takes in the answers posted to `workspace`'s inbox; of `waiting` (the subjects its
/// pipeline holds as waiting for an answer), those whose question no longer waits, each
/// announced ([`Event::QuestionAnswered`]). An answer that cannot be read is a warning: the
/// subject waits on.
pub(crate) fn answered<'a>(
    workspace: &Path,
    emitter: &Emitter,
    waiting: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let questions = Questions::in_state(&super::workspace::state_dir(workspace));
    if let Err(e) = questions.take_in() {
        emitter.emit(&Event::Warning {
            message: format!("could not take in the answers of `ralph answer`: {e}"),
        });
        return Vec::new();
    }
    let open = questions.open(false);
    let mut answered = Vec::new();
    for subject in waiting {
        if open.waiting_on(subject).is_some() {
            continue;
        }
        if let Some(question) = open.answered_for(subject) {
            emitter.emit(&Event::QuestionAnswered {
                id: question.asked.id.clone(),
                subject: subject.to_owned(),
            });
        }
        answered.push(subject.to_owned());
    }
    answered
}

/// Waits up to `question_wait` for the answer to `subject`'s question, taking in what the
/// inbox gets; whether it came. A stop (`ralph stop`, a signal) ends the wait unanswered.
#[cfg(any(feature = "specs", feature = "threads"))]
pub(crate) async fn wait(ctx: &super::Context, emitter: &Emitter, subject: &str) -> bool {
    let until = tokio::time::Instant::now() + ctx.config.question_wait_or_default();
    loop {
        if !answered(&ctx.workspace, emitter, [subject]).is_empty() {
            return true;
        }
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || ctx.stop.is_stopped() || super::workspace::stop_asked(&ctx.workspace) {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(left.min(POLL)) => {}
            () = ctx.stop.stopped() => {}
        }
    }
}

/// How often a run waiting for an answer looks at its inbox.
pub(crate) const POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// `text`, cut to [`MAX_TEXT`] bytes on a character boundary.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The open questions after `lines`: an answer taken in twice is one (the first stands).
fn fold(lines: Vec<QuestionLine>) -> Open {
    let mut open = Open::default();
    let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
    let mut closed = Vec::new();
    // A session noted for a subject belongs to the question it asks next.
    let mut sessions: BTreeMap<String, String> = BTreeMap::new();
    for line in lines {
        match line {
            QuestionLine::Asked(asked) => {
                let n = asked
                    .id
                    .strip_prefix("q-")
                    .and_then(|n| n.parse::<u64>().ok());
                open.last = open.last.max(n.unwrap_or(0));
                if by_id.contains_key(&asked.id) {
                    continue;
                }
                by_id.insert(asked.id.clone(), open.questions.len());
                open.questions.push(Question {
                    session: sessions.remove(&asked.subject),
                    asked,
                    answer: None,
                });
            }
            QuestionLine::Answered(answered) => {
                if let Some(&at) = by_id.get(&answered.id) {
                    let question = &mut open.questions[at];
                    question.answer.get_or_insert(answered);
                }
            }
            QuestionLine::Session { subject, session } => {
                sessions.insert(subject, session);
            }
            QuestionLine::Given { id } => closed.push(id),
        }
    }
    open.questions.retain(|q| !closed.contains(&q.asked.id));
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(subject: &str, question: &str) -> Asked {
        Asked {
            id: String::new(),
            subject: subject.into(),
            role: "build".into(),
            question: question.into(),
            at: "2026-12-06T00:00:00Z".into(),
        }
    }

    fn answer(id: &str, subject: &str) -> InboxMessage {
        InboxMessage::Answer(Answered {
            id: id.into(),
            subject: subject.into(),
            text: "SQLite".into(),
            from: "ana".into(),
            at: "2026-12-06T00:01:00Z".into(),
        })
    }

    #[test]
    fn a_question_waits_until_answered_and_closes_once_given() {
        let dir = tempfile::tempdir().unwrap();
        let questions = Questions::in_state(dir.path());
        let id = questions.ask(asked("t-3", "Postgres or SQLite?")).unwrap();
        assert_eq!(id, "q-1");
        assert_eq!(questions.ask(asked("t-4", "Which port?")).unwrap(), "q-2");
        let open = questions.open(true);
        assert_eq!(
            open.waiting_on("t-3").unwrap().asked.question,
            "Postgres or SQLite?"
        );
        assert!(
            questions.for_call("t-3").unwrap().is_none(),
            "not answered yet"
        );

        let inbox = Inbox::in_state(dir.path());
        inbox.post(&answer("q-1", "t-3")).unwrap();
        assert!(
            questions.open(true).waiting_on("t-3").is_none(),
            "an answer waiting in the inbox counts for status"
        );
        assert!(questions.open(false).waiting_on("t-3").is_some());
        let given = questions.for_call("t-3").unwrap().expect("answered");
        assert!(
            given.section().contains("> Postgres or SQLite?"),
            "{}",
            given.section()
        );
        assert!(
            given.section().ends_with("ana answered:\n\nSQLite\n"),
            "{}",
            given.section()
        );
        assert!(inbox.read().is_empty(), "taken in");
        assert!(questions.for_call("t-4").unwrap().is_none());

        questions.given("q-1").unwrap();
        assert!(questions.for_call("t-3").unwrap().is_none(), "closed");
        let open = questions.open(true);
        let ids: Vec<_> = open.questions.iter().map(|q| q.asked.id.as_str()).collect();
        assert_eq!(ids, ["q-2"]);
        assert_eq!(open.next_id(), "q-3");
    }

    #[test]
    fn an_answer_taken_in_twice_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let questions = Questions::in_state(dir.path());
        questions.ask(asked("t-1", "Which?")).unwrap();
        let inbox = Inbox::in_state(dir.path());
        inbox.post(&answer("q-1", "t-1")).unwrap();
        questions.take_in().unwrap();
        // As if the run died after the journal's append, before the inbox's delete.
        inbox.post(&answer("q-1", "t-1")).unwrap();
        assert_eq!(questions.take_in().unwrap(), ["t-1"]);
        questions.given("q-1").unwrap();
        assert!(questions.open(true).questions.is_empty());
    }
}
