//! One read-only question to a thread's agent with a structured answer, as the Assessing
//! review and the Drafting conversation ask it: a run of its own, the answer checked against
//! its schema, and one retry with the parse error shown.

use super::running::Ran;
use super::{ThreadError, ThreadRecord, Threads};
use crate::agent::Role;
use crate::answer::{self, Answer};

impl Threads {
    /// Asks the thread's first agent `prompt` in `role` and parses the answer as `A`; the
    /// answer and the id of the run that gave it. Every failure (the agent's, an interrupt,
    /// a rate limit, an unusable answer twice) is handed to `failed` with a reason, which
    /// makes the caller's error. A rate limit is not waited out: a one-off question is not
    /// worth holding the caller for hours.
    pub(super) async fn ask<A: Answer>(
        &self,
        record: &mut ThreadRecord,
        role: Role,
        mut prompt: String,
        failed: impl Fn(String) -> ThreadError,
    ) -> Result<(A, String), ThreadError> {
        let agent = self.chain(&record.config).map_err(&failed)?[0].1.clone();
        let mut last_error = String::new();
        for attempt in 1..=2 {
            let run_id = self.open_run(record, 0, role)?;
            let ran = self
                .call(
                    &agent,
                    record,
                    &run_id,
                    role,
                    attempt,
                    prompt.clone(),
                    Some(A::schema()),
                )
                .await;
            let run = match ran {
                Ran::Answer(run) => run,
                Ran::Interrupted => {
                    self.close_run(&run_id, "interrupted")?;
                    return Err(failed("interrupted".into()));
                }
                Ran::Failed(reason) | Ran::Transient(reason) | Ran::Fatal(reason) => {
                    self.close_run(&run_id, &format!("failed: {reason}"))?;
                    return Err(failed(format!("the agent failed: {reason}")));
                }
                Ran::RateLimited(until) => {
                    let resets = jiff::Timestamp::try_from(until)
                        .map_or_else(|_| "an unknown time".to_owned(), |t| t.to_string());
                    let reason = format!("the agent is rate limited until {resets}");
                    self.close_run(&run_id, &format!("failed: {reason}"))?;
                    return Err(failed(reason));
                }
            };
            match answer::parse::<A>(&run) {
                Ok(answer) => {
                    self.close_run(&run_id, "completed")?;
                    return Ok((answer, run_id));
                }
                Err(e) => {
                    self.close_run(&run_id, &format!("invalid answer: {e}"))?;
                    last_error = e;
                }
            }
            prompt = format!(
                "{prompt}\n## Your Previous Answer Was Invalid\n\n{last_error}\n\nAnswer again with only a JSON object matching the schema.\n"
            );
        }
        Err(failed(format!(
            "the answer was unusable twice: {last_error}"
        )))
    }
}
