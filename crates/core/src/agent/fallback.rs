//! `Fallback`: agents in order of preference, as one agent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use super::{Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, FailureKind};
use crate::config::Config;

/// Why an agent is passed over.
#[derive(Clone, Debug)]
enum Rest {
    /// Rate limited until then.
    Until(SystemTime),
    /// Could not run; not tried again by this chain.
    Unavailable(String),
    /// Could not reach its API (its last error); tried again from then on.
    Unreachable(SystemTime, String),
}

/// How long an agent that could not reach its API is passed over before it is tried again:
/// long enough that each later run does not spend `unreachable_after` on it anew, short
/// enough that a network back after a blip is used again within minutes.
const UNREACHABLE_REST: std::time::Duration = std::time::Duration::from_secs(300);

/// [`Fallback`]: agents in order of preference, as one [`Agent`]. Each run goes to the first
/// agent that is not resting, and the next agent takes the same request when that one:
///
/// * is rate limited: it rests until its reset time, then is first again;
/// * cannot start, or fails in a way no retry fixes (bad credentials): it rests for the rest
///   of the process;
/// * cannot reach its API ([`FailureKind::Unreachable`]: only connection errors for
///   [`AgentRequest::unreachable_after`]): it rests for five minutes, then is tried again;
/// * fails transiently (an API error that outlasted the CLI's own retries, a 429 without a
///   reset time): it is passed over for this run only.
///
/// Whenever the agent that takes a run is not the one that took the last, that is an
/// [`AgentEvent::AgentChosen`] with its reason (`claude is rate limited until …`, `its rate
/// limit reset at …`); `ralph status` shows the last ones. When every agent rests, the run is
/// [`AgentExit::RateLimited`] until the earliest reset, which every mode waits out; with none
/// rate limited, it is the last agent's failure (unreachable, when the last ran or rests so).
///
/// ```
/// use ralph::agent::{Agent, AgentRequest, Fallback, FakeAgent, Role, Script};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ralph::AgentError> {
/// let chain = Fallback::new()
///     .agent("first", FakeAgent::new().then(Script::new().rate_limit(3600)))
///     .agent("second", FakeAgent::new().then(Script::new().answer("Did it.\n<TASK_DONE>")));
/// let run = chain.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// assert_eq!(run.final_text, "Did it.\n<TASK_DONE>");
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct Fallback {
    agents: Vec<(String, Box<dyn Agent>)>,
    resting: Mutex<HashMap<usize, Rest>>,
    /// The agent that took the last run, so that a change is announced.
    last_chosen: Mutex<Option<usize>>,
    name: String,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fallback")
            .field("agents", &self.name)
            .finish_non_exhaustive()
    }
}

impl Fallback {
    /// An empty chain; add agents with [`agent`](Self::agent).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `agent`, known as `name` in events.
    #[must_use]
    pub fn agent(mut self, name: impl Into<String>, agent: impl Agent + 'static) -> Self {
        self.agents.push((name.into(), Box::new(agent)));
        self.name = self
            .agents
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join("→");
        self
    }

