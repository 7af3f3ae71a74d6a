//! A fleet on 127.0.0.1, started and stopped by the load test: Valkey,
//! sim-workers, R router replicas and an L4 balancer in front of them.
//! Everything it starts is killed when the [`Fleet`] is dropped.
//!
//! Files: `kind` (what runs behind the balancer: our router or a peer's
//! command template, an [`Arm`]), `template` (filling in a template's
//! placeholders), `routers` (each replica's command and companion; ours
//! through `fleet::RouterSpec`), `sims` (the sim-workers, with or without
//! KV events, through `fleet::SimSpec`), `store` (Valkey),
//! `balancer`/`tcp_proxy` (HAProxy or the builtin one), `cpu` ([`CpuUse`]),
//! `counters` (what the sims and routers counted: [`FleetCounters`]),
//! `faults` (what a scenario does to a running fleet).

mod balancer;
mod counters;
mod cpu;
mod faults;
mod kind;
mod routers;
mod sims;
mod store;
mod tcp_proxy;
mod template;

pub use balancer::{Balancer, BalancerChoice, BalancerKind};
pub use counters::{FleetCounters, RoleCounters, sum_f64, sum_where};
pub use cpu::CpuUse;
pub use kind::{Arm, Companion, ExternalRouter, LaunchContext, POLICIES, RouterKind, View};
pub use routers::{RouterCommon, companion_spec, router_spec};
pub use sims::{KvEndpoints, Sim, SimSettings, default_tokenizer_dir, start_sim};
pub use tcp_proxy::TcpBalancer;
pub use template::fill;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use fleet::{ChildProc, LmcacheController, free_port, wait_http_ok};
use store::Store;

/// Everything needed to start one fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    /// The compared configuration (router kind × replicas).
    pub arm: Arm,
    /// The router binary, token, extra flags.
    pub routers: RouterCommon,
    /// The `sim-worker` binary.
    pub sim_program: PathBuf,
    /// The sims' settings.
    pub sims: SimSettings,
    /// `valkey-server`.
    pub valkey_program: PathBuf,
    /// Keep an append-only file (so Valkey can restart with its data).
    pub valkey_aof: bool,
    /// A 3 + 3 Valkey Cluster instead of one server (the routers shard
    /// each model over it).
    pub valkey_cluster: bool,
    /// The balancer.
    pub balancer: BalancerKind,
    /// The served model name.
    pub model: String,
    /// The tokenizer directory (routers and sims).
    pub tokenizer_dir: PathBuf,
    /// Where logs and configuration files go.
    pub dir: PathBuf,
    /// With an LMCache beside every sim: the venv its controller runs from
    /// (one fresh controller per fleet; see `--lmcache`).
    pub lmcache_venv: Option<PathBuf>,
}

/// A running fleet.
#[derive(Debug)]
pub struct Fleet {
    spec: FleetSpec,
    valkey: Store,
    sims: Vec<Sim>,
    routers: Vec<ChildProc>,
    /// Each replica's companion process, if its kind has one.
    companions: Vec<Option<ChildProc>>,
    router_ports: Vec<u16>,
    aux_ports: Vec<u16>,
    mesh_ports: Vec<u16>,
    /// How many times the routers were restarted.
    generation: u32,
    balancer: Balancer,
    http: reqwest::Client,
    /// The LMCache controller, with `--lmcache`.
    lmcache: Option<LmcacheController>,
    /// The workers stopped so far (killed or SIGTERMed), and when.
    stops: Vec<(String, std::time::Instant)>,
}

