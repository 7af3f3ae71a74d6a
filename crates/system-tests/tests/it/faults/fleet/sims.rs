//! The fleet's sims: `sim-worker` processes started through `fleet`, their
//! test API (`/sim/state`, `/sim/faults`), their registration and exits.

use super::*;

/// A running `sim-worker`; SIGKILLed on drop.
pub struct SimProcess {
    child: fleet::ChildProc,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its worker id.
    pub id: String,
}

/// A sim spawned ([`fleet::SimSpec`]), not yet serving.
pub(super) struct Launching {
    child: fleet::ChildProc,
    id: String,
}

impl Launching {
    pub(super) fn spawn(id: &str, fleet_url: &str, flags: &Flags, log: &Path) -> Launching {
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

    pub(super) async fn ready(mut self) -> SimProcess {
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

impl Fleet {
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
}
