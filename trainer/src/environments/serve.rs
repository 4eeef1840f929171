//! `sage serve-world`: the built-in world behind the remote-environment protocol (see
//! `docs/remote-env.md`), so that the remote path runs against a real server process
//! and any language can drive the world over HTTP.
//!
//! One server holds one episode at a time, like an AppWorld environment server: a
//! `/initialize` replaces the episode before it. Agent code runs in the world's sandbox
//! (a worker process). Beside the protocol's `output`, `/execute` replies carry a `sage`
//! field with what the sandbox traced: `failed` for a library skill's definition, and
//! for a turn the library skills whose body ran (`used`) and this episode's functions
//! that ran without error (`saved`). `GET /scenarios/{split}` lists a split's scenarios.

use std::io::Read;
use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response};

use sage_core::Environment;
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::scenarios::{Catalog, Split};

use super::listing::percent_decode;

/// Bytes a request body may hold (agent code is at most 64 KiB; this leaves room for
/// JSON escapes).
const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// Turns an episode may take when `/initialize` names no `max_interactions`.
const DEFAULT_MAX_TURNS: u32 = 1000;

/// A protocol error: its HTTP status and the `detail` of the reply.
struct Failure {
    status: u16,
    detail: String,
}

fn failure(status: u16, detail: impl Into<String>) -> Failure {
    Failure {
        status,
        detail: detail.into(),
    }
}

/// A 200 reply: the protocol's `output`, and for `/execute` what the sandbox traced.
struct Reply {
    output: Value,
    sage: Option<Value>,
}

impl Reply {
    fn traced(output: Value, sage: Value) -> Reply {
        Reply {
            output,
            sage: Some(sage),
        }
    }
}

impl From<Value> for Reply {
    fn from(output: Value) -> Reply {
        Reply { output, sage: None }
    }
}

/// The served world: its catalogs, and the episode in progress.
pub struct WorldServer {
    catalogs: Vec<Arc<Catalog>>,
    env: Option<(usize, u32, WorldEnv)>,
    task_id: Option<String>,
}

impl WorldServer {
    /// A server of the scenarios of `catalogs` (a task is looked up in each in turn).
    pub fn new(catalogs: Vec<Arc<Catalog>>) -> WorldServer {
        WorldServer {
            catalogs,
            env: None,
            task_id: None,
        }
    }

    /// Serves on `address` (`host:port`) until the process ends, or until its parent
    /// process is gone when `exit_with_parent` is set (a server a pool started).
    pub fn serve(
        mut self,
        address: &str,
        exit_with_parent: bool,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let server = tiny_http::Server::http(address)?;
        let parent = std::os::unix::process::parent_id();
        // The address bound, so that `--port 0` announces the port the system chose.
        let bound = server
            .server_addr()
            .to_ip()
            .map_or_else(|| address.to_owned(), |bound| bound.to_string());
        eprintln!("serving the built-in world on http://{bound}");
        loop {
            if exit_with_parent && std::os::unix::process::parent_id() != parent {
                return Ok(());
            }
            let Some(request) = server.recv_timeout(std::time::Duration::from_millis(500))? else {
                continue;
            };
            self.answer(request);
        }
    }

    fn answer(&mut self, mut request: Request) {
        let method = request.method().clone();
        let url = request.url().to_owned();
        let mut body = String::new();
        let read = request
            .as_reader()
            .take(MAX_REQUEST_BYTES + 1)
            .read_to_string(&mut body);
        let result = match read {
            Err(e) => Err(failure(400, format!("unreadable request body: {e}"))),
            Ok(n) if n as u64 > MAX_REQUEST_BYTES => Err(failure(
                413,
                format!("request body over {MAX_REQUEST_BYTES} bytes"),
            )),
            Ok(_) => self.route(&method, &url, &body),
        };
        let (status, reply) = match result {
            Ok(Reply { output, sage: None }) => (200, json!({ "output": output })),
            Ok(Reply {
                output,
                sage: Some(sage),
            }) => (200, json!({ "output": output, "sage": sage })),
            Err(f) => (f.status, json!({ "detail": f.detail })),
        };
        let header =
            Header::from_bytes("content-type", "application/json").expect("a valid header");
        let response = Response::from_string(reply.to_string())
            .with_status_code(status)
            .with_header(header);
        if let Err(e) = request.respond(response) {
            tracing::debug!("{url}: the reply could not be sent: {e}");
        }
    }

    fn route(&mut self, method: &Method, url: &str, body: &str) -> Result<Reply, Failure> {
        let path = url.split('?').next().unwrap_or_default();
        match (method, path) {
            (Method::Get, "/") => Ok(json!("the built-in world of sage").into()),
            (Method::Get, _) if path.starts_with("/tasks/") => {
                self.task(&path["/tasks/".len()..]).map(Reply::from)
            }
            (Method::Get, _) if path.starts_with("/scenarios/") => self
                .scenarios(&path["/scenarios/".len()..])
                .map(Reply::from),
            (Method::Post, _) => {
                let body: Value = serde_json::from_str(body)
                    .map_err(|e| failure(422, format!("the body is not JSON: {e}")))?;
                match path {
                    "/initialize" => self.initialize(&body).map(Reply::from),
                    "/execute" => self.execute(&body),
                    "/task_completed" => self.task_completed(&body).map(Reply::from),
                    "/evaluate" => self.evaluate(&body).map(Reply::from),
                    "/close" | "/close_all" => {
                        self.task_id = None;
                        Ok(Value::Null.into())
                    }
                    _ => Err(unknown_endpoint(path)),
                }
            }
            _ => Err(unknown_endpoint(path)),
        }
    }