impl Fleet {
    /// Starts Valkey, the balancer, the sims, then the routers, and waits
    /// until the balancer answers and every worker is live in routing.
    pub async fn start(spec: FleetSpec) -> anyhow::Result<Fleet> {
        std::fs::create_dir_all(&spec.dir)
            .with_context(|| format!("creating {}", spec.dir.display()))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .context("building the HTTP client")?;
        let valkey = Store::start(
            spec.valkey_cluster,
            &spec.valkey_program,
            &spec.dir,
            spec.valkey_aof,
        )?;
        let router_ports = (0..spec.arm.routers)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let aux_ports = (0..spec.arm.routers)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mesh_ports = (0..spec.arm.routers)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let lmcache = match &spec.lmcache_venv {
            Some(venv) => Some(
                LmcacheController::start(venv, spec.dir.join("lmcache-controller.log"))
                    .await
                    .context("starting the LMCache controller")?,
            ),
            None => None,
        };
        let health = spec.arm.kind.health_path().to_owned();
        let balancer = Balancer::start(&spec.balancer, &spec.dir, &router_ports, &health)
            .await
            .context("starting the balancer")?;
        let mut fleet = Fleet {
            routers: Vec::new(),
            companions: Vec::new(),
            router_ports,
            aux_ports,
            mesh_ports,
            generation: 0,
            valkey,
            sims: Vec::new(),
            balancer,
            http,
            spec,
            lmcache,
            stops: Vec::new(),
        };
        if fleet.spec.arm.kind.workers_report() {
            // Routers first, so that the sims' first reports reach them.
            fleet.spawn_routers()?;
            fleet.wait_routers().await?;
            fleet.start_sims(true).await?;
        } else {
            // The routers are given the sims' URLs.
            fleet.start_sims(false).await?;
            fleet.spawn_routers()?;
            fleet.wait_routers().await?;
        }
        fleet.wait_workers_live().await?;
        Ok(fleet)
    }

    /// Starts the sim-workers, reporting through the balancer if `report`.
    async fn start_sims(&mut self, report: bool) -> anyhow::Result<()> {
        let count = self
            .spec
            .arm
            .sim_roles
            .as_ref()
            .map_or(self.spec.sims.count, Vec::len);
        for i in 0..count {
            let sim = self.start_one_sim(i, report).await?;
            self.sims.push(sim);
        }
        Ok(())
    }

    /// Starts sim-worker `i`, reporting through the balancer if `report`.
    async fn start_one_sim(&self, i: usize, report: bool) -> anyhow::Result<Sim> {
        let fleet_url = self.balancer.url();
        let spec = &self.spec;
        let mut settings = spec.sims.clone();
        if let Some(lm) = &self.lmcache {
            settings
                .extra_args
                .extend(["--lmcache-controller".into(), lm.sim_flag()]);
        }
        if let Some(role) = spec.arm.sim_roles.as_ref().and_then(|r| r.get(i)) {
            settings
                .extra_args
                .extend(["--role".into(), role.to_string()]);
        }
        start_sim(
            &spec.sim_program,
            &settings,
            i,
            &spec.model,
            &spec.tokenizer_dir,
            report.then_some(fleet_url.as_str()),
            spec.arm.kind.sims_publish_kv_events(),
            &spec.routers.token,
            &spec.dir,
        )
        .await
        .with_context(|| format!("starting sim-worker {i}"))
    }

    fn launch_context(&self, index: usize) -> LaunchContext {
        LaunchContext {
            host: "127.0.0.1".into(),
            port: self.router_ports[index],
            aux_port: self.aux_ports[index],
            index,
            generation: self.generation,
            worker_urls: self.sims.iter().map(|s| s.url.clone()).collect(),
            model: self.spec.model.clone(),
            tokenizer_dir: self.spec.tokenizer_dir.clone(),
            valkey_url: self.valkey.url(),
            kv_events: self
                .sims
                .iter()
                .filter_map(|s| s.kv_events.clone())
                .collect(),
            mesh_port: self.mesh_ports[index],
            peers: (0..self.router_ports.len())
                .filter(|j| *j != index)
                .map(|j| (self.aux_ports[j], self.mesh_ports[j]))
                .collect(),
        }
    }

    fn spawn_routers(&mut self) -> anyhow::Result<()> {
        for i in 0..self.router_ports.len() {
            let ctx = self.launch_context(i);
            let companion = companion_spec(&self.spec.arm.kind, &ctx, &self.spec.dir)
                .map(|c| c.spawn())
                .transpose()?;
            self.companions.push(companion);
            let spec = router_spec(
                &self.spec.arm.kind,
                &self.router_common(),
                &ctx,
                &self.spec.dir,
            );
            self.routers.push(spec.spawn()?);
        }
        Ok(())
    }

