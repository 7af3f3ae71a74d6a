//! `scripts/fleet.sh` starts a working fleet and stops it.

use super::*;

const MODEL: &str = "qwen3";

/// A run directory; `fleet.sh down` on drop, so a failed test leaves no
/// process behind.
struct Fleet {
    dir: tempfile::TempDir,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs `scripts/fleet.sh <cmd>` with the test's binaries.
    fn run(&self, cmd: &str) -> Output {
        let router = crate::support::router_bin();
        let bin_dir = router.parent().expect("bin dir");
        let out = fleet::ProcSpec::quiet("fleet.sh", root().join("scripts/fleet.sh"))
            .arg(cmd)
            .env("FLEET_DIR", &self.dir.path().display().to_string())
            .env("FLEET_BIN_DIR", &bin_dir.display().to_string())
            .env("FLEET_ROUTERS", "2")
            .env("FLEET_WORKERS", "3")
            .env("FLEET_SIM_ARGS", "--time-scale 0.1")
            .env("FLEET_TIMEOUT", "40")
            // Two loaded cores: a 20 ms routing deadline would turn CPU
            // starvation into fallback routing.
            .env("PREFIX_ROUTER_VALKEY_TIMEOUT", "2s")
            .env("PREFIX_ROUTER_LOG", "info")
            .unset("PREFIX_ROUTER_INTERNAL_TOKEN")
            .unset("FLEET_PORT")
            .unset("FLEET_VALKEY_PORT")
            .output()
            .expect("running scripts/fleet.sh");
        eprintln!(
            "--- fleet.sh {cmd}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `ports.env` as a map.
    fn ports(&self) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.path("ports.env"))
            .expect("ports.env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
            .collect()
    }

    /// name → pid, from the pid files.
    fn pids(&self) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(self.path("pids")) else {
            return out;
        };
        for e in entries {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap();
            let pid = text.split_whitespace().next().unwrap().parse().unwrap();
            out.insert(e.file_name().to_string_lossy().into_owned(), pid);
        }
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // What the processes said, for the failure's diagnosis.
            if let Ok(logs) = std::fs::read_dir(self.path("logs")) {
                for log in logs.flatten() {
                    let text = std::fs::read_to_string(log.path()).unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
                    eprintln!("==> {} <==\n{tail}", log.path().display());
                }
            }
        }
        if self.path("pids").exists() {
            let _ = self.run("down");
        }
    }
}

/// A process that runs: it exists and is not a zombie (nobody may reap
/// the orphans here), or is a zombie leader whose other threads are still
/// exiting.
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(") ").map(|(_, r)| &r[..1]);
    if !matches!(state, Some("Z") | Some("X") | None) {
        return true;
    }
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() > 1)
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A client that opens a new connection per request, so that the L4
/// balancer spreads requests over the routers.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

struct Answer {
    status: u16,
    routed_to: String,
    served_by: String,
    cached_tokens: u64,
    body: String,
}

async fn complete(base: &str, prompt: &str, stream: bool) -> Answer {
    let prompt_tail = &prompt[prompt.len().saturating_sub(24)..];
    let resp = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 2, "stream": stream}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("request through the balancer ({prompt_tail}): {e:?}"));
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (routed_to, served_by) = (header("x-prefix-router-worker"), header("x-sim-worker"));
    let cached_tokens = header("x-sim-cached-tokens").parse().unwrap_or(0);
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    Answer {
        status,
        routed_to,
        served_by,
        cached_tokens,
        body,
    }
}

