//! The processes of the real-engine check on 127.0.0.1: Valkey, two routers
//! behind HAProxy, and per engine a vLLM CPU engine and a reporter beside it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fleet::process::{ChildProc, ProcSpec, wait_http_ok};
use fleet::{Haproxy, Valkey, free_port};

use crate::topology::{LaunchContext, RouterCommon, RouterKind, View};

/// The internal token of the check's fleet.
pub const TOKEN: &str = "real-engine-token";
/// The served model name.
pub const MODEL: &str = "qwen3";

/// Where things are and how the engines are sized.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The virtualenv holding vLLM (`bin/vllm`).
    pub venv: PathBuf,
    /// The model directory (tokenizer + config.json).
    pub model_dir: PathBuf,
    /// `prefix-router`.
    pub router_bin: PathBuf,
    /// Logs and run files.
    pub dir: PathBuf,
    /// The engines' (and the routers') block size.
    pub block_size: u32,
    /// `--num-gpu-blocks-override` of each engine.
    pub gpu_blocks: u32,
    /// `--max-model-len` of each engine.
    pub max_model_len: u32,
    /// How long an engine may take to start.
    pub startup_timeout: Duration,
}

/// One vLLM engine and its ports.
#[derive(Debug)]
pub struct Engine {
    /// `vllm-0`, also its worker id.
    pub name: String,
    /// Its OpenAI port.
    pub port: u16,
    /// Its KV-event PUB port.
    pub kv_port: u16,
    /// Its replay ROUTER port.
    pub replay_port: u16,
    /// The process (its own group: vLLM starts children).
    pub proc: ChildProc,
}

impl Engine {
    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The PUB endpoint, as a subscriber connects to it.
    pub fn kv_endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.kv_port)
    }

    /// The replay endpoint, as a client connects to it.
    pub fn replay_endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.replay_port)
    }
}