    /// The agents' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.agents.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn rest(&self, index: usize) -> Option<Rest> {
        let resting = self.resting.lock().unwrap_or_else(PoisonError::into_inner);
        match resting.get(&index) {
            Some(Rest::Until(until) | Rest::Unreachable(until, _))
                if *until <= SystemTime::now() =>
            {
                None
            }
            other => other.cloned(),
        }
    }

    fn set_rest(&self, index: usize, rest: Rest) {
        self.resting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, rest);
    }

    /// Says which agent takes the run, and why, when it is not the one that took the last
    /// run: the ones before it were passed over, or it is first again (its limit reset).
    fn announce(&self, request: &AgentRequest, index: usize, passed_over: &[String]) {
        let previous = self
            .last_chosen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(index);
        let reason = if !passed_over.is_empty() {
            passed_over.join("; ")
        } else if previous.is_some_and(|p| p != index) {
            match self.resting_entry(index) {
                Some(Rest::Until(until)) => format!("its rate limit reset at {}", stamp(until)),
                _ => "it is first in the chain".to_owned(),
            }
        } else {
            return;
        };
        request.events.emit(AgentEvent::AgentChosen {
            agent: self.agents[index].0.clone(),
            reason,
        });
    }

    /// The rest recorded for `index`, expired or not.
    fn resting_entry(&self, index: usize) -> Option<Rest> {
        self.resting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
            .cloned()
    }

    /// Whether the run `ran` of agent `index` passes the request on to the next agent, and
    /// why. A rate limit rests the agent until its reset; a failure no retry fixes (or an
    /// agent that cannot start) rests it for good; a transient failure (an API error that
    /// outlasted the CLI's own retries, a 429 without a reset time) or an unreachable API
    /// passes this run only.
    fn pass_over(&self, index: usize, ran: &Result<AgentRun, AgentError>) -> Option<Passed> {
        match ran {
            Ok(run) => match &run.exit {
                AgentExit::RateLimited { until } => {
                    self.set_rest(index, Rest::Until(*until));
                    Some(Passed::RateLimited(*until))
                }
                AgentExit::Failed {
                    kind: FailureKind::Fatal,
                    reason,
                } => {
                    self.set_rest(index, Rest::Unavailable(reason.clone()));
                    Some(Passed::Failed(format!("is unavailable ({reason})")))
                }
                AgentExit::Failed {
                    kind: FailureKind::Transient,
                    reason,
                } => Some(Passed::Failed(format!("failed ({reason})"))),
                AgentExit::Failed {
                    kind: FailureKind::Unreachable,
                    reason,
                } => {
                    let until = SystemTime::now() + UNREACHABLE_REST;
                    self.set_rest(index, Rest::Unreachable(until, reason.clone()));
                    Some(Passed::Failed(format!("is unreachable ({reason})")))
                }
                _ => None,
            },
            Err(AgentError::Spawn { program, .. }) => {
                let why = format!("{program} could not start");
                self.set_rest(index, Rest::Unavailable(why.clone()));
                Some(Passed::Failed(format!("is unavailable ({why})")))
            }
            Err(_) => None,
        }
    }
}

/// One choice of a [`Fallback`] chain as recorded for `ralph status`
/// ([`Ralph::agent_choices`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.agent_choices)): an
/// [`AgentEvent::AgentChosen`] with its time and subject.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentChoice {
    /// When, RFC 3339.
    pub at: String,
    /// The agent that took the run.
    pub agent: String,
    /// The task or issue the run was about (`t-3`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Why the agents before it were passed over, or why it is first again.
    pub reason: String,
}

impl AgentChoice {
    /// `agent` took the run about `subject` now, for `reason`.
    pub fn new(agent: &str, subject: Option<String>, reason: &str) -> Self {
        AgentChoice {
            at: crate::time::now_rfc3339(),
            agent: agent.to_owned(),
            subject,
            reason: reason.to_owned(),
        }
    }
}

impl Fallback {
    /// The chain's run when no agent took it, with what those passed over spent: rate
    /// limited until the earliest limit ends if one is; failed as unreachable if an agent
    /// rests as unreachable and none ran; else the last agent's run, or an error when none
    /// could run.
    fn none_took(
        &self,
        passed: PassedOver,
        last: Option<Result<AgentRun, AgentError>>,
        spent: Carried,
    ) -> Result<AgentRun, AgentError> {
        if let Some(until) = passed.earliest {
            let mut run = AgentRun::new(AgentExit::RateLimited { until });
            spent.carry_into(&mut run);
            return Ok(run);
        }
        if last.is_none() && passed.unreachable {
            // Resting because unreachable, not unable to run: the run ends as unreachable.
            let reason = format!(
                "every agent of {} is unreachable; {}",
                self.name,
                passed.reasons.join("; ")
            );
            let mut run = AgentRun::new(AgentExit::Failed {
                reason,
                kind: FailureKind::Unreachable,
            });
            spent.carry_into(&mut run);
            return Ok(run);
        }
        last.unwrap_or_else(|| {
            Err(AgentError::NoAgentCanRun {
                chain: self.name.clone(),
                reasons: passed.reasons,
            })
        })
    }
}

/// The agents a run of the chain passed over so far.
#[derive(Default)]
struct PassedOver {
    /// Why each was, in words: `claude is rate limited until …`.
    reasons: Vec<String>,
    /// When the first rate limit among them ends.
    earliest: Option<SystemTime>,
    /// Whether one was passed over as unreachable, should every agent rest.
    unreachable: bool,
}

