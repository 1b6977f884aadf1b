//! What the test binaries of the vendor CLIs (codex, gemini, opencode) share: a rig holding
//! a git workspace, a home for the CLI, its scripted API and the agent pointed at both, and
//! the adversarial cases every CLI agent must pass ([`cli_agent_suite!`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::agent::{Agent, AgentEvent, AgentRequest, AgentRun, Role};

/// A scripted tool call's command that waits up to 8 s for a file `go` in its directory,
/// then writes `seen.txt`: `live` if it came, `late` if not. With
/// [`go_at_the_first_tool_use`], it shows whether the agent's events arrive while the CLI
/// still runs (the command runs inside the CLI, so an event sent after the run comes late).
pub const WAIT_FOR_GO: &str = "timeout 8 sh -c 'until [ -f go ]; do sleep 0.1; done'; if [ -f go ]; then echo live > seen.txt; else echo late > seen.txt; fi";

/// Agent events that create `go` in `dir` at the first tool call (see [`WAIT_FOR_GO`]).
pub fn go_at_the_first_tool_use(dir: &Path) -> impl Fn(AgentEvent) + Send + Sync + 'static {
    let go = dir.join("go");
    move |event: AgentEvent| {
        if matches!(event, AgentEvent::ToolUse { .. }) && !go.exists() {
            std::fs::write(&go, "").expect("write go");
        }
    }
}

/// One CLI under test: how its API is served and its agent set up.
#[allow(async_fn_in_trait)] // only these tests implement it
pub trait CliUnderTest {
    /// The agent.
    type Agent: Agent;
    /// The scripted API the CLI talks to.
    type Api;
    /// One scripted reply of that API.
    type Reply;
    /// The agent's name: its `ralph.toml` section and `--agent` value.
    const NAME: &'static str;
    /// The model the agent asks for.
    const MODEL: &'static str;
    /// Whether the CLI prints an `error` event for an API error it then recovers from.
    const PRINTS_RECOVERED_ERRORS: bool;
    /// The least idle timeout the agent gives a run, whatever it is set to.
    const IDLE_FLOOR: Duration = Duration::ZERO;

    /// Serves `replies`, in order.
    async fn serve(replies: Vec<Self::Reply>) -> Self::Api;
    /// The arguments and environment that point the CLI at `api`, with `home` as its home.
    fn settings(api: &Self::Api, home: &Path) -> (Vec<String>, Vec<(String, String)>);
    /// The agent running `bin` with the model, `args` and `env`.
    fn agent(bin: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> Self::Agent;
    /// Asserts the tokens of the two-turn tool run, as the API scripted them.
    fn assert_usage(usage: &ralph::agent::Usage);
}

/// A workspace (a git repository), a home for the CLI, the fake API and the agent pointed at
/// both.
pub struct Rig<C: CliUnderTest> {
    pub dir: tempfile::TempDir,
    pub home: tempfile::TempDir,
    pub api: C::Api,
    pub agent: C::Agent,
}

impl<C: CliUnderTest> Rig<C> {
    /// The agent's name: its `ralph.toml` section and `--agent` value.
    pub const NAME: &'static str = C::NAME;

    /// The model its `ralph.toml` section names.
    pub const MODEL: &'static str = C::MODEL;

    /// See [`CliUnderTest::PRINTS_RECOVERED_ERRORS`].
    pub const PRINTS_RECOVERED_ERRORS: bool = C::PRINTS_RECOVERED_ERRORS;

    /// The idle timeout a run gets when `idle` is set: see [`CliUnderTest::IDLE_FLOOR`].
    pub fn idle_after(idle: Duration) -> Duration {
        idle.max(C::IDLE_FLOOR)
    }

    /// See [`CliUnderTest::assert_usage`].
    pub fn assert_usage(usage: &ralph::agent::Usage) {
        C::assert_usage(usage);
    }

