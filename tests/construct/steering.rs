//! The handle a running `Ralph` hands out ([`Ralph::steering`]): from another task of the
//! process that runs it, a person's guidance and answer reach the run in progress, and a
//! gentle stop ends it once the agent in flight is done.

use super::*;

/// Waits until `ready` holds, polling; panics after 30 s.
async fn until(what: &str, ready: impl Fn() -> bool) {
    for _ in 0..600 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("waited 30 s for {what}");
}

#[tokio::test]
async fn the_steering_handle_answers_and_tells_the_run_in_progress() {
    let h = Harness::new(
        one_task()
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().ask("Greet in English or in French?"),
            )
            .on_attempt(Role::Build, "t-1", 2, writes_done()),
    );
    let ralph = h.ralph(|b| b.gate(done_gate()).config("question_wait", "60s"));
    let steering = ralph.steering().from("ana");
    let person = tokio::spawn(async move {
        until("the question", || !steering.questions().is_empty()).await;
        let waiting = steering.questions();
        assert_eq!(waiting[0].0, "t-1", "{waiting:?}");
        steering.tell("Keep the greeting to one line.")?;
        // The handle has no subject: it answers the one question that waits.
        steering.answer("In French.")
    });

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(person.await.unwrap().unwrap(), "q-1");
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(builds.len(), 2, "the question, then the answered attempt");
    for part in ["In French.", "Keep the greeting to one line."] {
        assert!(
            !builds[0].prompt.contains(part),
            "{part:?} before it was said"
        );
        assert!(
            builds[1].prompt.contains(part),
            "{part:?}:\n{}",
            builds[1].prompt
        );
    }
}

#[tokio::test]
async fn the_steering_handle_refuses_an_answer_it_cannot_place() {
    let h = Harness::new(one_task());
    let steering = h.ralph(|b| b).steering();

    let err = steering.answer("In French.").unwrap_err();
    assert!(
        err.to_string().contains("0 questions wait") && err.to_string().contains("about"),
        "{err}"
    );
    let err = steering.about("t-9").answer("In French.").unwrap_err();
    assert!(err.to_string().contains("\"t-9\""), "{err}");
    assert!(matches!(
        steering.stop(),
        Err(Error::NoRunInProgress { .. })
    ));
}

#[tokio::test]
async fn the_steering_handle_stops_the_run_once_its_agent_is_done() {
    let h = Harness::new(
        one_task().on(
            Role::Build,
            "t-1",
            Script::new()
                .delay(Duration::from_millis(600))
                .write("done.txt", "hello\n")
                .answer("Wrote done.txt.\n<TASK_DONE>"),
        ),
    );
    let ralph = h.ralph(|b| b.gate(done_gate()));
    let steering = ralph.steering();
    let agent = h.agent.clone();
    let person = tokio::spawn(async move {
        until("the build", || {
            agent.requests().iter().any(|r| r.role == Role::Build)
        })
        .await;
        steering.stop()
    });

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(person.await.unwrap().unwrap().starts_with("pid "));
    assert!(matches!(outcome, Outcome::Stopped { .. }), "{outcome:?}");
    assert_eq!(outcome.exit_code(), 4);
    // The agent in flight finished and its result was recorded.
    assert!(h.path().join("done.txt").exists());
    assert_ne!(
        h.task("t-1").status,
        TaskStatus::Pending,
        "{:?}",
        h.task("t-1")
    );
}

/// An agent with sessions, as a CLI that reports them: each run gets `s-<role>-<attempt>`,
/// and the session each request asks to resume is kept.
struct WithSessions {
    inner: FakeAgent,
    resumed: std::sync::Mutex<Vec<(Role, u32, Option<String>)>>,
}

#[async_trait]
impl Agent for WithSessions {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let (role, attempt) = (request.role, request.attempt);
        self.resumed
            .lock()
            .expect("not poisoned")
            .push((role, attempt, request.resume.clone()));
        let mut run = self.inner.run(request).await?;
        run.session_id = Some(format!("s-{role}-{attempt}"));
        Ok(run)
    }
}

/// Issue 37: the answer goes on in the session that asked, where the agent's CLI can
/// resume one; no other call resumes anything.
#[tokio::test]
async fn the_answer_s_attempt_resumes_the_session_that_asked() {
    let agent = Arc::new(WithSessions {
        inner: one_task()
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().ask("English or French?"),
            )
            .on_attempt(Role::Build, "t-1", 2, writes_done()),
        resumed: std::sync::Mutex::default(),
    });
    let h = Harness::new(FakeAgent::new());
    let ralph = Ralph::builder()
        .workspace(h.path())
        .agent(agent.clone())
        .store(h.store.clone())
        .gate(done_gate())
        .config("question_wait", "60s")
        .build()
        .unwrap();
    let steering = ralph.steering().about("t-1");
    let person = tokio::spawn(async move {
        until("the question", || !steering.questions().is_empty()).await;
        steering.answer("In French.")
    });

    let outcome = ralph.construct("spec.md").await.unwrap();

    person.await.unwrap().unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let resumed = agent.resumed.lock().expect("not poisoned").clone();
    let with_resume: Vec<_> = resumed.iter().filter(|(_, _, r)| r.is_some()).collect();
    assert_eq!(
        with_resume,
        [&(Role::Build, 2, Some("s-build-1".to_owned()))],
        "{resumed:?}"
    );
}
