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

/// A running `sim-worker`; SIGKILLed on drop.
pub struct SimProcess {
    child: fleet::ChildProc,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its worker id.
    pub id: String,
}

/// A sim spawned ([`fleet::SimSpec`]), not yet serving.
struct Launching {
    child: fleet::ChildProc,
    id: String,
}

impl Launching {
    fn spawn(id: &str, fleet_url: &str, flags: &Flags, log: &Path) -> Launching {
        let program = fleet::binaries::workspace_binary("sim-worker").unwrap();
        let spec = fleet::SimSpec::new(id, program, MODEL, tokenizer_dir(), log.to_owned())
            .worker_id(id)
            .pushing(fleet_url, TOKEN)
            .args(flags.args())
            .parallel_prefill();
        Launching {
            child: spec.proc_spec().spawn().expect("spawn sim-worker"),
            id: id.to_owned(),
        }
    }

    async fn ready(mut self) -> SimProcess {
        let base = self
            .child
            .wait_line("listening on ", PATIENCE)
            .await
            .unwrap_or_else(|e| panic!("sim {} did not start: {e:#}", self.id));
        SimProcess {
            child: self.child,
            base,
            id: self.id,
        }
    }
}

impl SimProcess {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET /sim/state`, if it answers.
    pub async fn state(&self) -> Option<Value> {
        let resp = http().get(self.url("/sim/state")).send().await.ok()?;
        resp.json().await.ok()
    }

    /// The hashes it caches now that the shared index holds (hex).
    pub async fn indexed(&self) -> BTreeSet<String> {
        let st = self.state().await.expect("sim state");
        st["indexed_hashes"]
            .as_array()
            .expect("indexed_hashes")
            .iter()
            .map(|h| h.as_str().expect("hex").to_owned())
            .collect()
    }

    /// `POST /sim/faults`.
    pub async fn faults(&self, body: Value) -> Value {
        let resp = http()
            .post(self.url("/sim/faults"))
            .json(&body)
            .send()
            .await
            .expect("faults");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("faults JSON")
    }

    /// `POST /sim/faults {"crash": true}`: exits at once with 137, like
    /// `kill -9`; waits for the exit.
    pub async fn crash(&mut self) {
        let _ = http()
            .post(self.url("/sim/faults"))
            .json(&json!({"crash": true}))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.exited() {
                assert_eq!(status.code(), Some(137), "crash exit status");
                return;
            }
            assert!(Instant::now() < deadline, "sim did not crash");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGTERM, without waiting (it drains, then deregisters and exits).
    pub fn sigterm(&self) {
        self.child.signal_term();
    }

    /// Waits for its exit (SIGKILL past [`PATIENCE`]); its status.
    pub async fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.exited() {
                return status;
            }
            if Instant::now() > deadline {
                self.child.kill_now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM (it deregisters from the fleet), then waits for its exit.
    pub async fn terminate(&mut self) {
        self.child.signal_term();
        let deadline = Instant::now() + PATIENCE;
        while self.child.exited().is_none() {
            if Instant::now() > deadline {
                self.child.kill_now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A worker's entries in Valkey.
#[derive(Debug, Default, Clone)]
pub struct Held {
    /// Its live incarnation, if registered.
    pub idx: Option<String>,
    /// Every hash of its reverse set.
    pub all: BTreeSet<String>,
    /// The speculative ones.
    pub speculative: BTreeSet<String>,
}

impl Held {
    /// Confirmed blocks: what the worker reported it holds.
    pub fn confirmed(&self) -> BTreeSet<String> {
        self.all.difference(&self.speculative).cloned().collect()
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

    /// Starts sims `ids` concurrently with `flags`, waits until each is
    /// live with a snapshot applied.
    pub async fn start_sims(&self, ids: &[String], flags: &Flags) -> Vec<SimProcess> {
        let url = self.url();
        let launching: Vec<Launching> = ids
            .iter()
            .map(|id| Launching::spawn(id, &url, flags, &self.logs.join(format!("{id}.log"))))
            .collect();
        let sims =
            futures_util::future::join_all(launching.into_iter().map(Launching::ready)).await;
        for s in &sims {
            self.wait_registered(s).await;
        }
        sims
    }

    /// Waits until `sim`'s pusher is registered and has a snapshot applied.
    pub async fn wait_registered(&self, sim: &SimProcess) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(st) = sim.state().await {
                let p = &st["pusher"];
                if p["registered"] == true && p["syncs"].as_u64() > Some(0) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "{} never registered", sim.id);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the running sims (SIGTERM: they deregister), then turns the
    /// standby sims' reporting on and waits until they are registered;
    /// they become [`Fleet::sims`].
    pub async fn activate_standby(&mut self) {
        let old: Vec<SimProcess> = self.sims.drain(..).flatten().collect();
        for mut s in old {
            s.terminate().await;
        }
        self.sims = std::mem::take(&mut self.standby);
        for s in self.live_sims() {
            s.faults(json!({"stop_reporting": false})).await;
        }
        for s in self.live_sims() {
            self.wait_registered(s).await;
        }
        self.mark("standby sims registered");
    }

    /// The running sims.
    pub fn live_sims(&self) -> impl Iterator<Item = &SimProcess> {
        self.sims.iter().flatten()
    }

    /// SIGKILLs router `i`; returns the times just before the signal and
    /// once it was reaped.
    pub fn kill_router(&mut self, i: usize) -> (f64, f64) {
        let mut r = self.routers[i].take().expect("router is down");
        let before = self.now();
        r.kill();
        (before, self.mark(&format!("router r{i} SIGKILLed")))
    }

    /// SIGTERMs router `i` (graceful) and waits for its exit.
    pub fn terminate_router(&mut self, i: usize) -> f64 {
        let mut r = self.routers[i].take().expect("router is down");
        r.terminate();
        self.mark(&format!("router r{i} stopped (SIGTERM)"))
    }

    /// Starts router `i` again on its port; returns when it answers.
    pub async fn restart_router(&mut self, i: usize) -> f64 {
        assert!(self.routers[i].is_none(), "router r{i} is running");
        let r = start_router(
            &self.logs,
            i,
            self.router_ports[i],
            &self.router_valkey_url(),
            &self.spec.router_flags,
        )
        .await;
        self.routers[i] = Some(r);
        self.mark(&format!("router r{i} restarted"))
    }

    /// Waits until HAProxy sees router `i` up (or down); returns the time.
    pub async fn wait_balancer(&self, i: usize, up: bool) -> f64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.balancer.status(i);
            if status.starts_with(if up { "UP" } else { "DOWN" }) {
                return self.now();
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy never saw r{i} {}: {status}",
                if up { "up" } else { "down" }
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sum of a metric over the running routers (each scraped directly):
    /// every series named `name` whose labels contain `labels`.
    pub async fn metric(&self, name: &str, labels: &str) -> f64 {
        let mut sum = 0.0;
        for r in self.routers.iter().flatten() {
            let text = match http().get(format!("{}/metrics", r.base)).send().await {
                Ok(resp) => resp.text().await.unwrap_or_default(),
                Err(_) => continue,
            };
            sum += metric_in(&text, name, labels);
        }
        sum
    }

    /// `worker`'s entries in Valkey (its live incarnation's reverse sets).
    pub fn held(&self, worker: &str) -> Held {
        let mut c = self.valkey.conn();
        let base = format!("{PREFIX}:{{{MODEL}}}");
        let idx: Option<String> = redis::cmd("HGET")
            .arg(format!("{base}:ids"))
            .arg(worker)
            .query(&mut c)
            .expect("HGET ids");
        let Some(idx) = idx else {
            return Held::default();
        };
        let members = |key: String, c: &mut redis::Connection| -> BTreeSet<String> {
            redis::cmd("SMEMBERS").arg(key).query(c).expect("SMEMBERS")
        };
        Held {
            all: members(format!("{base}:r:{idx}"), &mut c),
            speculative: members(format!("{base}:sp:{idx}"), &mut c),
            idx: Some(idx),
        }
    }

    /// Per running sim: (id, blocks only in Valkey, blocks only in the
    /// sim's cache), comparing the indexed blocks of the sim's cache with
    /// its confirmed entries.
    pub async fn mismatches(&self) -> Vec<(String, usize, usize)> {
        let mut out = Vec::new();
        for s in self.live_sims() {
            let cached = s.indexed().await;
            let fleet = self.held(&s.id).confirmed();
            out.push((
                s.id.clone(),
                fleet.difference(&cached).count(),
                cached.difference(&fleet).count(),
            ));
        }
        out
    }

    /// Polls until every running sim's confirmed entries in Valkey equal
    /// its cache; returns the time that took (seconds).
    pub async fn wait_converged(&self, what: &str) -> f64 {
        let start = Instant::now();
        let deadline = start + PATIENCE;
        loop {
            let m = self.mismatches().await;
            if m.iter().all(|(_, a, b)| *a == 0 && *b == 0) {
                let took = start.elapsed().as_secs_f64();
                self.mark(&format!("converged ({what}) after {took:.2}s"));
                return took;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the state never matched the caches \
                 (id, only in Valkey, only in the cache): {m:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `prefix-router inspect --check` on the state: exit 0.
    pub async fn inspect_check(&self, what: &str) {
        let inspect = crate::support::router_command("inspect")
            .args(["--check", "--valkey", &self.valkey.url()])
            .args(["--key-prefix", PREFIX]);
        let out = tokio::task::spawn_blocking(move || inspect.output())
            .await
            .expect("inspect task")
            .expect("run inspect --check");
        assert!(
            out.status.success(),
            "{what}: inspect --check failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.mark(&format!("inspect --check clean ({what})"));
    }

    /// `GET /admin/workers` through the balancer: (worker id, status) of
    /// every incarnation.
    pub async fn workers(&self) -> Vec<(String, String)> {
        let Ok(resp) = http()
            .get(format!("{}/admin/workers", self.url()))
            .bearer_auth(TOKEN)
            .send()
            .await
        else {
            return Vec::new();
        };
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        v["workers"]
            .as_array()
            .map(|ws| {
                ws.iter()
                    .map(|w| {
                        (
                            w["worker_id"].as_str().unwrap_or_default().to_owned(),
                            w["status"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kills Valkey (SIGKILL); returns the time.
    pub fn kill_valkey(&mut self) -> f64 {
        self.valkey.kill();
        self.mark("valkey SIGKILLed")
    }

    /// Starts Valkey again on its port: from its append-only file if
    /// `from_aof`, else with its data directory emptied first.
    pub fn restart_valkey(&mut self, from_aof: bool) -> f64 {
        self.valkey.restart_with(from_aof);
        self.mark(if from_aof {
            "valkey restarted from its AOF"
        } else {
            "valkey restarted empty"
        })
    }

    /// Valkey's `INFO memory` field `field` (bytes).
    pub fn valkey_memory(&self, field: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(&mut self.valkey.conn())
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO field")
    }

    /// Keys in Valkey.
    pub fn valkey_keys(&self) -> u64 {
        redis::cmd("DBSIZE")
            .query(&mut self.valkey.conn())
            .expect("DBSIZE")
    }
}

/// Sum of the series of `name` whose labels contain `labels`, in a
/// Prometheus text exposition.
pub fn metric_in(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = match series.split_once('{') {
                Some((n, rest)) => (n, rest),
                None => (series, ""),
            };
            (n == name && rest.contains(labels)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Resident set size of process `pid` in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

async fn start_router(
    logs: &Path,
    i: usize,
    port: u16,
    valkey_url: &str,
    flags: &Flags,
) -> RouterProcess {
    let args = flags.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    RouterProcess::start_on(
        port,
        valkey_url,
        &args,
        &[("PREFIX_ROUTER_LOG", "warn")],
        Some(&logs.join(format!("router-{i}.log"))),
        PATIENCE,
    )
    .await
}

/// What HAProxy's connection log says.
#[derive(Debug, Default)]
pub struct BalancerLog {
    /// Connections logged.
    pub connections: usize,
    /// Connections that ended abnormally, by "server state" (termination
    /// state other than `--`, e.g. `r1 SD`: the server aborted mid-data).
    pub abnormal: std::collections::BTreeMap<String, usize>,
    /// Connections closed without a byte of answer, by server (a request
    /// in flight at a router killed with SIGKILL ends so: the kernel closes
    /// its socket normally, HAProxy logs `--` with 0 bytes).
    pub empty: std::collections::BTreeMap<String, usize>,
    /// Connections whose connect was retried.
    pub retried: usize,
    /// …and redispatched to another router.
    pub redispatched: usize,
}

/// Parses `option tcplog` lines: `client [date] frontend backend/server
/// Tw/Tc/Tt bytes state actconn/feconn/beconn/srvconn/retries queues`.
pub fn balancer_log(text: &str) -> BalancerLog {
    let mut out = BalancerLog::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Connection lines start with the client's address (health check
        // reports start otherwise).
        if !f.first().is_some_and(|t| t.starts_with("127.0.0.1:")) {
            continue;
        }
        let Some(at) = f.iter().position(|t| t.starts_with("routers/")) else {
            continue;
        };
        let (Some(state), Some(conns)) = (f.get(at + 3), f.get(at + 4)) else {
            continue;
        };
        out.connections += 1;
        let server = f[at].trim_start_matches("routers/");
        if *state != "--" {
            *out.abnormal.entry(format!("{server} {state}")).or_default() += 1;
        }
        if f.get(at + 2) == Some(&"0") {
            *out.empty.entry(server.to_owned()).or_default() += 1;
        }
        let retries = conns.rsplit('/').next().unwrap_or("0");
        if retries.starts_with('+') {
            out.redispatched += 1;
        }
        if retries.trim_start_matches('+').parse::<u32>().unwrap_or(0) > 0 {
            out.retried += 1;
        }
    }
    out
}
