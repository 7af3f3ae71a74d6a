//! With LMCache's own controller: a prefix only one instance's LMCache
//! holds goes to its worker, and the controller's lookup finds whole chunks of
//! a shared prefix.

use super::*;

/// The venv of `scripts/lmcache-test.sh`, when present.
fn venv() -> Option<PathBuf> {
    let v = PathBuf::from(std::env::var_os("LMCACHE_VENV")?);
    v.join("bin/python").exists().then_some(v)
}

fn lmcache_scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lmcache")
}

/// A simulated LMCache worker of `instance`, registered with the
/// controller; answers `/admit` and `/evict` on the returned URL.
async fn sim_lmcache(
    venv: &Path,
    log: &Path,
    controller: &LmcacheController,
    instance: &str,
) -> (fleet::ChildProc, String) {
    let port = free_port().unwrap();
    let name = format!("lmcache-sim-{instance}");
    let log = log.join(format!("{name}.log"));
    let mut spec = fleet::lmcache::lmcache_python(venv, &name, log).args([
        lmcache_scripts()
            .join("sim_lmcache_worker.py")
            .to_string_lossy()
            .into_owned(),
        "--instance-id".into(),
        instance.into(),
        "--pull-port".into(),
        controller.pull_port.to_string(),
        "--reply-port".into(),
        controller.reply_port.to_string(),
        "--heartbeat-port".into(),
        controller.heartbeat_port.to_string(),
        "--http-port".into(),
        port.to_string(),
    ]);
    spec.pipe_stdout = true;
    let mut child = spec.spawn().unwrap();
    child
        .wait_line("lmcache-sim ready", Duration::from_secs(60))
        .await
        .unwrap();
    (child, format!("http://127.0.0.1:{port}"))
}

