//! A `prefix-router reporter` process beside an engine (a sim publishing
//! vLLM KV events), reporting to a router.

use std::process::{Child, Command, Stdio};

use super::{Router, TOKEN};

/// A reporter process; SIGKILLed on drop.
pub struct Reporter(Child);

impl Reporter {
    /// Starts a reporter for `worker` of `model`: vLLM binds its KV-event
    /// socket as `tcp://*:<kv_port>` (the reporter connects to it) and
    /// serves replays on `replay_port`; the engine answers at `engine_url`.
    pub fn start(
        worker: &str,
        model: &str,
        engine_url: &str,
        router: &Router,
        (kv_port, replay_port): (u16, u16),
    ) -> Reporter {
        let child = Command::new(super::router_bin())
            .arg("reporter")
            .args(["--kv-events", &format!("tcp://*:{kv_port}")])
            .args(["--replay", &format!("tcp://127.0.0.1:{replay_port}")])
            .args(["--engine-url", engine_url])
            .args(["--fleet-url", &router.url("")])
            .args(["--internal-token", TOKEN])
            .args(["--worker-id", worker, "--model", model])
            .env("PREFIX_ROUTER_LOG", "warn")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn reporter");
        Reporter(child)
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