fn engine_spec(s: &Settings, name: &str, port: u16, kv: u16, replay: u16) -> ProcSpec {
    let events = serde_json::json!({
        "enable_kv_cache_events": true,
        "publisher": "zmq",
        "endpoint": format!("tcp://*:{kv}"),
        "replay_endpoint": format!("tcp://*:{replay}"),
        "topic": "kv-events",
    });
    ProcSpec::new(
        name,
        s.venv.join("bin/vllm"),
        s.dir.join(format!("{name}.log")),
    )
    .args([
        "serve".to_owned(),
        s.model_dir.display().to_string(),
        "--served-model-name".into(),
        MODEL.into(),
        "--load-format".into(),
        "dummy".into(),
        "--dtype".into(),
        "float32".into(),
        "--block-size".into(),
        s.block_size.to_string(),
        "--enable-prefix-caching".into(),
        "--prefix-caching-hash-algo".into(),
        "sha256_cbor".into(),
        "--enable-prompt-tokens-details".into(),
        "--max-model-len".into(),
        s.max_model_len.to_string(),
        "--num-gpu-blocks-override".into(),
        s.gpu_blocks.to_string(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "--kv-events-config".into(),
        events.to_string(),
    ])
    .env("VLLM_TARGET_DEVICE", "cpu")
    .env("VLLM_CPU_KVCACHE_SPACE", "1")
    .env("HF_HUB_OFFLINE", "1")
    // Seeds vLLM's block hashes; the routers and reporters get the same.
    .env("PYTHONHASHSEED", "0")
    // Enables POST /reset_prefix_cache.
    .env("VLLM_SERVER_DEV_MODE", "1")
    .own_group()
}

/// Everything the check runs.
#[derive(Debug)]
pub struct Topology {
    settings: Settings,
    /// The shared state.
    pub valkey: Valkey,
    /// The engines.
    pub engines: Vec<Engine>,
    reporters: Vec<ChildProc>,
    /// The routers.
    pub routers: Vec<ChildProc>,
    router_ports: Vec<u16>,
    /// The L4 balancer in front of the routers.
    pub balancer: Haproxy,
    http: reqwest::Client,
}

impl Topology {
    /// Starts `engines` engines first (they are slow), the rest while they
    /// boot, and waits until every engine answers and every worker is
    /// registered.
    pub async fn start(
        settings: Settings,
        engines: usize,
        router_args: &[String],
    ) -> anyhow::Result<Topology> {
        std::fs::create_dir_all(&settings.dir)
            .with_context(|| format!("creating {}", settings.dir.display()))?;
        let mut started = Vec::new();
        for i in 0..engines {
            let name = format!("vllm-{i}");
            let (port, kv, replay) = (free_port()?, free_port()?, free_port()?);
            let proc = engine_spec(&settings, &name, port, kv, replay).spawn()?;
            started.push(Engine {
                name,
                port,
                kv_port: kv,
                replay_port: replay,
                proc,
            });
        }
        let valkey = Valkey::start()?;
        let router_ports = vec![free_port()?, free_port()?];
        let mut routers = Vec::new();
        for (i, &port) in router_ports.iter().enumerate() {
            let spec = router_spec(
                &settings,
                &valkey.url(),
                i,
                port,
                "cache_aware",
                router_args,
            );
            routers.push(spec.spawn()?);
        }
        let http = reqwest::Client::new();
        for (r, &port) in routers.iter_mut().zip(&router_ports) {
            let url = format!("http://127.0.0.1:{port}/ready");
            wait_http_ok(&http, &url, Duration::from_secs(30), Some(r)).await?;
        }
        let haproxy = fleet::haproxy::program()?;
        let balancer = Haproxy::start(&haproxy, &settings.dir, &router_ports, "/health")?;
        let mut reporters = Vec::new();
        for e in &started {
            reporters.push(reporter_spec(&settings, e, &balancer.url()).spawn()?);
        }
        let mut t = Topology {
            settings,
            valkey,
            engines: started,
            reporters,
            routers,
            router_ports,
            balancer,
            http,
        };
        for i in 0..t.engines.len() {
            t.wait_engine(i).await?;
        }
        t.wait_registered().await?;
        Ok(t)
    }

    /// The routers' URLs.
    pub fn router_urls(&self) -> Vec<String> {
        self.router_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn wait_engine(&mut self, i: usize) -> anyhow::Result<()> {
        let timeout = self.settings.startup_timeout;
        let e = &mut self.engines[i];
        let url = format!("{}/health", e.url());
        let started = Instant::now();
        wait_http_ok(&self.http, &url, timeout, Some(&mut e.proc)).await?;
        eprintln!(
            "real-engine: {} answers after {:.0} s",
            e.name,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Waits until every engine is a live worker of the fleet.
    pub async fn wait_registered(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let router = &self.router_urls()[0];
        loop {
            for r in &mut self.reporters {
                if let Some(status) = r.exited() {
                    bail!("{} exited ({status}); see {}", r.name(), r.log().display());
                }
            }
            let url = format!("{router}/admin/workers");
            let live = crate::topology::live_workers(&self.http, &url, TOKEN)
                .await
                .unwrap_or(0);
            if live >= self.engines.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{url} lists {live} live workers of {}", self.engines.len());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Restarts every router with `policy` (and the default settings).
    pub async fn restart_routers(&mut self, policy: &str) -> anyhow::Result<()> {
        for i in 0..self.routers.len() {
            let spec = router_spec(
                &self.settings,
                &self.valkey.url(),
                i,
                self.router_ports[i],
                policy,
                &[],
            );
            self.routers[i].respawn_as(spec).await?;
            let url = format!("http://127.0.0.1:{}/ready", self.router_ports[i]);
            wait_http_ok(
                &self.http,
                &url,
                Duration::from_secs(30),
                Some(&mut self.routers[i]),
            )
            .await?;
        }
        Ok(())
    }

    /// Kills engine `i` (its whole process group) and starts it again on
    /// the same ports; returns once it answers.
    pub async fn restart_engine(&mut self, i: usize) -> anyhow::Result<()> {
        self.engines[i].proc.respawn().await?;
        self.wait_engine(i).await
    }

    /// A one-token request straight to engine `i`, so that it runs a step
    /// (and publishes the events it has queued).
    pub async fn nudge_engine(&self, i: usize) -> anyhow::Result<()> {
        let body = serde_json::json!({ "model": MODEL, "prompt": "Hi", "max_tokens": 1 });
        let url = format!("{}/v1/completions", self.engines[i].url());
        let resp = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .context("nudge")?;
        if !resp.status().is_success() {
            bail!("{url}: HTTP {}", resp.status());
        }
        Ok(())
    }

    /// `POST /reset_prefix_cache` on engine `i`.
    pub async fn reset_prefix_cache(&self, i: usize) -> anyhow::Result<()> {
        let url = format!("{}/reset_prefix_cache", self.engines[i].url());
        let resp = self
            .http
            .post(&url)
            .send()
            .await
            .context("reset_prefix_cache")?;
        if !resp.status().is_success() {
            bail!("{url}: HTTP {}", resp.status());
        }
        Ok(())
    }
}

/// Router `i` as the load test starts its routers (`fleet::router_spec`),
/// with the engines' block size and hash seed and `extra` flags.
fn router_spec(
    s: &Settings,
    valkey: &str,
    i: usize,
    port: u16,
    policy: &str,
    extra: &[String],
) -> ProcSpec {
    let kind = RouterKind::PrefixRouter {
        policy: policy.to_owned(),
        view: View::Shared,
    };
    let mut extra_args = vec![
        "--block-size".to_owned(),
        s.block_size.to_string(),
        "--hash-seed".into(),
        "0".into(),
    ];
    extra_args.extend(extra.iter().cloned());
    let common = RouterCommon {
        program: s.router_bin.clone(),
        token: TOKEN.to_owned(),
        extra_args,
        log_level: "info".to_owned(),
    };
    let ctx = LaunchContext {
        host: "127.0.0.1".into(),
        port,
        aux_port: 0,
        index: i,
        generation: 0,
        worker_urls: Vec::new(),
        model: MODEL.into(),
        tokenizer_dir: s.model_dir.clone(),
        valkey_url: valkey.to_owned(),
        kv_events: Vec::new(),
        mesh_port: 0,
        peers: Vec::new(),
    };
    crate::topology::router_spec(&kind, &common, &ctx, &s.dir)
}

fn reporter_spec(s: &Settings, e: &Engine, fleet_url: &str) -> ProcSpec {
    let name = format!("reporter-{}", e.name);
    fleet::ReporterSpec {
        log: s.dir.join(format!("{name}.log")),
        name,
        program: s.router_bin.clone(),
        // As given to the engine: vLLM binds `*`, so the reporter connects.
        kv_events: format!("tcp://*:{}", e.kv_port),
        replay: format!("tcp://*:{}", e.replay_port),
        engine_url: e.url(),
        fleet_url: fleet_url.to_owned(),
        token: TOKEN.to_owned(),
        worker: e.name.clone(),
        model: MODEL.into(),
        log_level: "info".into(),
        args: Vec::new(),
    }
    .args(["--block-size".to_owned(), s.block_size.to_string()])
    .args(["--hash-seed", "0"])
    .proc_spec()
}
