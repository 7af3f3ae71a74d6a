//! The fleet under test, all real processes on 127.0.0.1 and ephemeral
//! ports: a valkey-server, R `prefix-router serve` processes (optionally
//! reaching Valkey through a [`SlowProxy`]), HAProxy in front of them, and
//! W `sim-worker`s that report their caches through HAProxy. Every process
//! logs into `$CARGO_TARGET_TMPDIR/faults/<scenario>/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::slow_proxy::SlowProxy;
use crate::support::router_process::RouterProcess;
use crate::support::{TOKEN, Valkey, free_port, http, tokenizer_dir};
use fleet::Haproxy;

mod readings;
mod routers;
mod sims;
mod valkey;

pub use readings::{balancer_log, rss_kib};
use routers::start_router;
use sims::Launching;
pub use sims::SimProcess;

/// The served model.
pub const MODEL: &str = "qwen3";

/// The namespace of the fleet's keys.
pub const PREFIX: &str = "pr";

/// The longest any wait polls (2 shared cores, debug builds): a deadline,
/// not a latency bound.
pub const PATIENCE: Duration = Duration::from_secs(45);

/// Flags as (name, value) pairs; a later `set` of the same name replaces
/// the value (clap refuses a flag given twice).
#[derive(Debug, Clone, Default)]
pub struct Flags(Vec<(String, Option<String>)>);

impl Flags {
    pub fn set(mut self, name: &str, value: &str) -> Self {
        let v = Some(value.to_owned());
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = v,
            None => self.0.push((name.to_owned(), v)),
        }
        self
    }

    /// A flag without a value.
    pub fn switch(mut self, name: &str) -> Self {
        if !self.0.iter().any(|(n, _)| n == name) {
            self.0.push((name.to_owned(), None));
        }
        self
    }

    pub fn unset(mut self, name: &str) -> Self {
        self.0.retain(|(n, _)| n != name);
        self
    }

    fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (n, v) in &self.0 {
            out.push(n.clone());
            out.extend(v.clone());
        }
        out
    }
}

/// The routers' flags in these tests: short leases so that faults play
/// out in seconds, and a routing deadline of 200 ms (not 20 ms) so that
/// CPU starvation of debug builds on 2 cores is not mistaken for a slow
/// Valkey (the slow-Valkey test restores the default).
pub fn router_flags() -> Flags {
    Flags::default()
        .set("--model", MODEL)
        .set("--tokenizer-dir", &tokenizer_dir().to_string_lossy())
        .set("--worker-lease", "2s")
        .set("--router-lease", "3s")
        .set("--speculative-ttl", "5s")
        .set("--gc-interval", "500ms")
        .set("--valkey-timeout", "200ms")
}

/// The sims' flags: a full sync every 2 s, a clock 4× faster than the
/// default time model (a request of 8 tokens takes ~40 ms).
pub fn sim_flags() -> Flags {
    Flags::default()
        .set("--sync-interval", "2s")
        .set("--time-scale", "0.25")
        .set("--num-blocks", "2048")
}

/// What to start.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub routers: usize,
    pub sims: usize,
    pub router_flags: Flags,
    pub sim_flags: Flags,
    /// Valkey with `appendonly yes` (fsync every second).
    pub aof: bool,
    /// Routers reach Valkey through a [`SlowProxy`].
    pub slow_proxy: bool,
    /// More sims (id, flags) started with the fleet but silent
    /// (`--stop-reporting`, so unknown to the fleet) until
    /// [`Fleet::activate_standby`].
    pub standby: Vec<(String, Flags)>,
}

impl Default for FleetSpec {
    fn default() -> Self {
        FleetSpec {
            routers: 2,
            sims: 3,
            router_flags: router_flags(),
            sim_flags: sim_flags(),
            aof: false,
            slow_proxy: false,
            standby: Vec::new(),
        }
    }
}

