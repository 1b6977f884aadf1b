//! Running one agent call under ralph's limits, and reading structured answers.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::logs::{Emitter, Logs};
use crate::agent::retry;
pub(super) use crate::agent::retry::backoff;
use crate::agent::{AgentEvents, AgentExit, AgentRequest, AgentRun, FailureKind, Role};
use crate::answer::{self, Answer};
use crate::error::Error;
use crate::event::Event;
use crate::model::KillReason;
use crate::ralph::Inner;

/// How long a stopped agent or gate may take to return before ralph drops it (which kills
/// its processes) and moves on: a stop must never hang the loop.
const BACKSTOP_EXTRA: Duration = Duration::from_secs(5);

/// How one agent call ended, from the engine's point of view.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per agent call, moved once
pub(crate) enum Ending {
    /// The agent completed and gave a final answer.
    Answer(AgentRun),
    /// The agent ran and failed.
    Failed { reason: String, kind: FailureKind },
    /// Stopped by a limit: the stage deadline, the agent timeout, or the context limit.
    Killed {
        reason: KillReason,
        log: Option<PathBuf>,
    },
    /// The user stopped the run.
    Interrupted,
}

/// What one agent run gives before rate limits are ridden out.
#[allow(clippy::large_enum_variant)] // one per agent run, matched at once
enum Once {
    Ended(Ending),
    RateLimited(SystemTime),
}

/// One agent call's parameters.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) role: Role,
    pub(crate) subject: Option<String>,
    pub(crate) attempt: u32,
    pub(crate) prompt: String,
    pub(crate) deadline: Instant,
}

/// The result of a structured call (one retry on an invalid answer already made).
#[derive(Debug)]
pub(crate) enum Structured<T> {
    Answer(T),
    /// The call ended without a usable answer, for this reason.
    Unusable(String),
    Interrupted,
}

/// Runs agent calls for one stage. Cheap to clone into concurrent verifier jobs.
#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) inner: Arc<Inner>,
    pub(crate) emitter: Emitter,
    pub(crate) logs: Logs,
    /// Build mode's run folder (`runs/<spec>/<timestamp>/`): agent logs go there, named by
    /// role (`plan-attempt-N.log`, `impl-attempt-N.log`, `verify.log`).
    pub(crate) run_dir: Option<PathBuf>,
}

impl Caller {
    /// Runs one call: agent timeout = min(agent_timeout, time to the deadline); at the
    /// deadline the agent is asked to stop, and dropped if it does not within the grace.
    /// Runs one call, riding out rate limits (waited until they reset) and transient
    /// failures (backed off `transient_backoff`, doubling, at most `transient_retries`
    /// times). Neither counts as an attempt, and the time waited extends the call's deadline:
    /// it is not the task's time.
    pub(crate) async fn call(
        &self,
        call: &mut Call,
        schema: Option<serde_json::Value>,
    ) -> Result<Ending, Error> {
        let config = &self.inner.config;
        let mut transient = 0u32;
        loop {
            let wait = match self.call_once(call, schema.clone()).await? {
                Once::RateLimited(until) => self.rate_limit_wait(until),
                Once::Ended(Ending::Failed {
                    reason,
                    kind: FailureKind::Transient,
                }) if transient < config.transient_retries => {
                    let backoff = backoff(config.transient_backoff, transient);
                    transient += 1;
                    self.emitter.emit(&Event::Warning {
                        message: format!(
                            "{} {}: {reason}; retrying in {}",
                            call.role,
                            call.subject.as_deref().unwrap_or("-"),
                            humantime::format_duration(backoff)
                        ),
                    });
                    backoff
                }
                Once::Ended(Ending::Failed {
                    reason,
                    kind: FailureKind::Transient,
                }) => {
                    return Ok(Ending::Failed {
                        reason: format!("{reason} (still failing after {transient} retries)"),
                        kind: FailureKind::Attempt,
                    });
                }
                Once::Ended(ending) => return Ok(ending),
            };
            let started = Instant::now();
            if !self.pause(wait).await {
                return Ok(Ending::Interrupted);
            }
            call.deadline += started.elapsed();
        }
    }

    /// One agent run under the deadline.
    async fn call_once(
        &self,
        call: &Call,
        schema: Option<serde_json::Value>,
    ) -> Result<Once, Error> {
        let config = &self.inner.config;
        let subject = call.subject.clone().unwrap_or_else(|| "-".into());
        let log = match &self.run_dir {
            Some(dir) => super::spec_build::run_log(dir, call.role, call.attempt),
            None => self
                .logs
                .run_log(&subject, call.role.as_str(), call.attempt),
        };
        let token = self.inner.stop.child_token();
        let remaining = call.deadline.saturating_duration_since(Instant::now());
        let mut request = AgentRequest::new(call.role, call.prompt.clone(), &self.inner.workspace)
            .attempt(call.attempt)
            .log_path(&log)
            .timeout(config.agent_timeout.min(remaining))
            .context(config.context)
            .events(self.forward_events(call.subject.clone()))
            .stop(token.clone());
        request.subject = call.subject.clone();
        request.schema = schema;
        let agent = self.inner.agent.clone();
        let outcome = until_deadline(
            call.deadline,
            &token,
            config.grace + BACKSTOP_EXTRA,
            agent.run(request),
        )
        .await;
        let run = match outcome {
            Some(result) => result?,
            None => AgentRun::new(AgentExit::Stopped).with_log_path(&log),
        };
        self.emitter.emit(&Event::AgentFinished {
            role: call.role,
            subject: call.subject.clone(),
            exit: run.exit.clone(),
            usage: run.usage,
            duration: run.duration,
            cost_usd: run.cost_usd,
            turns: run.turns,
            session_id: run.session_id.clone(),
            log: run.log_path.as_deref().map(|p| self.logs.relative(p)),
        });
        Ok(self.classify(run, call.deadline))
    }