/// `prefix_router_requests_total{model="qwen3"}` of one router.
async fn routed_by(router: &str) -> u64 {
    let text = client()
        .get(format!("{router}/metrics"))
        .send()
        .await
        .expect("router /metrics")
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("prefix_router_requests_total{") && l.contains(MODEL))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_script_starts_a_working_fleet_and_stops_it() {
    haproxy();
    let fleet = Fleet::new();
    let up = fleet.run("up");
    assert!(up.status.success(), "fleet.sh up failed");

    // The run directory: ports, the balancer URL, a private token.
    let ports = fleet.ports();
    let base = ports["BALANCER_URL"].clone();
    assert_eq!(
        std::fs::read_to_string(fleet.path("balancer.url"))
            .unwrap()
            .trim(),
        base
    );
    for (k, v) in &ports {
        for p in v.split_whitespace().filter_map(|p| p.rsplit(':').next()) {
            assert_ne!(p, "6379", "{k} on 6379");
        }
    }
    let token = fleet.path("token");
    let mode = std::fs::metadata(&token)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "token file mode {mode:o}");
    assert!(std::fs::read_to_string(&token).unwrap().trim().len() >= 32);
    let routers: Vec<String> = ports["ROUTER_PORTS"]
        .split_whitespace()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    assert_eq!(routers.len(), 2);

    // Every process `up` started, and how: the workers report through the
    // balancer, not to a router.
    let pids = fleet.pids();
    let names: BTreeSet<&str> = pids.keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [
        "valkey", "router-0", "router-1", "balancer", "sim-0", "sim-1", "sim-2",
    ]
    .into();
    assert_eq!(names, expected);
    for (name, pid) in &pids {
        assert!(running(*pid), "{name} is not running");
        if name.starts_with("sim-") {
            let args = cmdline(*pid);
            let at = args
                .iter()
                .position(|a| a == "--fleet-url")
                .expect("--fleet-url");
            assert_eq!(args[at + 1], base, "{name} reports to {}", args[at + 1]);
        }
    }
    let valkey = redis::Client::open(format!("redis://127.0.0.1:{}", ports["VALKEY_PORT"]))
        .unwrap()
        .get_connection();
    let aof: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut valkey.expect("valkey connection"))
        .unwrap();
    assert_eq!(aof, ["appendonly", "yes"], "valkey runs without AOF");

    // Completions through the balancer: answered, routed to a worker that
    // really served them, the shared prefix kept on one worker, whose cache
    // then serves it.
    let doc = "Shared system prompt of the fleet test, one line of many.\n".repeat(40);
    let workers: BTreeSet<String> = ["sim-0", "sim-1", "sim-2"].map(String::from).into();
    let mut owner = None;
    for i in 0..6 {
        let a = complete(&base, &format!("{doc}Question {i}?"), false).await;
        assert_eq!(a.status, 200, "request {i}: {}", a.body);
        assert!(
            workers.contains(&a.routed_to),
            "request {i} routed to {:?}",
            a.routed_to
        );
        assert_eq!(
            a.routed_to, a.served_by,
            "request {i}: header and server differ"
        );
        let owner = owner.get_or_insert(a.routed_to.clone());
        assert_eq!(&a.routed_to, owner, "request {i} left the prefix's worker");
        if i > 0 {
            assert!(a.cached_tokens > 0, "request {i}: no cached prefix");
        }
    }
    let streamed = complete(&base, &format!("{doc}A streamed one?"), true).await;
    assert_eq!(streamed.status, 200);
    assert!(streamed.body.contains("data: [DONE]"), "{}", streamed.body);
    // The balancer spreads connections over both routers. HAProxy may
    // still hold a router down for its first checks on a loaded machine,
    // and `balance leastconn` sends every new connection to the router with
    // fewer open ones: the workers' keep-alive report connections may all
    // sit on one router, so one request at a time would always go to the
    // other. Bursts of concurrent requests, for up to 10 s, until both
    // have routed some.
    for i in 0..100 {
        let mut idle = Vec::new();
        for r in &routers {
            if routed_by(r).await == 0 {
                idle.push(r.clone());
            }
        }
        if idle.is_empty() {
            break;
        }
        assert!(i < 99, "routers {idle:?} routed nothing");
        let burst = (0..6).map(|j| {
            let base = base.clone();
            async move { complete(&base, &format!("Spread {i}.{j}?"), false).await }
        });
        for a in futures_util::future::join_all(burst).await {
            assert_eq!(a.status, 200, "spread request {i}: {}", a.body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let status = fleet.run("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "status:\n{text}");
    assert!(
        text.contains(&base),
        "status names the balancer URL:\n{text}"
    );
    for n in &expected {
        assert!(text.contains(n), "status lists {n}:\n{text}");
    }

    // A second `up` on a running fleet refuses, and changes nothing.
    let again = fleet.run("up");
    assert!(!again.status.success(), "up over a running fleet");
    assert!(
        pids.values().all(|p| running(*p)),
        "the refused up stopped something"
    );

    // A router dies: the balancer routes around it at once (redispatch),
    // and status says so.
    let victim = pids["router-0"];
    assert!(cmdline(victim)[0].ends_with("prefix-router"));
    assert!(fleet::process::signal_pid(victim, fleet::process::SIGKILL));
    // Connections made while it is being torn down die with it (as they
    // would in any crash). Once its port refuses connections (a zombie
    // leader's threads may still hold the socket), none may fail.
    let router0 = routers[0].trim_start_matches("http://").to_owned();
    let mut closed = false;
    for _ in 0..150 {
        if std::net::TcpStream::connect(&router0).is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "router-0 still accepts connections after SIGKILL");
    assert!(!running(victim), "router-0 survived SIGKILL");
    for i in 0..4 {
        let a = complete(&base, &format!("{doc}After the crash {i}?"), false).await;
        assert_eq!(
            a.status, 200,
            "after router-0 died, request {i}: {}",
            a.body
        );
        assert!(workers.contains(&a.routed_to));
    }
    let status = fleet.run("status");
    assert_eq!(
        status.status.code(),
        Some(1),
        "status must report the dead router"
    );
    assert!(String::from_utf8_lossy(&status.stdout).contains("NOT RUNNING"));

    // down stops everything it started, and the AOF stays.
    let down = fleet.run("down");
    assert!(down.status.success(), "fleet.sh down failed");
    for (name, pid) in &pids {
        assert!(!running(*pid), "{name} (pid {pid}) still runs after down");
    }
    assert!(
        std::net::TcpStream::connect(base.trim_start_matches("http://")).is_err(),
        "the balancer still accepts connections"
    );
    assert!(
        fleet.path("valkey/appendonlydir").is_dir(),
        "no AOF in the run dir"
    );
    let status = fleet.run("status");
    assert_eq!(status.status.code(), Some(3), "status after down");
}
