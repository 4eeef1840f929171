//! Remote environments: the built-in world served by `sage serve-world` and driven over
//! HTTP gives the expert the same outcomes, skills and scores as in process; a server
//! killed mid-episode, one that answers garbage, one that hangs and one that answers
//! too much each give a bounded error naming the URL, never a hang or a crash.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sage_core::{Environment, Skill, Task};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::sandbox::Isolation;
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};
use sage_trainer::config::RunConfig;
use sage_trainer::environments::http::CallLimits;
use sage_trainer::environments::remote::{RemoteEnv, RemoteSettings};

/// Scenarios of iid the expert plays both ways.
const SCENARIOS: usize = 12;

/// `sage serve-world` on a free port, killed on drop.
struct WorldServer {
    child: Child,
    url: String,
}

impl WorldServer {
    /// `sage serve-world`, which announces its address on standard error.
    fn start() -> WorldServer {
        WorldServer::spawn(
            Command::new(env!("CARGO_BIN_EXE_sage")).arg("serve-world"),
            Announces::OnStderr,
        )
    }

    /// `command --port 0`, once it announces the address it listens on. The server
    /// picks its own port: a port chosen here and handed to it could be taken by another
    /// test's server in between.
    fn spawn(command: &mut Command, announces: Announces) -> WorldServer {
        command.args(["--port", "0"]);
        let (stdout, stderr) = match announces {
            Announces::OnStdout => (Stdio::piped(), Stdio::null()),
            Announces::OnStderr => (Stdio::null(), Stdio::piped()),
        };
        let mut child = command
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("the server starts");
        let output: Box<dyn std::io::Read + Send> = match announces {
            Announces::OnStdout => Box::new(child.stdout.take().expect("piped")),
            Announces::OnStderr => Box::new(child.stderr.take().expect("piped")),
        };
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(output));
        let url = loop {
            let line = lines
                .next()
                .expect("the server exited before announcing its address")
                .expect("the server's output");
            if let Some(start) = line.find("http://") {
                break line[start..].trim().to_owned();
            }
        };
        // The rest of its output is drained, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        WorldServer { child, url }
    }
}

/// Where a server prints the address it listens on.
enum Announces {
    OnStdout,
    OnStderr,
}

impl Drop for WorldServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn settings(timeout: Duration, max_reply_bytes: u64) -> RemoteSettings {
    RemoteSettings {
        call: CallLimits {
            timeout,
            retries: 0,
            max_reply_bytes,
        },
        episode_timeout: Duration::from_secs(120),
        max_turns: 20,
        experiment_name: "test".to_owned(),
        random_seed: 0,
    }
}

/// The iid scenarios `sage serve-world` serves with the default configuration.
fn iid_catalog() -> Arc<Catalog> {
    let config = CatalogConfig {
        iid_seeds: RunConfig::default().eval.iid_seeds,
        ..CatalogConfig::default()
    };
    Arc::new(Catalog::build_splits(&config, &[Split::Iid]).unwrap())
}