    pub async fn new(bin: PathBuf, replies: impl IntoIterator<Item = C::Reply>) -> Self {
        let dir = super::messages_api::git_repo();
        let home = tempfile::tempdir().unwrap();
        let api = C::serve(replies.into_iter().collect()).await;
        let (args, env) = C::settings(&api, home.path());
        let agent = C::agent(bin, args, env);
        Rig {
            dir,
            home,
            api,
            agent,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub async fn run(&self, role: Role, prompt: &str) -> AgentRun {
        self.run_with(role, prompt, |_| {}).await
    }

    /// Where [`run_with`](Self::run_with) logs.
    fn log(&self) -> PathBuf {
        self.home.path().join("logs/run.log")
    }

    /// What the CLI printed on stdout in the last run: its stdout file beside the log, else
    /// the log.
    pub fn stdout(&self) -> String {
        let log = self.log();
        let stdout = log.with_extension("stdout");
        std::fs::read_to_string(if stdout.exists() { stdout } else { log }).unwrap()
    }

    /// A run with its log in the CLI's home, recorded as a transcript when asked for.
    pub async fn run_with(
        &self,
        role: Role,
        prompt: &str,
        events: impl Fn(AgentEvent) + Send + Sync + 'static,
    ) -> AgentRun {
        let log = self.log();
        let request = AgentRequest::new(role, prompt, self.path())
            .sandbox(super::sandbox_for(role, self.path()))
            .log_path(&log)
            .timeout(Duration::from_secs(120))
            .on_event(events);
        let run = self.agent.run(request).await.unwrap();
        super::record_transcript(C::NAME, prompt, &log);
        run
    }

    /// The `ralph.toml` section that sets up `bin` as the rig's agent is.
    pub fn toml(&self, bin: &Path) -> String {
        let (args, env) = C::settings(&self.api, self.home.path());
        let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
        format!(
            "[{}]\nbin = {:?}\nmodel = {:?}\nargs = [{}]\nenv = {{ {} }}\n",
            C::NAME,
            bin.display().to_string(),
            C::MODEL,
            args.join(", "),
            env.join(", ")
        )
    }
}

/// The cases every vendor CLI's agent must pass, run with the real CLI `$skip` finds (the
/// caller's `Rig` and `Reply` are used): a tool call that writes a file; a marker that does
/// not count (in prose, in an earlier turn, in tool output, before more text); background
/// jobs of a tool killed; a stalled stream cut by the idle timeout; a huge answer kept whole
/// with a bounded buffer; an answer over the kept buffer read to its marker; an API error
/// the CLI recovers from, then a final answer, done; a read-only role that cannot write;
/// `ralph construct --agent` taking a spec to the end; tool calls seen while the CLI still
/// runs.
#[allow(unused_macros)]
macro_rules! cli_agent_suite {
    ($skip:expr) => {
        #[tokio::test]
        async fn a_tool_call_writes_the_file_and_the_final_answer_claims_done() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(
                bin,
                [
                    Reply::shell("echo hello > hello.txt"),
                    Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
                ],
            )
            .await;

            let run = rig.run(Role::Build, "Write hello.txt").await;

            assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
            assert_eq!(run.claim(), Claim::Done);
            assert_eq!(
                std::fs::read_to_string(rig.path().join("hello.txt")).unwrap(),
                "hello\n"
            );
            assert!(run.session_id.is_some());
            Rig::assert_usage(&run.usage);
            assert!(
                rig.api.requests().await[0]
                    .to_string()
                    .contains("Write hello.txt")
            );
        }

        #[tokio::test]
        async fn a_marker_in_prose_in_an_earlier_turn_in_tool_output_or_before_more_text_is_not_done()
         {
            let Some(bin) = $skip else { return };
            // Each script, and the final answer it leaves.
            let cases = [
                (
                    vec![Reply::text("I will print <TASK_DONE> when done.")],
                    "I will print <TASK_DONE> when done.",
                ),
                (
                    vec![
                        Reply::text_then_shell("<TASK_DONE>", "true"),
                        Reply::text("Still more to do."),
                    ],
                    "Still more to do.",
                ),
                (
                    vec![Reply::shell("echo '<TASK_DONE>'"), Reply::text("Checked.")],
                    "Checked.",
                ),
                (
                    vec![Reply::text("<TASK_DONE>\nBut the tests fail.")],
                    "<TASK_DONE>\nBut the tests fail.",
                ),
            ];
            for (script, answer) in cases {
                let rig = Rig::new(bin.clone(), script).await;
                let run = rig.run(Role::Build, "p").await;
                assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
                assert_eq!(run.final_text, answer);
                assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");
            }
        }

        #[tokio::test]
        async fn background_jobs_of_a_tool_do_not_survive_the_run() {
            let Some(bin) = $skip else { return };
            let mark = format!("{}-{}", Rig::NAME, std::process::id());
            let rig = Rig::new(
                bin,
                [
                    Reply::shell(format!(
                        "touch started; AGENT_LEFTOVER_MARK={mark} setsid sleep 300 > /dev/null 2>&1 & AGENT_LEFTOVER_MARK={mark} nohup sleep 301 > /dev/null 2>&1 &"
                    )),
                    Reply::text("Started.\n<TASK_DONE>"),
                ],
            )
            .await;

            let run = rig.run(Role::Build, "p").await;

            assert_eq!(run.claim(), Claim::Done, "{run:?}");
            assert!(rig.path().join("started").exists(), "the tool ran");
            let left = support::messages_api::alive_with_env("AGENT_LEFTOVER_MARK", &mark);
            assert!(left.is_empty(), "left running: {left:?}");
        }

        #[tokio::test]
        async fn a_stalled_stream_is_cut_by_the_idle_timeout() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(bin, [Reply::stall(std::time::Duration::from_secs(60))]).await;
            let agent = rig
                .agent
                .clone()
                .idle_timeout(std::time::Duration::from_secs(5));
            let request = AgentRequest::new(Role::Build, "p", rig.path())
                .sandbox(support::sandbox(rig.path()))
                .timeout(std::time::Duration::from_secs(120));

            let run = agent.run(request).await.unwrap();

            // opencode's floor raises the 5 s: its silent start is not a stall.
            let idle = AgentExit::Silent {
                after: Rig::idle_after(std::time::Duration::from_secs(5)),
            };
            assert_eq!(run.exit, idle, "{run:?}");
            // Cut on the stalled reply, not before the CLI had asked for it.
            assert_eq!(rig.api.requests().await.len(), 1, "{run:?}");
        }

        #[tokio::test]
        async fn a_huge_answer_completes_with_a_bounded_buffer() {
            let Some(bin) = $skip else { return };
            // Numbered lines: a repeated chunk would trip gemini's loop detection.
            let big: String = (0..200_000)
                .map(|i| format!("line {i} of the report\n"))
                .collect();
            let rig = Rig::new(bin, [Reply::text(format!("{big}<TASK_DONE>"))]).await;

            let run = rig.run(Role::Build, "p").await;

            assert_eq!(run.claim(), Claim::Done, "{:?}", run.exit);
            assert_eq!(run.final_text.len(), big.len() + "<TASK_DONE>".len());
        }

        /// A final answer larger than all the agent keeps of the CLI's output, ending in
        /// the marker: done, read from its head to its marker. Its line was never held: it
        /// was shrunk as it streamed by, its text cut to its head and tail (what that costs
        /// however long the line is measured in `agent::kept`; this process also holds the
        /// scripted API's copies of the answer, so its own peak says little).
        #[tokio::test]
        async fn a_final_answer_over_the_kept_buffer_is_read_to_its_marker() {
            let Some(bin) = $skip else { return };
            let big = support::cli_rig::numbered_lines(ralph_loop_agents::agent::EVENTS_KEPT + 64 * 1024);
            let rig = Rig::new(bin, [Reply::text(format!("{big}<TASK_DONE>"))]).await;

            let run = rig.run(Role::Build, "p").await;

            assert_eq!(run.claim(), Claim::Done, "{:?}", run.exit);
            assert!(run.final_text.starts_with("line 0 of the report\n"));
            assert!(run.final_text.contains(" bytes omitted …]\n"));
            assert!(run.final_text.len() < 1 << 20, "{}", run.final_text.len());
            assert_eq!(run.oversized_lines, 1, "{run:?}");
        }

        /// An API error the CLI recovers from (a 429 it waits out, a stream broken off
        /// mid-answer, ended or failed), then a complete final answer: the run is done,
        /// however the CLI showed the error on the way.
        #[tokio::test]
        async fn an_error_the_cli_recovers_from_then_a_final_answer_is_done() {
            let Some(bin) = $skip else { return };
            for first in [
                Reply::retry_after(1),
                Reply::dropped("Half an ans"),
                Reply::failed_midway("Half an ans"),
            ] {
                let rig = Rig::new(
                    bin.clone(),
                    [first.clone(), Reply::text("Done.\n<TASK_DONE>")],
                )
                .await;

                let run = rig.run(Role::Build, "p").await;

                assert_eq!(run.exit, AgentExit::Completed, "{first:?}: {run:?}");
                assert_eq!(run.claim(), Claim::Done, "{first:?}: {run:?}");
                assert_eq!(rig.api.requests().await.len(), 2, "{first:?}: no retry");
                let stdout = rig.stdout();
                assert_eq!(
                    stdout.contains(r#"{"type":"error""#),
                    Rig::PRINTS_RECOVERED_ERRORS,
                    "{first:?}: {stdout}"
                );
            }
        }

        #[tokio::test]
        async fn a_read_only_role_cannot_write_files() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(
                bin,
                [
                    Reply::shell("echo sneaky > sneaky.txt"),
                    Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"ok"}"#),
                ],
            )
            .await;

            let run = rig.run(Role::Verify, "Judge t-1").await;

            assert!(!rig.path().join("sneaky.txt").exists(), "a read-only run wrote");
            assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
        }

