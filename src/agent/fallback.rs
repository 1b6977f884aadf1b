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
}

/// [`Fallback`]: agents in order of preference, as one [`Agent`]. Each run goes to the first
/// agent that is not resting. An agent rests when it is rate limited (until its reset time,
/// then it is first again) or unavailable (it could not start, or failed in a way no retry
/// fixes, such as bad credentials; for the rest of the process). The next agent then takes
/// the same request, and each choice is an [`AgentEvent::AgentChosen`] with its reason. When
/// every agent rests, the run is [`AgentExit::RateLimited`] until the earliest reset, which
/// every mode waits out, or, with none rate limited, the last agent's failure.
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
            Some(Rest::Until(until)) if *until <= SystemTime::now() => None,
            other => other.cloned(),
        }
    }

    fn set_rest(&self, index: usize, rest: Rest) {
        self.resting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, rest);
    }

    fn choose(request: &AgentRequest, name: &str, reason: String) {
        request.events.emit(AgentEvent::AgentChosen {
            agent: name.to_owned(),
            reason,
        });
    }
}

#[async_trait::async_trait]
impl Agent for Fallback {
    fn name(&self) -> &str {
        &self.name
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let mut passed_over: Vec<String> = Vec::new();
        let mut earliest: Option<SystemTime> = None;
        let mut last: Option<Result<AgentRun, AgentError>> = None;
        for (index, (name, agent)) in self.agents.iter().enumerate() {
            match self.rest(index) {
                Some(Rest::Until(until)) => {
                    earliest = Some(earliest.map_or(until, |e| e.min(until)));
                    passed_over.push(format!("{name} is rate limited until {}", stamp(until)));
                    continue;
                }
                Some(Rest::Unavailable(why)) => {
                    passed_over.push(format!("{name} is unavailable ({why})"));
                    continue;
                }
                None => {}
            }
            if !passed_over.is_empty() {
                Self::choose(&request, name, passed_over.join("; "));
            }
            let ran = agent.run(request.clone()).await;
            match &ran {
                Ok(run) => match &run.exit {
                    AgentExit::RateLimited { until } => {
                        self.set_rest(index, Rest::Until(*until));
                        earliest = Some(earliest.map_or(*until, |e| e.min(*until)));
                        passed_over.push(format!("{name} is rate limited until {}", stamp(*until)));
                    }
                    AgentExit::Failed {
                        kind: FailureKind::Fatal,
                        reason,
                    } => {
                        self.set_rest(index, Rest::Unavailable(reason.clone()));
                        passed_over.push(format!("{name} is unavailable ({reason})"));
                    }
                    _ => return ran,
                },
                Err(AgentError::Spawn { program, .. }) => {
                    let why = format!("{program} could not start");
                    self.set_rest(index, Rest::Unavailable(why.clone()));
                    passed_over.push(format!("{name} is unavailable ({why})"));
                }
                Err(_) => return ran,
            }
            last = Some(ran);
        }
        if let Some(until) = earliest {
            return Ok(AgentRun::new(AgentExit::RateLimited { until }));
        }
        last.unwrap_or_else(|| {
            Err(AgentError::Other(if self.agents.is_empty() {
                "the fallback chain has no agent".to_owned()
            } else {
                format!("no agent can run: {}", passed_over.join("; "))
            }))
        })
    }

    async fn check(&self) -> Result<(), AgentError> {
        let mut reasons = Vec::new();
        for (name, agent) in &self.agents {
            match agent.check().await {
                Ok(()) => return Ok(()),
                Err(e) => reasons.push(format!("{name}: {e}")),
            }
        }
        Err(AgentError::Other(format!(
            "no agent of the chain is available: {}",
            reasons.join("; ")
        )))
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