#[test]
fn the_expert_over_http_gets_what_it_gets_in_process() {
    let server = WorldServer::start();
    let catalog = iid_catalog();
    let mut local = WorldEnv::new(
        catalog.clone(),
        EnvConfig {
            isolation: Isolation::InProcess,
            ..EnvConfig::default()
        },
    )
    .unwrap();
    let expert = Expert::new(ExpertConfig::new(ExpertMode::Skills));
    let mut remote = RemoteEnv::new(&server.url, settings(Duration::from_secs(30), 1 << 22));
    let (mut local_passed, mut remote_passed) = (0, 0);
    let (mut local_scenarios, mut remote_scenarios) = (0, 0);
    let mut reused = 0;
    for built in catalog.split(Split::Iid).into_iter().take(SCENARIOS) {
        let run = expert.solve(&mut local, built).unwrap();
        let mut library: Vec<Skill> = Vec::new();
        let mut all_passed = true;
        for (task_run, built_task) in run.tasks.iter().zip(&built.tasks) {
            let task: &Task = &built_task.task;
            let reset = remote.reset(task, &library).unwrap();
            assert!(reset.dropped.is_empty(), "{:?}", reset.dropped);
            let (mut used, mut saved): (Vec<String>, Vec<Skill>) = (Vec::new(), Vec::new());
            for message in task_run.messages.iter().filter(|m| m.role == "assistant") {
                let step = remote.step(&message.content).unwrap();
                for name in step.used {
                    if !used.contains(&name) {
                        used.push(name);
                    }
                }
                for skill in step.saved {
                    saved.retain(|s| s.name != skill.name);
                    saved.push(skill);
                }
            }
            let evaluation = remote.evaluate().unwrap();
            assert_eq!(evaluation, task_run.evaluation, "task {}", task.id);
            assert_eq!(used, task_run.used, "skills used by {}", task.id);
            let names = |skills: &[Skill]| -> Vec<String> {
                skills.iter().map(|s| s.name.clone()).collect()
            };
            assert_eq!(
                names(&saved),
                names(&task_run.saved),
                "saved by {}",
                task.id
            );
            for skill in &saved {
                assert!(skill.source.starts_with("def "), "{}", skill.source);
                assert_eq!(skill.origin.task_id, task.id);
            }
            reused += usize::from(!used.is_empty());
            remote_passed += usize::from(evaluation.passed);
            local_passed += usize::from(task_run.evaluation.passed);
            all_passed &= evaluation.passed;
            for skill in saved {
                library.retain(|s| s.name != skill.name);
                library.push(skill);
            }
        }
        remote_scenarios += usize::from(all_passed);
        local_scenarios += usize::from(run.passed());
    }
    // The same TGC and SGC, on tasks that pass and that reuse skills.
    assert_eq!(remote_passed, local_passed);
    assert_eq!(remote_scenarios, local_scenarios);
    assert!(local_passed > SCENARIOS, "the expert passes most tasks");
    assert!(reused >= SCENARIOS, "later tasks reuse skills over HTTP");
}

#[test]
fn a_server_killed_mid_episode_fails_the_call_with_its_url() {
    let mut server = WorldServer::start();
    let catalog = iid_catalog();
    let task = catalog.split(Split::Iid)[0].tasks[0].task.clone();
    let mut env = RemoteEnv::new(&server.url, settings(Duration::from_secs(10), 1 << 22));
    env.reset(&task, &[]).unwrap();
    let step = env.step("```python\nprint('hello')\n```").unwrap();
    assert_eq!(step.observation.trim(), "hello");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let started = Instant::now();
    let error = env
        .step("```python\nprint(1)\n```")
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.contains(&server.url), "{error}");
    assert!(error.contains("cannot be reached"), "{error}");
}

#[test]
fn an_unknown_task_is_named_in_the_servers_error() {
    let server = WorldServer::start();
    let mut env = RemoteEnv::new(&server.url, settings(Duration::from_secs(10), 1 << 22));
    let task = Task {
        id: "iid/no_such_template/0/t1".to_owned(),
        scenario_id: "iid/no_such_template/0".to_owned(),
        instruction: "nothing".to_owned(),
    };
    let error = env.reset(&task, &[]).unwrap_err().to_string();
    assert!(
        error.contains("404") && error.contains("unknown task"),
        "{error}"
    );
    assert!(error.contains("iid/no_such_template/0/t1"), "{error}");
}

/// A server on a free port that answers every connection with `reply` after `delay`.
fn misbehaving_server(reply: Vec<u8>, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let reply = reply.clone();
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                std::thread::sleep(delay);
                let _ = stream.write_all(&reply);
            });
        }
    });
    url
}

fn reply_of(body: &[u8]) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(body);
    reply
}

fn some_task() -> Task {
    Task {
        id: "t".to_owned(),
        scenario_id: "s".to_owned(),
        instruction: "do it".to_owned(),
    }
}