        /// `ralph construct spec.md --agent <name>` takes a demo-sized spec to the end, with
        /// the CLI set up in `ralph.toml`.
        #[tokio::test]
        async fn ralph_construct_with_the_agent_completes_a_spec() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(bin.clone(), construct_script()).await;
            std::fs::write(
                rig.path().join("spec.md"),
                "# Hello\nWrite hello.txt saying hello.\n",
            )
            .unwrap();
            std::fs::write(rig.path().join("ralph.toml"), rig.toml(&bin)).unwrap();

            let out = std::process::Command::new(support::ralph_bin())
                .args(["construct", "spec.md", "--agent", Rig::NAME])
                .current_dir(rig.path())
                .output()
                .unwrap();

            assert_eq!(
                out.status.code(),
                Some(0),
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                std::fs::read_to_string(rig.path().join("hello.txt")).unwrap(),
                "hello\n"
            );
        }

        /// Issue 38: the CLI reports no dollars, so a price in `ralph.toml` for its model
        /// prices each run (marked `priced` in the ledger), `max_cost_usd` counts it, and
        /// `ralph status` says where the figure comes from.
        #[tokio::test]
        async fn a_price_for_the_cli_s_model_prices_its_runs_against_the_budget() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(bin.clone(), construct_script()).await;
            std::fs::write(rig.path().join("spec.md"), "# Hello\nWrite hello.txt.\n").unwrap();
            // 10 cents an uncached input token: the investigation alone is over the budget.
            let toml = format!(
                "max_cost_usd = 1.0\n{}\n[prices.{:?}]\ninput = 100000.0\ncached_input = 0.0\noutput = 0.0\n",
                rig.toml(&bin),
                Rig::MODEL
            );
            std::fs::write(rig.path().join("ralph.toml"), toml).unwrap();
            let ralph = |args: &[&str]| {
                std::process::Command::new(support::ralph_bin())
                    .args(args)
                    .current_dir(rig.path())
                    .output()
                    .unwrap()
            };

