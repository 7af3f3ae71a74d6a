//! Whether a socket binds or connects its endpoint, and vLLM's rule for it.
//!
//! vLLM's PUB socket binds an endpoint that contains `*` or `::` or uses
//! `ipc://` / `inproc://`, and connects to any other (so with
//! `tcp://router:5557` the router's SUB socket must bind). The replay ROUTER
//! always binds. The pure-Rust ZeroMQ cannot bind `tcp://*:port`, so `*` is
//! bound as `0.0.0.0`.

use zeromq::{Socket, ZmqError};

/// How a socket attaches to its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SocketMode {
    /// Listen on the endpoint (port 0 picks a free port).
    #[default]
    Bind,
    /// Dial the endpoint.
    Connect,
}

impl SocketMode {
    /// What vLLM's PUB socket does with `endpoint`; the peer must do the
    /// opposite.
    pub fn vllm_pub_mode(endpoint: &str) -> Self {
        let binds = endpoint.contains('*')
            || endpoint.contains("::")
            || endpoint.starts_with("ipc://")
            || endpoint.starts_with("inproc://");
        if binds { Self::Bind } else { Self::Connect }
    }

    /// The mode a peer of a socket in this mode must use.
    pub fn opposite(self) -> Self {
        match self {
            Self::Bind => Self::Connect,
            Self::Connect => Self::Bind,
        }
    }
}

/// Rewrites `tcp://*:port` to `tcp://0.0.0.0:port`, which the pure-Rust
/// ZeroMQ can bind; other endpoints are returned unchanged.
pub fn bindable_endpoint(endpoint: &str) -> String {
    match endpoint.strip_prefix("tcp://*:") {
        Some(port) => format!("tcp://0.0.0.0:{port}"),
        None => endpoint.to_owned(),
    }
}

/// Binds or connects `socket`; returns the endpoint actually in use (the
/// resolved port when binding port 0).
pub(crate) async fn attach<S: Socket>(
    socket: &mut S,
    endpoint: &str,
    mode: SocketMode,
) -> Result<String, ZmqError> {
    match mode {
        SocketMode::Bind => Ok(socket.bind(&bindable_endpoint(endpoint)).await?.to_string()),
        SocketMode::Connect => {
            socket.connect(endpoint).await?;
            Ok(endpoint.to_owned())
        }
    }
}
