//! The fuzzing rig: a real router on a real valkey-server with fake
//! workers, the calls it sends, and the judge of every answer.

use super::*;

// ---------------------------------------------------------------- checks

/// One request the fuzzer sends.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) method: reqwest::Method,
    pub(super) path: String,
    pub(super) body: Bytes,
}

impl Call {
    pub(super) fn post(path: &str, body: impl Into<Bytes>) -> Call {
        Call {
            method: reqwest::Method::POST,
            path: path.to_owned(),
            body: body.into(),
        }
    }
}

/// Sends `call` (with the token) and judges the answer; counts its status.
pub(super) async fn check_call(
    client: &reqwest::Client,
    router: &Router,
    call: &Call,
    statuses: &Mutex<BTreeMap<u16, usize>>,
) -> Result<(), TestCaseError> {
    let what = format!(
        "{} {} {:?}",
        call.method,
        call.path,
        String::from_utf8_lossy(&call.body[..call.body.len().min(300)])
    );
    let send = client
        .request(call.method.clone(), router.url(&call.path))
        .bearer_auth(TOKEN)
        .body(call.body.clone())
        .send();
    let exchange = async {
        let resp = send.await?;
        let status = resp.status().as_u16();
        let relayed = resp.headers().contains_key(WORKER_HEADER);
        let body = resp.bytes().await?;
        Ok::<_, reqwest::Error>((status, relayed, body))
    };
    let (status, relayed, body) =
        match tokio::time::timeout(Duration::from_secs(30), exchange).await {
            Err(_) => return Err(TestCaseError::fail(format!("{what}: no answer in 30 s"))),
            Ok(Err(e)) => {
                return Err(TestCaseError::fail(format!(
                    "{what}: connection failed (a panic?): {e}"
                )));
            }
            Ok(Ok(answer)) => answer,
        };
    if let Ok(mut counts) = statuses.lock() {
        *counts.entry(status).or_default() += 1;
    }
    if std::env::var_os("PREFIX_ROUTER_FUZZ_DEBUG").is_some() && status >= 400 {
        println!(
            "DEBUG {} {status} {}",
            call.path,
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
    }
    judge(status, relayed, &body).map_err(|why| TestCaseError::fail(format!("{what}: {why}")))
}

/// The rules every answer obeys.
pub(super) fn judge(status: u16, relayed: bool, body: &[u8]) -> Result<(), String> {
    if status >= 500 && !matches!(status, 502..=504) {
        return Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(body)
        ));
    }
    if status >= 400 && !relayed {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "{status} body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(body)
            )
        })?;
        let err = &v["error"];
        let ok = err["message"].as_str().is_some_and(|m| !m.is_empty())
            && err["type"].as_str().is_some_and(|t| !t.is_empty())
            && err["code"] == status;
        if !ok {
            return Err(format!("{status} body is not the error shape: {v}"));
        }
    }
    Ok(())
}

/// A runtime, a Valkey and a router (with the real tokenizer for [`QWEN`]
/// and a LoRA adapter), and `workers` fake workers registered for it.
pub(super) struct Rig {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) valkey: Valkey,
    pub(super) router: Router,
    pub(super) workers: Vec<FakeWorker>,
    pub(super) client: reqwest::Client,
    /// Answers by status, over the whole run.
    pub(super) statuses: Mutex<BTreeMap<u16, usize>>,
}

impl Rig {
    pub(super) fn start(workers: usize) -> Rig {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let valkey = Valkey::start();
        let (router, workers, client) = rt.block_on(async {
            let mut a = args();
            a.model = Some(QWEN.into());
            a.tokenizer_dir = Some(tokenizer_dir());
            a.loras = vec!["sql-lora=/adapters/sql-lora".into()];
            let router = Router::start(&valkey.url(), a).await;
            let client = reqwest::Client::new();
            for _ in 0..600 {
                if client.get(router.url("/health")).send().await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ttls = StateTtls {
                worker_lease: Duration::from_secs(600),
                ..StateTtls::default()
            };
            let s = store(&valkey, "pr", "fuzz-setup", ttls);
            let mut fakes = Vec::new();
            for i in 0..workers {
                let w = FakeWorker::start(&format!("w{i}")).await;
                // The first streamed request waits for one release per chunk.
                for _ in 0..3 {
                    let _ = w.release.send(());
                }
                let hb = WorkerHeartbeat {
                    worker_id: w.name().into(),
                    url: w.url(),
                    load: None,
                };
                s.heartbeat(QWEN, &hb).await.expect("heartbeat");
                fakes.push(w);
            }
            (router, fakes, client)
        });
        Rig {
            rt,
            valkey,
            router,
            workers,
            client,
            statuses: Mutex::default(),
        }
    }

    /// Prints the answers by status since the last report, and forgets them.
    pub(super) fn report(&self, name: &str) {
        if let Ok(mut counts) = self.statuses.lock() {
            println!("answers by status: {name}: {counts:?}");
            counts.clear();
        }
    }

    pub(super) fn call(&self, call: &Call) -> Result<(), TestCaseError> {
        self.rt
            .block_on(check_call(&self.client, &self.router, call, &self.statuses))
    }

    /// The router survived, then stops it; the state of every model is
    /// consistent, by the raw maps and by `prefix-router inspect --check`.
    pub(super) fn finish(self) {
        let Rig {
            rt,
            valkey,
            router,
            workers,
            client,
            statuses,
        } = self;
        drop(statuses);
        rt.block_on(async {
            assert!(router.is_running(), "the router's task ended");
            let health = client
                .get(router.url("/health"))
                .send()
                .await
                .expect("/health");
            assert_eq!(health.status().as_u16(), 200);
            router.stop().await;
        });
        let s = store(&valkey, "pr", "fuzz-check", StateTtls::default());
        let models = rt.block_on(s.models()).expect("models");
        for model in &models {
            // Background purges of drained workers may still be running.
            let mut agreed = false;
            for _ in 0..100 {
                let raw = raw_state(&valkey, "pr", model);
                if raw.forward_pairs() == raw.reverse_pairs()
                    && raw.speculative_forward_pairs() == raw.speculative_pairs()
                {
                    agreed = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(agreed, "forward and reverse maps of {model:?} disagree");
        }
        let out = support::router_command("inspect")
            .args(["--check", "--valkey", &valkey.url()])
            .output()
            .expect("run inspect");
        assert!(
            out.status.success(),
            "inspect --check failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "state checked: {} models consistent, inspect --check passed",
            models.len()
        );
        drop(workers);
        drop(rt);
    }
}
