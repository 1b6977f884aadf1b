//! mockall mocks of the four seams, for interaction tests (feature `test-util`).
//!
//! Mocks are for asserting *how* the engine talks to a seam (order, arguments, counts).
//! For scripted end-to-end runs use [`FakeAgent`](crate::FakeAgent), real
//! [`ShellGate`](crate::ShellGate)s and a [`MemoryStore`](crate::MemoryStore).
//!
//! Each mocks the seam's required methods; its provided methods keep the trait's default:
//!
//! | mock | mocked (`expect_…`) | the trait's default |
//! |---|---|---|
//! | [`MockAgent`] | `name`, `run` | `check` (Ok), `configure` (takes nothing), `in_process` (true) |
//! | [`MockGate`] | `name`, `required`, `check` | `in_process` (true) |
//! | [`MockStore`] | `load`, `persist` | `edited_externally` (false), `recovered` (none), `location` (none), `repair` (nothing to repair) |
//! | [`MockPrioritizer`] | `prioritize` | `prioritize_on` (calls `prioritize`) |
//!
//! An `async fn` of a seam is mocked by what it returns, not by a future:
//! `expect_run().returning(|request| Err(…))`.
//!
//! ```
//! use ralph::mock::MockAgent;
//! use ralph::{AgentError, Error, MemoryStore, Ralph};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("spec.md"), "# Greeter\n")?;
//! let mut agent = MockAgent::new();
//! agent.expect_name().return_const("mock".to_owned());
//! // Its one run: the investigation of the spec, which cannot start.
//! agent.expect_run().times(1).returning(|request| {
//!     assert_eq!(request.role, ralph::Role::Investigate);
//!     Err(AgentError::Spawn {
//!         program: "mock".into(),
//!         source: std::io::Error::from(std::io::ErrorKind::NotFound),
//!     })
//! });
//! let ralph = Ralph::builder()
//!     .workspace(dir.path())
//!     .agent(agent)
//!     .store(MemoryStore::new())
//!     .build()?;
//! // An agent that cannot run at all ends the run (see `Agent`'s page: what ralph retries).
//! assert!(matches!(ralph.construct("spec.md").await, Err(Error::Agent(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