impl PassedOver {
    /// Agent `name`, passed over as it rests.
    fn resting(&mut self, name: &str, rest: Rest) {
        match rest {
            Rest::Until(until) => self.rate_limited(name, until),
            Rest::Unavailable(why) => self.reasons.push(format!("{name} is unavailable ({why})")),
            Rest::Unreachable(until, why) => {
                self.reasons.push(format!(
                    "{name} is unreachable ({why}); tried again after {}",
                    stamp(until)
                ));
                self.unreachable = true;
            }
        }
    }

    /// Agent `name`, passed over as rate limited `until` then.
    fn rate_limited(&mut self, name: &str, until: SystemTime) {
        self.earliest = Some(self.earliest.map_or(until, |e| e.min(until)));
        self.reasons
            .push(format!("{name} is rate limited until {}", stamp(until)));
    }
}

/// Why [`Fallback::pass_over`] passed a run on.
enum Passed {
    RateLimited(SystemTime),
    /// Said after the agent's name: `is unavailable (…)`, `failed (…)`.
    Failed(String),
}

#[async_trait::async_trait]
impl Agent for Fallback {
    /// Whether any agent of the chain runs in ralph's own process.
    fn in_process(&self) -> bool {
        self.agents.iter().any(|(_, agent)| agent.in_process())
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// Every agent of the chain that may report no usage.
    fn unmetered(&self) -> Vec<String> {
        self.agents
            .iter()
            .flat_map(|(_, agent)| agent.unmetered())
            .collect()
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let mut passed = PassedOver::default();
        let mut last: Option<Result<AgentRun, AgentError>> = None;
        // What the agents passed over spent: the chain's run carries it, so no run's
        // tokens or dollars go uncounted.
        let mut spent = Carried::default();
        for (index, (name, agent)) in self.agents.iter().enumerate() {
            if let Some(rest) = self.rest(index) {
                passed.resting(name, rest);
                continue;
            }
            self.announce(&request, index, &passed.reasons);
            let mut ran = agent.run(request.clone()).await;
            if let Ok(run) = &mut ran {
                run.agent = Some(name.clone());
                spent.carry_into(run);
            }
            match self.pass_over(index, &ran) {
                Some(Passed::RateLimited(until)) => passed.rate_limited(name, until),
                Some(Passed::Failed(why)) => passed.reasons.push(format!("{name} {why}")),
                None => return ran,
            }
            if let Ok(run) = &ran {
                spent = Carried::of(run);
            }
            last = Some(ran);
        }
        self.none_took(passed, last, spent)
    }

    async fn check(&self) -> Result<(), AgentError> {
        let mut reasons = Vec::new();
        for (name, agent) in &self.agents {
            match agent.check().await {
                Ok(()) => return Ok(()),
                Err(e) => reasons.push(format!("{name}: {e}")),
            }
        }
        Err(AgentError::NoAgentCanRun {
            chain: self.name.clone(),
            reasons,
        })
    }

    fn configure(&mut self, config: &Config) {
        for (_, agent) in &mut self.agents {
            agent.configure(config);
        }
    }
}

fn stamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map_or_else(|_| "an unknown time".to_owned(), |t| t.to_string())
}

/// `Fallback` must stay usable behind `Arc<dyn Agent>`.
#[allow(dead_code)]
fn _assert_object_safe(chain: Fallback) -> Arc<dyn Agent> {
    Arc::new(chain)
}

/// Tokens and dollars of the runs a chain passed over, carried into the run it returns.
#[derive(Clone, Copy, Debug, Default)]
struct Carried {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_creation_tokens: u64,
    cost_usd: Option<f64>,
}

impl Carried {
    /// What `run` spent, with what it already carried.
    fn of(run: &AgentRun) -> Carried {
        Carried {
            input_tokens: run.usage.input_tokens,
            output_tokens: run.usage.output_tokens,
            cache_read_tokens: run.usage.cache_read_tokens,
            cache_creation_tokens: run.usage.cache_creation_tokens,
            cost_usd: run.cost_usd,
        }
    }

    /// Adds what was spent before `run` to it.
    fn carry_into(&self, run: &mut AgentRun) {
        run.usage.input_tokens += self.input_tokens;
        run.usage.output_tokens += self.output_tokens;
        run.usage.cache_read_tokens += self.cache_read_tokens;
        run.usage.cache_creation_tokens += self.cache_creation_tokens;
        if let Some(cost) = self.cost_usd {
            *run.cost_usd.get_or_insert(0.0) += cost;
        }
    }
}
