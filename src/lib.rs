//! ralph drives autonomous coding agents through a written spec until it is implemented,
//! checked by real quality gates, verified and committed.

pub mod agent;
pub mod config;
pub mod context;
pub mod event;
pub mod gate;
pub mod logfile;
#[cfg(feature = "test-util")]
pub mod mock;
pub mod model;
pub mod outcome;
pub mod output;
pub mod prioritize;
pub mod process;
pub mod signal;
pub mod store;

pub use agent::{Agent, AgentError, AgentExit, AgentRequest, AgentRun, FakeAgent, Role};
pub use config::Config;
pub use event::{Event, Observer};
pub use gate::{Gate, GateReport, GateStatus, ShellGate};
pub use outcome::Outcome;
pub use prioritize::{CriticalPath, Prioritizer};
pub use store::{JsonlStore, MemoryStore, Store};