    fn classify(&self, run: AgentRun, deadline: Instant) -> Once {
        let log = run.log_path.as_deref().map(|p| self.logs.relative(p));
        if self.inner.stop.is_cancelled() {
            return Once::Ended(Ending::Interrupted);
        }
        if let AgentExit::RateLimited { until } = run.exit {
            return Once::RateLimited(until);
        }
        Once::Ended(match run.exit {
            AgentExit::Completed => Ending::Answer(run),
            AgentExit::Failed { reason, kind } => Ending::Failed { reason, kind },
            AgentExit::ContextLimit => Ending::Killed {
                reason: KillReason::ContextLimit,
                log,
            },
            AgentExit::TimedOut => Ending::Killed {
                reason: KillReason::Timeout,
                log,
            },
            AgentExit::Stopped if Instant::now() >= deadline => Ending::Killed {
                reason: KillReason::Timeout,
                log,
            },
            // Stopped while neither the user nor the deadline asked: the agent gave up on its
            // own; count it as a failed attempt.
            _ => Ending::Failed {
                reason: "the agent stopped without an answer".into(),
                kind: FailureKind::Attempt,
            },
        })
    }

    fn forward_events(&self, subject: Option<String>) -> AgentEvents {
        let emitter = self.emitter.clone();
        AgentEvents::new(move |detail| {
            emitter.emit(&Event::Agent {
                subject: subject.clone(),
                detail,
            })
        })
    }

    /// Runs a structured call: the answer is parsed against `T`'s schema and `extra` checks;
    /// an invalid answer is retried once (attempt + 1) with the error shown. Returns the
    /// result and the number of agent runs made.
    pub(crate) async fn structured<T: Answer>(
        &self,
        mut call: Call,
        extra: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(Structured<T>, u32), Error> {
        let mut runs = 0;
        let mut last_error = String::new();
        while runs < 2 {
            runs += 1;
            let ending = self.call(&mut call, Some(T::schema())).await?;
            let run = match ending {
                Ending::Answer(run) => run,
                Ending::Interrupted => return Ok((Structured::Interrupted, runs)),
                Ending::Failed {
                    reason,
                    kind: FailureKind::Fatal,
                } => return Err(Error::AgentFatal(reason)),
                Ending::Failed { reason, .. } => {
                    return Ok((
                        Structured::Unusable(format!("the agent failed: {reason}")),
                        runs,
                    ));
                }
                Ending::Killed { reason, .. } => {
                    return Ok((
                        Structured::Unusable(format!("the agent was stopped ({reason})")),
                        runs,
                    ));
                }
            };
            match answer::parse::<T>(&run).and_then(|a| extra(&a).map(|()| a)) {
                Ok(answer) => return Ok((Structured::Answer(answer), runs)),
                Err(e) => last_error = e,
            }
            call.attempt += 1;
            call.prompt = format!(
                "{}\n## Your Previous Answer Was Invalid\n\n{last_error}\n\nAnswer again with only a JSON object matching the schema.\n",
                call.prompt
            );
        }
        Ok((
            Structured::Unusable(format!("no valid answer after a retry: {last_error}")),
            runs,
        ))
    }

    /// How long to wait for a rate limit to reset (at most a day), reported as an event.
    fn rate_limit_wait(&self, until: SystemTime) -> Duration {
        let wait = retry::wait_until(until);
        self.emitter.emit(&Event::RateLimited {
            wait_secs: retry::whole_secs(wait),
        });
        wait
    }

    /// Sleeps `wait` unless the run is stopped first (then returns false).
    pub(crate) async fn pause(&self, wait: Duration) -> bool {
        retry::sleep(wait, &self.inner.stop).await
    }
}

/// Runs `fut` until it finishes. At `deadline` (or when `token` is cancelled from above) it
/// cancels `token` and gives `fut` `backstop` more to return; past that, `fut` is dropped
/// (agents and gates kill their processes on drop) and `None` is returned.
pub(crate) async fn until_deadline<T>(
    deadline: Instant,
    token: &CancellationToken,
    backstop: Duration,
    fut: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(fut);
    tokio::select! {
        out = &mut fut => return Some(out),
        () = tokio::time::sleep_until(deadline) => token.cancel(),
        () = token.cancelled() => {}
    }
    tokio::time::timeout(backstop, fut).await.ok()
}
