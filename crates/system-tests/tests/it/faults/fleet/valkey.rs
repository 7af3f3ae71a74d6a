//! The shared state in Valkey against the sims' caches (entries per worker,
//! convergence, `inspect --check`, the workers list), and Valkey itself
//! killed, restarted and measured.

use super::*;

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

impl Fleet {
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