/// `/admit` or `/evict` of `tokens` at `location` by the sim at `sim`.
async fn operate(sim: &str, op: &str, tokens: &[u32], location: &str) {
    let resp = http()
        .post(format!("{sim}/{op}"))
        .json(&json!({"tokens": tokens, "location": location}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

/// The controller's own answer to `POST /lookup` of `tokens`.
async fn controller_lookup(controller: &str, tokens: &[u32]) -> Value {
    http()
        .post(format!("{controller}/lookup"))
        .json(&json!({ "tokens": tokens }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The controller's own lookup of `tokens`, until `done` holds of it.
async fn until_controller(controller: &str, tokens: &[u32], done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let layout = controller_lookup(controller, tokens).await;
        if done(&layout["layout_info"]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "controller never showed it: {layout}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The explain row of worker `id`.
fn row<'a>(explain: &'a Value, id: &str) -> &'a Value {
    explain["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["worker_id"] == id)
        .unwrap_or_else(|| panic!("no row for {id}: {explain}"))
}

/// The real controller with two simulated LMCache workers (instances
/// `vllm-1` and `w0`), all stopped on drop; `None` without the venv.
struct RealLmCache {
    controller_url: String,
    sim1: String,
    sim0: String,
    _procs: Vec<fleet::ChildProc>,
    _logs: tempfile::TempDir,
}

async fn real_lmcache(test: &str) -> Option<RealLmCache> {
    let Some(venv) = venv() else {
        eprintln!(
            "SKIPPED lmcache::{test}: LMCACHE_VENV is not set to a venv with lmcache; \
             run scripts/lmcache-test.sh"
        );
        return None;
    };
    let logs = tempfile::tempdir().unwrap();
    let controller = LmcacheController::start(&venv, logs.path().join("lmcache-controller.log"))
        .await
        .unwrap();
    let controller_url = controller.url.clone();
    let (p1, sim1) = sim_lmcache(&venv, logs.path(), &controller, "vllm-1").await;
    let (p0, sim0) = sim_lmcache(&venv, logs.path(), &controller, "w0").await;
    Some(RealLmCache {
        controller_url,
        sim1,
        sim0,
        _procs: vec![controller.proc, p1, p0],
        _logs: logs,
    })
}

#[tokio::test]
async fn a_prefix_only_an_instances_lmcache_holds_goes_to_its_worker() {
    let Some(lm) =
        real_lmcache("a_prefix_only_an_instances_lmcache_holds_goes_to_its_worker").await
    else {
        return;
    };
    let (controller_url, sim1, sim0) = (&lm.controller_url, &lm.sim1, &lm.sim0);
    // Instance `vllm-1` is worker w1 by the map; `w0` is w0 by name.
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), lm_args(controller_url, &["vllm-1=w1"])).await;
    let workers = two_workers(&r).await;

    // Prompt a: 600 tokens (two full chunks and a partial one) in w1's
    // LMCache CPU tier; prompt b: in w0's on disk. The index holds neither.
    let (a, b) = (prompt(1, 600), prompt(2, 700));
    operate(sim1, "admit", &a, "LocalCPUBackend").await;
    operate(sim0, "admit", &b, "LocalDiskBackend").await;
    until_controller(controller_url, &a, |l| l["vllm-1"][1] == 600).await;
    until_controller(controller_url, &b, |l| l["w0"][1] == 700).await;

    let (st, e) = post(&r, "/admin/explain", &json!({"model": M, "prompt": a})).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["chosen"]["worker_id"], "w1", "{e}");
    let why = e["chosen"]["reason"].as_str().unwrap();
    assert!(why.contains("600 of them only in its LMCache"), "{e}");
    let w1 = row(&e, "w1");
    assert_eq!(w1["lmcache"]["tokens"], 600, "{e}");
    assert_eq!(w1["lmcache"]["tier"], "cpu", "{e}");
    assert_eq!(w1["lmcache"]["location"], "LocalCPUBackend", "{e}");
    assert_eq!(w1["matched_tokens_by_tier"]["cpu"], 600, "{e}");
    assert_eq!(w1["matched_blocks"], 0, "the index holds none of it: {e}");
    assert_eq!(row(&e, "w0")["lmcache"]["tokens"], 0, "{e}");

    let (st, e) = post(&r, "/admin/explain", &json!({"model": M, "prompt": b})).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["chosen"]["worker_id"], "w0", "{e}");
    assert_eq!(row(&e, "w0")["matched_tokens_by_tier"]["disk"], 700, "{e}");

    // Served: each prompt goes to the worker whose LMCache holds it.
    assert_eq!(complete(&r, &a, Duration::from_secs(10)).await, 200);
    assert_eq!(workers[1].shared.hits.load(Ordering::SeqCst), 1);
    assert_eq!(complete(&r, &b, Duration::from_secs(10)).await, 200);
    assert_eq!(workers[0].shared.hits.load(Ordering::SeqCst), 1);

    // Evicted: the controller's view follows, and so does explain's (after
    // the router's 2 s reuse of an answer).
    operate(sim1, "evict", &a, "LocalCPUBackend").await;
    until_controller(controller_url, &a, |l| {
        l.as_object().is_some_and(|o| o.is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, e) = post(&r, "/admin/explain", &json!({"model": M, "prompt": a})).await;
    assert_eq!(row(&e, "w1")["lmcache"]["tokens"], 0, "{e}");

    // The coarse signal: the key counts, polled, per worker.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, e) = post(
            &r,
            "/admin/explain",
            &json!({"model": M, "prompt": prompt(3, 300)}),
        )
        .await;
        if row(&e, "w0")["lmcache"]["key_count"] == 3 && row(&e, "w1")["lmcache"]["key_count"] == 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "key counts never polled: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = metrics_text(&r).await;
    assert!(
        counter(&m, "prefix_router_lmcache_lookups_total{outcome=\"hit\"}") >= 2.0,
        "{m}"
    );
    assert_eq!(counter(&m, "prefix_router_lmcache_up"), 1.0, "{m}");
    r.stop().await;

    // Disaggregated: the prefill worker is the one whose LMCache holds the
    // prompt (`vllm-1` is prefill worker p1 here, `w0` is p0).
    let valkey = Valkey::start();
    let r = Router::start(
        &valkey.url(),
        lm_args(controller_url, &["vllm-1=p1", "w0=p0"]),
    )
    .await;
    let mut prefill = Vec::new();
    for id in ["p0", "p1"] {
        let w = FakeWorker::start(id).await;
        *w.shared.kv_transfer_params.lock().unwrap() = Some(json!({
            "do_remote_prefill": true, "do_remote_decode": false,
            "remote_block_ids": [[1]], "remote_engine_id": id,
            "remote_request_id": format!("cmpl-{id}"), "remote_host": "127.0.0.1",
            "remote_port": 5600, "tp_size": 1,
        }));
        let hb = json!({"worker_id": id, "url": w.url(), "model": M, "role": "prefill"});
        assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
        prefill.push(w);
    }
    let decode = FakeWorker::start("d0").await;
    let hb = json!({"worker_id": "d0", "url": decode.url(), "model": M, "role": "decode"});
    assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
    // Two prompts in each prefill worker's LMCache: by chance (the index
    // holds none of them), all four would go right one time in sixteen.
    let held = [
        (&lm.sim1, 1usize),
        (&lm.sim0, 0),
        (&lm.sim1, 1),
        (&lm.sim0, 0),
    ];
    for (i, (sim, _)) in held.iter().enumerate() {
        let p = prompt(4 + i as u32, 520 + i as u32);
        operate(sim, "admit", &p, "LocalCPUBackend").await;
        let instance = if *sim == &lm.sim1 { "vllm-1" } else { "w0" };
        until_controller(controller_url, &p, |l| l[instance][1] == 520 + i).await;
    }
    for i in 0..held.len() {
        let p = prompt(4 + i as u32, 520 + i as u32);
        assert_eq!(complete(&r, &p, Duration::from_secs(10)).await, 200);
    }
    let hits = |w: &FakeWorker| w.shared.hits.load(Ordering::SeqCst);
    assert_eq!((hits(&prefill[0]), hits(&prefill[1])), (2, 2));
    for (i, (_, worker)) in held.iter().enumerate() {
        let bodies = prefill[*worker].shared.bodies.lock().unwrap().clone();
        let p = json!(prompt(4 + i as u32, 520 + i as u32));
        assert!(
            bodies.iter().any(|b| b["prompt"] == p),
            "prompt {i} not on p{worker}"
        );
    }
    assert_eq!(hits(&decode), 4);
    r.stop().await;
}

/// LMCache matches whole 256-token chunks (and a partial last chunk only
/// of a prompt of exactly that length), our index 16-token blocks: what the
/// real controller's lookup finds of prompts sharing a prefix of random
/// length with one its LMCache holds, against the shared length. Prints
/// the share found (docs/lmcache.md records it).
#[tokio::test]
async fn the_controllers_lookup_finds_whole_chunks_of_a_shared_prefix() {
    let Some(lm) =
        real_lmcache("the_controllers_lookup_finds_whole_chunks_of_a_shared_prefix").await
    else {
        return;
    };
    // A fixed pseudo-random sequence of (cached length, shared length).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut shared_sum, mut lmcache_sum, mut blocks_sum) = (0u64, 0u64, 0u64);
    let pairs = 40u32;
    for i in 0..pairs {
        let cached_len = 300 + next(3700) as u32;
        let shared = 1 + next(u64::from(cached_len)) as u32;
        let cached = prompt(100 + i, cached_len);
        // The new prompt: the shared prefix, then tokens of its own.
        let mut asked: Vec<u32> = cached[..shared as usize].to_vec();
        asked.extend(prompt(10_000 + i, 200));
        operate(&lm.sim1, "admit", &cached, "LocalCPUBackend").await;
        until_controller(&lm.controller_url, &cached, |l| {
            l["vllm-1"][1] == cached_len
        })
        .await;
        let layout = controller_lookup(&lm.controller_url, &asked).await;
        let found = layout["layout_info"]["vllm-1"][1].as_u64().unwrap_or(0);
        // Exactly the whole chunks of the shared prefix.
        assert_eq!(
            found,
            u64::from(shared / 256 * 256),
            "{layout} shared {shared}"
        );
        shared_sum += u64::from(shared);
        lmcache_sum += found;
        blocks_sum += u64::from(shared / 16 * 16);
        operate(&lm.sim1, "evict", &cached, "LocalCPUBackend").await;
    }
    println!(
        "granularity: {pairs} prompts sharing {shared_sum} tokens with a cached one: \
         the controller's lookup finds {lmcache_sum} ({:.1}%, {:.0} tokens lost per prompt), \
         16-token blocks would find {blocks_sum} ({:.1}%)",
        100.0 * lmcache_sum as f64 / shared_sum as f64,
        (shared_sum - lmcache_sum) as f64 / f64::from(pairs),
        100.0 * blocks_sum as f64 / shared_sum as f64,
    );
}