    /// What every replica of this arm shares: the run's router settings
    /// and the arm's own flags after them.
    fn router_common(&self) -> RouterCommon {
        let mut common = self.spec.routers.clone();
        common
            .extra_args
            .extend(self.spec.arm.router_args.iter().cloned());
        if let Some(lm) = &self.lmcache {
            for a in &mut common.extra_args {
                *a = a.replace("@lmcache", &lm.url);
            }
        }
        common
    }

    /// Waits until every router answers its health route directly, then
    /// through the balancer.
    async fn wait_routers(&mut self) -> anyhow::Result<()> {
        let path = self.spec.arm.kind.health_path().to_owned();
        let timeout = match &self.spec.arm.kind {
            RouterKind::External(e) => e.startup_timeout,
            RouterKind::PrefixRouter { .. } => Duration::from_secs(60),
        };
        for (i, port) in self.router_ports.clone().into_iter().enumerate() {
            let url = format!("http://127.0.0.1:{port}{path}");
            wait_http_ok(&self.http, &url, timeout, Some(&mut self.routers[i])).await?;
        }
        let via = format!("{}{path}", self.balancer.url());
        wait_http_ok(&self.http, &via, Duration::from_secs(20), None)
            .await
            .context("the balancer does not reach the routers")
    }

    /// For our routers: waits until each one lists every sim as `live`
    /// (reported through the balancer, or registered as a static worker).
    async fn wait_workers_live(&self) -> anyhow::Result<()> {
        if !matches!(self.spec.arm.kind, RouterKind::PrefixRouter { .. }) {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in &self.router_ports {
            let url = format!("http://127.0.0.1:{port}/admin/workers");
            loop {
                let live = live_workers(&self.http, &url, &self.spec.routers.token)
                    .await
                    .unwrap_or(0);
                if live >= self.sims.len() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "{url} lists {live} live workers of {}; see the logs in {}",
                        self.sims.len(),
                        self.spec.dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The balancer's URL: where clients send requests.
    pub fn url(&self) -> String {
        self.balancer.url()
    }

    /// The sim-workers' URLs.
    pub fn sim_urls(&self) -> Vec<String> {
        self.sims.iter().map(|s| s.url.clone()).collect()
    }

    /// The sim-workers' ids.
    pub fn sim_ids(&self) -> Vec<String> {
        self.sims.iter().map(|s| s.id.clone()).collect()
    }

    /// The directory of logs and configuration files.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    /// CPU seconds used so far by each role.
    pub fn cpu(&self) -> CpuUse {
        let (valkey, valkey_primaries) = self.valkey.cpu();
        CpuUse {
            routers: self
                .routers
                .iter()
                .zip(self.companions.iter().chain(std::iter::repeat(&None)))
                .map(|(r, c)| r.cpu_seconds() + c.as_ref().map_or(0.0, ChildProc::cpu_seconds))
                .collect(),
            valkey,
            valkey_primaries,
            sims: self.sims.iter().map(|s| s.proc.cpu_seconds()).sum(),
            balancer: self.balancer.cpu_seconds(),
        }
    }

    /// Stops everything (SIGKILL; the data is thrown away anyway).
    pub async fn stop(mut self) {
        self.kill_routers().await;
        for s in &mut self.sims {
            s.proc.kill().await;
        }
        self.balancer.kill();
        self.valkey.stop();
    }
}

/// How many workers a router's `GET /admin/workers` (at `url`) lists as
/// `live`.
pub async fn live_workers(http: &reqwest::Client, url: &str, token: &str) -> anyhow::Result<usize> {
    let v: Value = http
        .get(url)
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(v["workers"]
        .as_array()
        .map(|ws| ws.iter().filter(|w| w["status"] == "live").count())
        .unwrap_or(0))
}