            let out = ralph(&["construct", "spec.md", "--agent", Rig::NAME]);

            let said = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(2), "budget exhausted: {said}");
            let ledger = std::fs::read_to_string(rig.path().join(".ralph/spend.jsonl")).unwrap();
            let run: serde_json::Value = ledger
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .find(|l| l["role"] == "investigate" && l.get("estimate").is_none())
                .expect(&ledger);
            let input = run["input_tokens"].as_f64().unwrap();
            assert!(input > 10.0, "{run}");
            assert_eq!(run["priced"], true, "{run}");
            let cost = run["cost_usd"].as_f64().unwrap();
            assert!((cost - input * 0.1).abs() < 1e-6, "{run}");
            let status = ralph(&["status"]);
            let status = String::from_utf8_lossy(&status.stdout);
            assert!(status.contains("priced by [prices]"), "{status}");
        }

        /// The hostile suite through the CLI's shell tool (issue 34): in `ralph construct`,
        /// with planted secrets in ralph's environment, the tool makes every attempt of
        /// [`ATTACKS`](support::hostile::ATTACKS); each is refused, and the run completes.
        #[tokio::test]
        async fn every_attempt_of_the_cli_s_shell_tool_is_refused_and_the_construct_completes() {
            let Some(bin) = $skip else { return };
            if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
                eprintln!("skipped: no bubblewrap here");
                return;
            }
            let target = support::hostile::Target::new();
            let command = format!(
                "HOSTILE_REPORT=attacks.txt sh {}; echo hello > hello.txt",
                target.attacks().display()
            );
            let rig = Rig::new(bin.clone(), construct_script_running(&command)).await;
            let ws = rig.path().to_path_buf();
            std::fs::write(ws.join("spec.md"), "# Hello\nWrite hello.txt saying hello.\n")
                .unwrap();
            std::fs::write(
                ws.join("ralph.toml"),
                format!(
                    "{}\n[sandbox]\nmode = \"required\"\nenv = [\"HOSTILE_*\"]\n",
                    rig.toml(&bin)
                ),
            )
            .unwrap();
            std::fs::create_dir_all(ws.join("build/ralph-logs")).unwrap();
            let git_config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
            let mut env = target.env(None);
            env.retain(|(k, _)| k != "HOSTILE_WS");
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg("HOSTILE_RALPH_PID=$$ exec \"$0\" \"$@\"")
                .arg(support::ralph_bin())
                .args(["construct", "spec.md", "--agent", Rig::NAME])
                .current_dir(&ws)
                .envs(env)
                .env("HOSTILE_WS", &ws)
                .output()
                .unwrap();

            let printed = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{printed}");
            let report = std::fs::read_to_string(ws.join("attacks.txt")).unwrap();
            let lines: Vec<String> = report.lines().map(str::to_owned).collect();
            support::hostile::assert_all_refused(&lines, &[], Rig::NAME);
            target.assert_untouched(&ws, &git_config, &printed, &lines);
            assert_eq!(
                std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
                "hello\n"
            );
        }

        #[tokio::test]
        async fn tool_calls_are_seen_while_the_cli_still_runs() {
            let Some(bin) = $skip else { return };
            let rig = Rig::new(
                bin,
                [
                    Reply::shell("true"),
                    Reply::shell(support::cli_rig::WAIT_FOR_GO),
                    Reply::text("Done.\n<TASK_DONE>"),
                ],
            )
            .await;

            let events = support::cli_rig::go_at_the_first_tool_use(rig.path());
            let run = rig.run_with(Role::Build, "Wait for go", events).await;

            assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
            assert_eq!(
                std::fs::read_to_string(rig.path().join("seen.txt")).unwrap(),
                "live\n"
            );
        }
    };
}
#[allow(unused_imports)]
pub(crate) use cli_agent_suite;

/// Numbered lines (`line 7 of the report`), at least `bytes` of them: a repeated chunk would
/// trip gemini's loop detection.
pub fn numbered_lines(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 64);
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(&format!("line {i} of the report\n"));
        i += 1;
    }
    text
}
