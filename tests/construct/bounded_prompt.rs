//! The BUILD prompt names the last finished tasks and counts the rest, so its size does not
//! grow with the board (`cargo bench --bench prompt_size` measures it at 10, 100 and 1,000).

use super::*;
use ralph::model::{Change, Task, TaskStatus};

#[tokio::test]
async fn the_build_prompt_names_the_last_ten_finished_tasks_and_counts_the_earlier_ones() {
    let dir = workspace(SPEC);
    let store = MemoryStore::new();
    let mut changes: Vec<Change> = (1..=25)
        .map(|i| {
            Change::Task(
                Task::new(format!("t-{i}"), format!("Finished task number {i}"))
                    .with_acceptance("it is done")
                    .with_status(TaskStatus::Accepted),
            )
        })
        .collect();
    changes.push(Change::Task(
        Task::new("t-26", "Write done.txt").with_acceptance("done.txt exists"),
    ));
    changes.push(seeded());
    store.persist(&changes).await.unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("exists"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    let prompt = agent
        .requests()
        .into_iter()
        .find(|r| r.role == Role::Build)
        .expect("a build run")
        .prompt;
    assert!(prompt.contains("- [x] … 15 earlier tasks\n"), "{prompt}");
    for i in 16..=25 {
        assert!(
            prompt.contains(&format!("- [x] Finished task number {i}\n")),
            "{prompt}"
        );
    }
    assert!(!prompt.contains("Finished task number 15\n"), "{prompt}");
}