    /// The catalog holding `task_id`.
    fn catalog_of(&self, task_id: &str) -> Result<usize, Failure> {
        self.catalogs
            .iter()
            .position(|c| c.task(task_id).is_ok())
            .ok_or_else(|| failure(404, format!("unknown task {task_id}")))
    }

    fn task(&self, encoded: &str) -> Result<Value, Failure> {
        let id = percent_decode(encoded).ok_or_else(|| failure(400, "malformed task id"))?;
        let catalog = &self.catalogs[self.catalog_of(&id)?];
        let task = catalog.task(&id).map_err(|e| failure(404, e.to_string()))?;
        let built = task.task();
        Ok(json!({
            "task_id": built.task.id,
            "scenario_id": built.task.scenario_id,
            "instruction": built.task.instruction,
        }))
    }

    fn scenarios(&self, encoded: &str) -> Result<Value, Failure> {
        let name = percent_decode(encoded).ok_or_else(|| failure(400, "malformed split"))?;
        let split: Split = name
            .parse()
            .map_err(|e: sage_envs::names::UnknownName| failure(404, e.to_string()))?;
        let scenarios: Vec<Value> = self
            .catalogs
            .iter()
            .flat_map(|c| c.split(split))
            .map(|built| {
                let tasks: Vec<Value> = built
                    .tasks
                    .iter()
                    .map(|t| json!({ "id": t.task.id, "instruction": t.task.instruction }))
                    .collect();
                json!({ "id": built.scenario.id, "template": built.template.name, "tasks": tasks })
            })
            .collect();
        Ok(Value::Array(scenarios))
    }

    fn initialize(&mut self, body: &Value) -> Result<Value, Failure> {
        let task_id = string_field(body, "task_id")?;
        let catalog = self.catalog_of(&task_id)?;
        let max_turns = body
            .get("max_interactions")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_MAX_TURNS, |n| {
                n.clamp(1, u64::from(u32::MAX)) as u32
            });
        let reusable = matches!(&self.env, Some((c, t, _)) if *c == catalog && *t == max_turns);
        if !reusable {
            let config = EnvConfig {
                max_turns,
                ..EnvConfig::default()
            };
            let env = WorldEnv::new(self.catalogs[catalog].clone(), config)
                .map_err(|e| failure(500, e.to_string()))?;
            self.env = Some((catalog, max_turns, env));
        }
        let (_, _, env) = self.env.as_mut().expect("made above");
        let task = env
            .catalog()
            .task(&task_id)
            .map_err(|e| failure(404, e.to_string()))?
            .task()
            .task
            .clone();
        env.reset(&task, &[])
            .map_err(|e| failure(500, e.to_string()))?;
        self.task_id = Some(task_id.clone());
        Ok(json!({ "task_id": task_id, "instruction": task.instruction }))
    }

    /// The episode of `body`'s task.
    fn episode(&mut self, body: &Value) -> Result<&mut WorldEnv, Failure> {
        let task_id = string_field(body, "task_id")?;
        match (&self.task_id, &mut self.env) {
            (Some(current), Some((_, _, env))) if *current == task_id => Ok(env),
            _ => Err(failure(
                409,
                format!("task {task_id} is not initialized on this server"),
            )),
        }
    }

    fn execute(&mut self, body: &Value) -> Result<Reply, Failure> {
        let code = string_field(body, "code")?;
        let library = body.get("library").and_then(Value::as_bool) == Some(true);
        let env = self.episode(body)?;
        if library {
            let loaded = env
                .load_skill(&code)
                .map_err(|e| failure(409, e.to_string()))?;
            return Ok(match loaded {
                Ok(_) => Reply::traced(json!(""), json!({ "failed": false })),
                Err(reason) => Reply::traced(
                    json!(format!("Execution failed. {reason}")),
                    json!({ "failed": true }),
                ),
            });
        }
        let result = env
            .run_code(&code)
            .map_err(|e| failure(409, e.to_string()))?;
        let saved: Vec<&str> = result.saved.iter().map(|s| s.name.as_str()).collect();
        Ok(Reply::traced(
            json!(result.observation),
            json!({ "used": result.used, "saved": saved }),
        ))
    }

    fn task_completed(&mut self, body: &Value) -> Result<Value, Failure> {
        let env = self.episode(body)?;
        Ok(json!(env.world().is_some_and(|w| w.is_complete())))
    }

    fn evaluate(&mut self, body: &Value) -> Result<Value, Failure> {
        let env = self.episode(body)?;
        let report = env.report().map_err(|e| failure(409, e.to_string()))?;
        let passes: Vec<&str> = report
            .checks
            .iter()
            .filter(|c| c.passed)
            .map(|c| c.name.as_str())
            .collect();
        let failures: Vec<Value> = report
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| json!({ "name": c.name, "detail": c.detail }))
            .collect();
        Ok(json!({
            "success": report.passed(),
            "pass_count": passes.len(),
            "num_tests": report.checks.len(),
            "passes": passes,
            "failures": failures,
        }))
    }
}

/// `body[name]` as a string, or a 422 naming it.
fn string_field(body: &Value, name: &str) -> Result<String, Failure> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| failure(422, format!("the body has no string \"{name}\"")))
}

fn unknown_endpoint(path: &str) -> Failure {
    failure(
        404,
        format!(
            "{path}: not served (POST /initialize, /execute, /task_completed, /evaluate, \
             /close, /close_all; GET /tasks/{{id}}, /scenarios/{{split}})"
        ),
    )
}
