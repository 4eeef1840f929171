//! One environment server's HTTP endpoint: JSON requests, `{"output": ...}` replies, each
//! call bounded in time and in the size of what comes back, idempotent calls retried a
//! few times when the server cannot be reached.

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

/// The limits of the calls to a server.
#[derive(Clone, Debug, PartialEq)]
pub struct CallLimits {
    /// Time one call may take, connecting and reading the reply included.
    pub timeout: Duration,
    /// Further tries of an idempotent call that could not reach the server or timed out.
    pub retries: u32,
    /// Bytes a reply may hold.
    pub max_reply_bytes: u64,
}

/// Why a call to a server failed. Every message names the URL it called.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// Nothing answered: the server is down, or the address is wrong.
    Unreachable {
        /// The URL called.
        url: String,
        /// What the connection reported.
        detail: String,
    },
    /// The server took longer than the call's time limit.
    Timeout {
        /// The URL called.
        url: String,
        /// The limit, in seconds.
        seconds: f64,
    },
    /// The server answered with an error status (the task is unknown, it failed).
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The server's explanation (its `detail`, or the start of its reply).
        detail: String,
    },
    /// The reply is not a JSON object with an `output`.
    Malformed {
        /// The URL called.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The reply is larger than the limit.
    TooLarge {
        /// The URL called.
        url: String,
        /// The limit, in bytes.
        limit: u64,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Unreachable { url, detail } => {
                write!(
                    f,
                    "{url}: the environment server cannot be reached ({detail})"
                )
            }
            CallError::Timeout { url, seconds } => {
                write!(
                    f,
                    "{url}: no reply within {seconds} s ([env] call_timeout_s)"
                )
            }
            CallError::Status {
                url,
                status,
                detail,
            } => write!(f, "{url}: the server answered {status}: {detail}"),
            CallError::Malformed { url, detail } => {
                write!(f, "{url}: malformed reply: {detail}")
            }
            CallError::TooLarge { url, limit } => write!(
                f,
                "{url}: the reply is over {limit} bytes ([env] max_reply_bytes)"
            ),
        }
    }
}

impl std::error::Error for CallError {}

impl CallError {
    /// Whether trying again may help: the server was not reached or did not answer.
    fn transient(&self) -> bool {
        matches!(
            self,
            CallError::Unreachable { .. } | CallError::Timeout { .. }
        ) || matches!(self, CallError::Status { status, .. } if matches!(status, 502..=504))
    }
}

/// Characters of a server's error reply quoted in a [`CallError::Status`].
const QUOTED_CHARS: usize = 300;

/// A server's base URL and the agent that calls it.
#[derive(Clone, Debug)]
pub struct Server {
    base: String,
    agent: ureq::Agent,
    limits: CallLimits,
}

impl Server {
    /// The server at `base_url` (`http://host:port`, a trailing `/` ignored). Calls go
    /// straight to it, never through a proxy of the environment.
    pub fn new(base_url: &str, limits: CallLimits) -> Server {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(limits.timeout))
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .build()
            .into();
        Server {
            base: base_url.trim_end_matches('/').to_owned(),
            agent,
            limits,
        }
    }

    /// Its base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// POSTs `body` to `path` and returns the reply's fields (`output` among them).
    /// `idempotent` calls are retried when the server was not reached.
    pub fn post(
        &self,
        path: &str,
        body: &Value,
        idempotent: bool,
    ) -> Result<Map<String, Value>, CallError> {
        self.with_retries(idempotent, || {
            let url = format!("{}{path}", self.base);
            let reply = self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(body.to_string());
            self.read(url, reply)
        })
    }

    /// GETs `path` (retried when the server was not reached) and returns the reply's
    /// fields.
    pub fn get(&self, path: &str) -> Result<Map<String, Value>, CallError> {
        self.with_retries(true, || {
            let url = format!("{}{path}", self.base);
            let reply = self.agent.get(&url).call();
            self.read(url, reply)
        })
    }

    fn with_retries(
        &self,
        idempotent: bool,
        call: impl Fn() -> Result<Map<String, Value>, CallError>,
    ) -> Result<Map<String, Value>, CallError> {
        let retries = if idempotent { self.limits.retries } else { 0 };
        let mut attempt = 0;
        loop {
            match call() {
                Err(e) if e.transient() && attempt < retries => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(200 << attempt.min(4)));
                }
                done => return done,
            }
        }
    }

    fn read(
        &self,
        url: String,
        reply: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Map<String, Value>, CallError> {
        let mut reply = reply.map_err(|e| self.call_error(&url, e))?;
        let status = reply.status().as_u16();
        let text = reply
            .body_mut()
            .with_config()
            .limit(self.limits.max_reply_bytes)
            .read_to_string()
            .map_err(|e| self.call_error(&url, e))?;
        if status != 200 {
            return Err(CallError::Status {
                url,
                status,
                detail: error_detail(&text),
            });
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(fields)) if fields.contains_key("output") => Ok(fields),
            Ok(_) => Err(CallError::Malformed {
                url,
                detail: "not a JSON object with an \"output\" field".to_owned(),
            }),
            Err(e) => Err(CallError::Malformed {
                url,
                detail: format!("not JSON ({e})"),
            }),
        }
    }

    fn call_error(&self, url: &str, error: ureq::Error) -> CallError {
        let url = url.to_owned();
        match error {
            ureq::Error::Timeout(_) => CallError::Timeout {
                url,
                seconds: self.limits.timeout.as_secs_f64(),
            },
            ureq::Error::BodyExceedsLimit(limit) => CallError::TooLarge { url, limit },
            ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => CallError::Timeout {
                url,
                seconds: self.limits.timeout.as_secs_f64(),
            },
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Io(_) => {
                CallError::Unreachable {
                    url,
                    detail: error.to_string(),
                }
            }
            other => CallError::Malformed {
                url,
                detail: other.to_string(),
            },
        }
    }
}

/// A server's explanation of an error status: FastAPI's `detail`, our `output`, or the
/// start of the reply.
fn error_detail(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let detail = parsed
        .as_ref()
        .and_then(|v| v.get("detail").or_else(|| v.get("output")))
        .map(|d| match d {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| text.to_owned());
    if detail.chars().count() > QUOTED_CHARS {
        let cut: String = detail.chars().take(QUOTED_CHARS).collect();
        format!("{cut}...")
    } else {
        detail
    }
}
