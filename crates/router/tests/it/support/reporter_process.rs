//! A `prefix-router reporter` process ([`fleet::ReporterSpec`]) beside an
//! engine (a sim publishing vLLM KV events), reporting to a router.

use std::path::PathBuf;

use super::{Router, TOKEN, router_bin};

/// A reporter process; SIGKILLed on drop.
pub struct Reporter(fleet::ChildProc);

impl Reporter {
    /// The spec of a reporter for `worker` of `model`: vLLM binds its
    /// KV-event socket as `tcp://*:<kv_port>` (the reporter connects to
    /// it) and serves replays on `replay_port`; the engine answers at
    /// `engine_url`.
    pub fn spec(
        worker: &str,
        model: &str,
        engine_url: &str,
        router: &Router,
        (kv_port, replay_port): (u16, u16),
    ) -> fleet::ReporterSpec {
        fleet::ReporterSpec {
            name: format!("reporter-{worker}"),
            program: router_bin(),
            kv_events: format!("tcp://*:{kv_port}"),
            replay: format!("tcp://127.0.0.1:{replay_port}"),
            engine_url: engine_url.to_owned(),
            fleet_url: router.url(""),
            token: TOKEN.to_owned(),
            worker: worker.to_owned(),
            model: model.to_owned(),
            log_level: "warn".to_owned(),
            args: Vec::new(),
            log: PathBuf::from("/dev/null"),
        }
    }

    /// Starts a reporter of [`Reporter::spec`].
    pub fn start(
        worker: &str,
        model: &str,
        engine_url: &str,
        router: &Router,
        ports: (u16, u16),
    ) -> Reporter {
        Self::from_spec(&Self::spec(worker, model, engine_url, router, ports))
    }

    /// Starts `spec`.
    pub fn from_spec(spec: &fleet::ReporterSpec) -> Reporter {
        Reporter(spec.proc_spec().spawn().expect("spawn reporter"))
    }
}
