//! [`ServerPool`]: the environment servers a run talks to, one per concurrent episode:
//! the URLs `[env] urls` lists, or `[env] servers` processes started from `[env]
//! command` on free local ports. Started servers are stopped when the pool is dropped,
//! and by [`stop_started_servers`] on the way out of a process that is interrupted.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The text of `[env] command` replaced by each server's port.
pub const PORT_PLACEHOLDER: &str = "{port}";

/// Servers started by pools of this process, with the pool each belongs to.
static STARTED: Mutex<Vec<(u64, Child)>> = Mutex::new(Vec::new());

/// The next pool's id.
static NEXT_POOL: AtomicU64 = AtomicU64::new(0);

/// Stops every server a pool of this process started: for a signal handler that ends
/// the process without running destructors.
pub fn stop_started_servers() {
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    for (_, child) in started.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    started.clear();
}

/// Why servers could not be started.
#[derive(Debug)]
pub enum ServersError {
    /// Neither URLs nor a command.
    NoServers,
    /// The command has no `{port}`.
    NoPlaceholder(String),
    /// A server could not be started, or stopped before it listened.
    Start {
        /// The command line.
        command: String,
        /// What happened.
        detail: String,
    },
}

impl fmt::Display for ServersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServersError::NoServers => write!(
                f,
                "[env] kind = \"remote\" needs `urls` (running servers) or `command` (one that \
                 starts a server on {PORT_PLACEHOLDER}) with `servers` > 0"
            ),
            ServersError::NoPlaceholder(command) => write!(
                f,
                "[env] command `{command}` has no {PORT_PLACEHOLDER} for the port to serve on"
            ),
            ServersError::Start { command, detail } => {
                write!(f, "environment server `{command}`: {detail}")
            }
        }
    }
}

impl std::error::Error for ServersError {}

/// The servers of a run.
#[derive(Debug)]
pub struct ServerPool {
    id: u64,
    urls: Vec<String>,
}

impl ServerPool {
    /// The servers already running at `urls`.
    pub fn at(urls: Vec<String>) -> Result<ServerPool, ServersError> {
        if urls.is_empty() {
            return Err(ServersError::NoServers);
        }
        Ok(ServerPool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            urls,
        })
    }

    /// Starts `count` servers, each `command` with `{port}` replaced by a free local
    /// port (run by `sh -c`), and waits up to `startup` for each to accept connections.
    pub fn start(
        command: &str,
        count: usize,
        startup: Duration,
    ) -> Result<ServerPool, ServersError> {
        if count == 0 {
            return Err(ServersError::NoServers);
        }
        if !command.contains(PORT_PLACEHOLDER) {
            return Err(ServersError::NoPlaceholder(command.to_owned()));
        }
        let mut pool = ServerPool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            urls: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let port = free_port().map_err(|e| ServersError::Start {
                command: command.to_owned(),
                detail: format!("no free port: {e}"),
            })?;
            let line = command.replace(PORT_PLACEHOLDER, &port.to_string());
            let start_error = |detail: String| ServersError::Start {
                command: line.clone(),
                detail,
            };
            let child = Command::new("sh")
                .arg("-c")
                .arg(format!("exec {line}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| start_error(e.to_string()))?;
            STARTED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((pool.id, child));
            pool.wait_listening(port, startup).map_err(start_error)?;
            tracing::info!("environment server on port {port}: {line}");
            pool.urls.push(format!("http://127.0.0.1:{port}"));
        }
        Ok(pool)
    }

    /// The servers' URLs: one per concurrent episode.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Waits until `port` accepts connections, while this pool's last server runs.
    fn wait_listening(&self, port: u16, startup: Duration) -> Result<(), String> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let started = Instant::now();
        loop {
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            {
                let mut servers = STARTED.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((_, child)) = servers.iter_mut().rev().find(|(id, _)| *id == self.id) {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!("exited ({status}) before listening on {port}"));
                    }
                }
            }
            if started.elapsed() > startup {
                return Err(format!(
                    "not listening on port {port} after {} s",
                    startup.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ServerPool {
    fn drop(&mut self) {
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        for (_, child) in started.iter_mut().filter(|(id, _)| *id == self.id) {
            let _ = child.kill();
            let _ = child.wait();
        }
        started.retain(|(id, _)| *id != self.id);
    }
}

/// A local port no one listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}
