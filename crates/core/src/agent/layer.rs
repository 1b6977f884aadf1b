//! Layers around an agent, as tower's layers wrap a service: a layer changes how a run goes
//! (retries, a journal, a rewritten prompt) and [`Layered`] forwards everything else to
//! the agent inside, so that no wrapper can forget a method (`configure`, which hands the
//! agent its `[claude]` settings, is the one a hand-written wrapper used to drop).

use async_trait::async_trait;

use super::{Agent, AgentError, AgentRequest, AgentRun};
use crate::config::Config;

/// What a layer does around one run of the agent it wraps.
///
/// Wrap an agent with [`Agent::layer`]; layers stack (`agent.layer(a).layer(b)`: `b`
/// runs around `a`, which runs around the agent). The agent's other methods, `name`,
/// `check`, `configure` and `in_process`, reach the agent inside unchanged.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// use ralph::agent::{Agent, AgentError, AgentLayer, AgentRequest, AgentRun, Claim, Role};
/// use ralph::async_trait;
///
/// /// Runs the agent again when it could not start, up to `tries` times in all.
/// struct RetryStart {
///     tries: u32,
/// }
///
/// #[async_trait]
/// impl AgentLayer for RetryStart {
///     async fn run(&self, inner: &dyn Agent, request: AgentRequest) -> Result<AgentRun, AgentError> {
///         let mut tried = 1;
///         loop {
///             match inner.run(request.clone()).await {
///                 Err(AgentError::Spawn { .. }) if tried < self.tries => tried += 1,
///                 ran => return ran,
///             }
///         }
///     }
/// }
///
/// /// An agent whose first start fails.
/// #[derive(Default)]
/// struct Flaky {
///     starts: AtomicU32,
/// }
///
/// #[async_trait]
/// impl Agent for Flaky {
///     fn name(&self) -> &str {
///         "flaky"
///     }
///
///     async fn run(&self, _request: AgentRequest) -> Result<AgentRun, AgentError> {
///         if self.starts.fetch_add(1, Ordering::SeqCst) == 0 {
///             let busy = std::io::Error::from(std::io::ErrorKind::ResourceBusy);
///             return Err(AgentError::Spawn { program: "flaky".into(), source: busy });
///         }
///         Ok(AgentRun::completed("<TASK_DONE>"))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), AgentError> {
/// let agent = Flaky::default().layer(RetryStart { tries: 2 });
/// assert_eq!(agent.name(), "flaky", "the name is the agent's");
/// let run = agent.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// assert_eq!(run.claim(), Claim::Done, "the second start ran");
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait AgentLayer: Send + Sync {
    /// Runs `request` through `inner`, the agent this layer wraps (or the next layer in).
    ///
    /// # Errors
    ///
    /// As [`Agent::run`]: [`AgentError`] when the agent could not run at all.
    async fn run(&self, inner: &dyn Agent, request: AgentRequest) -> Result<AgentRun, AgentError>;
}

/// An agent inside a layer: what [`Agent::layer`] makes. Its runs go through the layer;
/// its name, check, configuration and `in_process` are the agent's.
#[derive(Debug)]
pub(super) struct Layered<A, L> {
    agent: A,
    layer: L,
}

impl<A, L> Layered<A, L> {
    pub(super) fn new(agent: A, layer: L) -> Self {
        Layered { agent, layer }
    }
}

#[async_trait]
impl<A: Agent, L: AgentLayer> Agent for Layered<A, L> {
    fn name(&self) -> &str {
        self.agent.name()
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        self.layer.run(&self.agent, request).await
    }

    async fn check(&self) -> Result<(), AgentError> {
        self.agent.check().await
    }

    fn configure(&mut self, config: &Config) {
        self.agent.configure(config);
    }

    fn in_process(&self) -> bool {
        self.agent.in_process()
    }

    fn unmetered(&self) -> Vec<String> {
        self.agent.unmetered()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::agent::Role;

    /// What reached the recorder.
    #[derive(Debug, Default)]
    struct Reached {
        configured: Option<u32>,
        prompts: Vec<String>,
    }

    /// Records what reached it.
    #[derive(Default)]
    struct Recorder(Arc<Mutex<Reached>>);

    #[async_trait]
    impl Agent for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }

        async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
            self.0.lock().unwrap().prompts.push(request.prompt);
            Ok(AgentRun::completed("<TASK_DONE>"))
        }

        async fn check(&self) -> Result<(), AgentError> {
            Err(AgentError::NoCommand {
                agent: "recorder".to_owned(),
            })
        }

        fn configure(&mut self, config: &Config) {
            self.0.lock().unwrap().configured = Some(config.max_iterations);
        }

        fn in_process(&self) -> bool {
            false
        }
    }

    /// Adds a line to the prompt.
    struct Signed(&'static str);

    #[async_trait]
    impl AgentLayer for Signed {
        async fn run(
            &self,
            inner: &dyn Agent,
            mut request: AgentRequest,
        ) -> Result<AgentRun, AgentError> {
            request.prompt.push_str(self.0);
            inner.run(request).await
        }
    }

    #[tokio::test]
    async fn a_layer_changes_the_run_and_the_agent_keeps_the_rest() {
        let recorder = Recorder::default();
        let seen = Arc::clone(&recorder.0);
        let mut agent = recorder.layer(Signed(" +a")).layer(Signed(" +b"));
        let config = Config {
            max_iterations: 7,
            ..Config::default()
        };
        agent.configure(&config);
        agent
            .run(AgentRequest::new(Role::Build, "task", "."))
            .await
            .unwrap();
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.configured, Some(7), "configure reached the agent");
            assert_eq!(seen.prompts, ["task +b +a"], "the outer layer runs first");
        }
        assert_eq!(agent.name(), "recorder");
        assert!(!agent.in_process());
        assert!(agent.check().await.is_err(), "the agent's check");
    }
}
