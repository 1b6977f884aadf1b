//! One read-only question to a thread's agent with a structured answer, as the Assessing
//! review and the Drafting conversation ask it: a run of its own, the answer checked against
//! its schema, and one retry with the parse error shown.

use super::call::{Ran, Refused, Request};
use super::{ThreadError, ThreadRecord, Threads};
use crate::agent::Role;
use crate::answer::{self, Answer};

impl Threads {
    /// Asks this handle's models (the thread is not configured yet: [`Threads::run_config`])
    /// `prompt` in `role` and parses the answer as `A`; the answer and the id of the run that
    /// gave it. Every failure (the agent's, an interrupt, a rate limit, an unusable answer
    /// twice) is handed to `failed` with a reason, which makes the caller's error. A rate
    /// limit of the whole chain is not waited out: a one-off question is not worth holding
    /// the person for hours.
    pub(super) async fn ask<A: Answer>(
        &self,
        record: &mut ThreadRecord,
        role: Role,
        mut prompt: String,
        failed: impl Fn(String) -> ThreadError,
    ) -> Result<(A, String), ThreadError> {
        let agent = self.loop_agents(&self.run_config).map_err(&failed)?.work;
        let mut last_error = String::new();
        for attempt in 1..=2 {
            let request = Request {
                role,
                iteration: 0,
                attempt,
                prompt: prompt.clone(),
                schema: Some(A::schema()),
                patient: false,
            };
            let called = match self.call(&agent, record, request).await? {
                Ok(called) => called,
                Err(Refused(reason)) => return Err(failed(format!("the agent failed: {reason}"))),
            };
            let run = match &called.ran {
                Ran::Answer(run) => run,
                Ran::Interrupted => {
                    self.close(&called, "interrupted")?;
                    return Err(failed("interrupted".into()));
                }
                Ran::Failed(reason) => {
                    self.close(&called, &format!("failed: {reason}"))?;
                    return Err(failed(reason.clone()));
                }
                Ran::Fatal(reason) => {
                    self.close(&called, &format!("failed: {reason}"))?;
                    return Err(failed(format!("the agent failed: {reason}")));
                }
                Ran::RateLimited(reason) => return Err(failed(reason.clone())),
            };
            match answer::parse::<A>(run) {
                Ok(answer) => {
                    self.close(&called, "completed")?;
                    return Ok((answer, called.run_id));
                }
                Err(e) => {
                    self.close(&called, &format!("invalid answer: {e}"))?;
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
