//! `FakeAgent`: placeholder.
use async_trait::async_trait;
use super::{Agent, AgentError, AgentRequest, AgentRun};

/// A scripted agent.
#[derive(Debug, Default)]
pub struct FakeAgent {}
/// A script.
#[derive(Debug, Default, Clone)]
pub struct Script {}
/// A step.
#[derive(Debug, Clone)]
pub enum Step {}
/// A fake agent error.
#[derive(Debug, thiserror::Error)]
#[error("fake")]
pub struct FakeAgentError {}

#[async_trait]
impl Agent for FakeAgent {
    async fn run(&self, _request: AgentRequest) -> Result<AgentRun, AgentError> {
        Err(AgentError::Other("unimplemented".into()))
    }
}
