//! mockall mocks of the four seams, for interaction tests (feature `test-util`).
//!
//! Mocks are for asserting *how* the engine talks to a seam (order, arguments, counts).
//! For scripted end-to-end runs use [`FakeAgent`](crate::FakeAgent), real
//! [`ShellGate`](crate::ShellGate)s and a [`MemoryStore`](crate::MemoryStore).

#![allow(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use generated::{MockAgent, MockGate, MockPrioritizer, MockStore};

/// What `mockall::mock!` generates, kept out of the docs but for the mocks themselves.
mod generated {
    use async_trait::async_trait;

    use crate::agent::{Agent, AgentError, AgentRequest, AgentRun};
    use crate::gate::{Gate, GateContext, GateError, GateReport};
    use crate::model::{Board, Change, Priority, Task, TaskId};
    use crate::prioritize::{PrioritizeError, Prioritizer};
    use crate::store::{Store, StoreError};

    mockall::mock! {
        /// A mock [`Agent`].
        pub Agent {}

        #[async_trait]
        impl Agent for Agent {
            fn name(&self) -> &str;
            async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError>;
        }
    }

    mockall::mock! {
        /// A mock [`Gate`].
        pub Gate {}

        #[async_trait]
        impl Gate for Gate {
            fn name(&self) -> &str;
            fn required(&self) -> bool;
            async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError>;
        }
    }

    mockall::mock! {
        /// A mock [`Store`].
        pub Store {}

        #[async_trait]
        impl Store for Store {
            async fn load(&self) -> Result<Board, StoreError>;
            async fn persist(&self, changes: &[Change]) -> Result<(), StoreError>;
        }
    }

    mockall::mock! {
        /// A mock [`Prioritizer`].
        pub Prioritizer {}

        impl Prioritizer for Prioritizer {
            fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError>;
        }
    }
}