#[test]
fn garbage_a_hang_and_a_huge_reply_are_bounded_errors() {
    let limit = Duration::from_millis(500);
    let garbage = misbehaving_server(reply_of(b"<html>not json</html>"), Duration::ZERO);
    let error = RemoteEnv::new(&garbage, settings(limit, 1 << 20))
        .reset(&some_task(), &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("malformed reply") && error.contains(&garbage),
        "{error}"
    );

    let no_output = misbehaving_server(reply_of(br#"{"result": 1}"#), Duration::ZERO);
    let error = RemoteEnv::new(&no_output, settings(limit, 1 << 20))
        .reset(&some_task(), &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"output\""), "{error}");

    let hanging = misbehaving_server(reply_of(br#"{"output": null}"#), Duration::from_secs(30));
    let started = Instant::now();
    let error = RemoteEnv::new(&hanging, settings(limit, 1 << 20))
        .reset(&some_task(), &[])
        .unwrap_err()
        .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        error.contains("no reply within") && error.contains(&hanging),
        "{error}"
    );

    let mut huge = br#"{"output": ""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', 4 << 20));
    huge.extend_from_slice(br#""}"#);
    let huge = misbehaving_server(reply_of(&huge), Duration::ZERO);
    let error = RemoteEnv::new(&huge, settings(Duration::from_secs(10), 1 << 20))
        .reset(&some_task(), &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("over 1048576 bytes") && error.contains(&huge),
        "{error}"
    );
}

/// `examples/python_env_server.py` on a free port, killed on drop; `None` without a
/// `python3`.
fn python_server() -> Option<WorldServer> {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("no python3: the Python example server is not tested");
        return None;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/python_env_server.py"
    );
    Some(WorldServer::spawn(
        Command::new("python3").arg(script),
        Announces::OnStdout,
    ))
}

#[test]
fn the_python_example_server_saves_loads_and_reuses_a_skill() {
    use sage_trainer::environments::http::Server;
    use sage_trainer::environments::listing::list_split;

    let Some(server) = python_server() else {
        return;
    };
    let limits = settings(Duration::from_secs(10), 1 << 20);
    let listed = list_split(&Server::new(&server.url, limits.call.clone()), "iid", None).unwrap();
    let scenario = listed
        .iter()
        .find(|s| s.template == "toy_sum")
        .expect("a scenario asking for sums");
    let numbers = |task: &Task| -> String {
        let (start, end) = (
            task.instruction.find('[').unwrap(),
            task.instruction.find(']').unwrap(),
        );
        task.instruction[start..=end].to_owned()
    };
    let mut env = RemoteEnv::new(&server.url, limits);
    // Task 1 writes `total`; a failing turn first saves nothing.
    let first = &scenario.scenario.tasks[0];
    env.reset(first, &[]).unwrap();
    let failing = env
        .step("```python\ndef total(xs):\n    return sum(xs)\nprint(1 / 0)\n```")
        .unwrap();
    assert!(
        failing.observation.starts_with("Execution failed"),
        "{}",
        failing.observation
    );
    assert!(failing.saved.is_empty() && !failing.done);
    let code = format!(
        "```python\ndef total(xs):\n    \"\"\"The sum of xs.\"\"\"\n    return sum(xs)\n\
         apis.supervisor.complete_task(answer=total({}))\n```",
        numbers(first)
    );
    let step = env.step(&code).unwrap();
    assert!(step.done, "{}", step.observation);
    assert_eq!(step.saved.len(), 1);
    let skill = step.saved[0].clone();
    assert_eq!(skill.name, "total");
    assert_eq!(skill.docstring.as_deref(), Some("The sum of xs."));
    assert!(env.evaluate().unwrap().passed);
    // Task 2 is given `total` (and a skill that does not load), and reuses it.
    let second = &scenario.scenario.tasks[1];
    let mut broken = skill.clone();
    broken.name = "broken".to_owned();
    broken.source = "def broken(xs):\n    return xs +\n".to_owned();
    let reset = env.reset(second, &[skill, broken]).unwrap();
    assert_eq!(reset.dropped.len(), 1);
    assert_eq!(reset.dropped[0].name, "broken");
    assert!(
        reset.dropped[0].reason.contains("Execution failed"),
        "{:?}",
        reset.dropped
    );
    let code = format!(
        "```python\napis.supervisor.complete_task(answer=total({}))\n```",
        numbers(second)
    );
    let step = env.step(&code).unwrap();
    assert_eq!(step.used, ["total"]);
    assert!(step.saved.is_empty());
    assert!(env.evaluate().unwrap().passed);
    // A wrong answer fails its check.
    env.reset(&scenario.scenario.tasks[2], &[]).unwrap();
    env.step("```python\napis.supervisor.complete_task(answer=-1)\n```")
        .unwrap();
    let evaluation = env.evaluate().unwrap();
    assert!(
        !evaluation.passed && evaluation.score == 0.5,
        "{evaluation:?}"
    );
}