/// The running fleet; everything is killed on drop.
pub struct Fleet {
    pub name: String,
    pub logs: PathBuf,
    /// Time zero of every record and event.
    pub epoch: Instant,
    pub spec: FleetSpec,
    pub valkey: Valkey,
    pub proxy: Option<SlowProxy>,
    pub routers: Vec<Option<RouterProcess>>,
    pub router_ports: Vec<u16>,
    pub balancer: Haproxy,
    pub sims: Vec<Option<SimProcess>>,
    /// Silent sims (see [`FleetSpec::standby`]).
    pub standby: Vec<Option<SimProcess>>,
    events: Mutex<Vec<(f64, String)>>,
}

impl Fleet {
    /// Starts everything and waits until every sim is live in the shared
    /// state with its first snapshot applied.
    pub async fn start(name: &str, spec: FleetSpec) -> Fleet {
        let logs = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("faults")
            .join(name);
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).expect("log dir");
        let epoch = Instant::now();
        let persistence: &[&str] = if spec.aof {
            &["--save", "", "--appendonly", "yes"]
        } else {
            &["--save", "", "--appendonly", "no"]
        };
        let valkey = Valkey::start_with(persistence);
        let proxy = if spec.slow_proxy {
            let upstream = format!("127.0.0.1:{}", valkey.port).parse().expect("addr");
            Some(SlowProxy::start(upstream).await)
        } else {
            None
        };
        let router_ports: Vec<u16> = (0..spec.routers).map(|_| free_port().unwrap()).collect();
        let haproxy = fleet::haproxy::program().expect("haproxy");
        let balancer =
            Haproxy::start(&haproxy, &logs, &router_ports, "/health").expect("starting haproxy");
        // Routers and sims load their tokenizers at the same time (the
        // sims' pushers retry until the routers answer).
        let launching: Vec<Launching> = (0..spec.sims)
            .map(|i| {
                let id = format!("sim-{i}");
                let log = logs.join(format!("{id}.log"));
                Launching::spawn(&id, &balancer.url(), &spec.sim_flags, &log)
            })
            .collect();
        let standby: Vec<Launching> = spec
            .standby
            .iter()
            .map(|(id, flags)| {
                let log = logs.join(format!("{id}.log"));
                let flags = flags.clone().switch("--stop-reporting");
                Launching::spawn(id, &balancer.url(), &flags, &log)
            })
            .collect();
        let valkey_url = proxy.as_ref().map_or_else(|| valkey.url(), |p| p.url());
        let starts = router_ports
            .iter()
            .enumerate()
            .map(|(i, &port)| start_router(&logs, i, port, &valkey_url, &spec.router_flags));
        let routers = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .map(Some)
            .collect();
        let sims =
            futures_util::future::join_all(launching.into_iter().map(Launching::ready)).await;
        let standby = futures_util::future::join_all(standby.into_iter().map(Launching::ready))
            .await
            .into_iter()
            .map(Some)
            .collect();
        let mut f = Fleet {
            name: name.to_owned(),
            logs,
            epoch,
            spec,
            valkey,
            proxy,
            routers,
            router_ports,
            balancer,
            sims: Vec::new(),
            standby,
            events: Mutex::new(Vec::new()),
        };
        f.mark("routers and sims serving");
        for i in 0..f.spec.routers {
            f.wait_balancer(i, true).await;
        }
        for s in &sims {
            f.wait_registered(s).await;
        }
        f.sims = sims.into_iter().map(Some).collect();
        f.mark("fleet up");
        f
    }

    /// Seconds since the epoch.
    pub fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Records and prints an event; returns its time.
    pub fn mark(&self, what: &str) -> f64 {
        let t = self.now();
        println!("[{} t={t:7.2}s] {what}", self.name);
        self.events.lock().unwrap().push((t, what.to_owned()));
        t
    }

    /// The URL routers use for Valkey (through the proxy, if any).
    pub fn router_valkey_url(&self) -> String {
        self.proxy
            .as_ref()
            .map_or_else(|| self.valkey.url(), |p| p.url())
    }

    /// The balancer's URL (clients and sims use it).
    pub fn url(&self) -> String {
        self.balancer.url()
    }

    /// A live router's base URL (for its own metrics, or to bypass the
    /// balancer).
    pub fn router(&self, i: usize) -> &RouterProcess {
        self.routers[i].as_ref().expect("router is down")
    }
}
