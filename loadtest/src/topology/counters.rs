//! [`FleetCounters`]: what the sims and the routers counted themselves, read
//! from their `GET /metrics` at two moments of a run and subtracted. A
//! disaggregated request answers the client from its decode worker alone,
//! so the prefill workers' cache hits, the KV handed over and whether the
//! prefill was skipped are only known from these counters.

use std::collections::BTreeMap;

use serde::Serialize;

use protocol::WorkerRole;

/// One role's sims, summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoleCounters {
    /// `prefill`, `decode` or `both`.
    pub role: String,
    /// Sims of that role.
    pub workers: usize,
    /// Prompt tokens of the requests they admitted
    /// (`vllm:prefix_cache_queries`).
    pub prompt_tokens: u64,
    /// Of those, found in their own cache (`vllm:prefix_cache_hits`).
    pub cached_tokens: u64,
    /// Prompt tokens loaded from their CPU tier instead of computed
    /// (`sim:cpu_hit_tokens`; 0 without a CPU tier).
    pub cpu_hit_tokens: u64,
    /// Requests they completed (`vllm:request_success`).
    pub requests: u64,
    /// Prefills answered with the hand-off for a remote decode.
    pub handoffs: u64,
    /// Requests whose prompt KV they pulled from a prefill worker.
    pub remote_prefills: u64,
    /// Prompt tokens whose KV they pulled.
    pub remote_tokens: u64,
}

impl RoleCounters {
    /// Cached over prompt tokens, as the engines count them.
    pub fn hit_rate(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }
}

/// The fleet's own counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetCounters {
    /// Per role, in the order prefill, decode, both (roles without sims
    /// left out).
    pub roles: Vec<RoleCounters>,
    /// The routers' disaggregated requests by path
    /// (`prefix_router_pd_requests_total{path}`: `disaggregated`,
    /// `skip_prefill`, `decode_only`), summed over replicas.
    pub pd_paths: BTreeMap<String, u64>,
    /// The routers' mid-stream migrations by outcome
    /// (`prefix_router_migrations_total{outcome}`: `migrated`,
    /// `not_migrated`, `failed`), summed over replicas.
    pub migrations: BTreeMap<String, u64>,
}

impl FleetCounters {
    /// Reads every sim's metrics (with its role) and every router's.
    /// Best effort: a process that does not answer counts nothing.
    pub async fn read(
        http: &reqwest::Client,
        sims: &[(String, WorkerRole)],
        routers: &[String],
    ) -> FleetCounters {
        let mut roles: Vec<RoleCounters> =
            [WorkerRole::Prefill, WorkerRole::Decode, WorkerRole::Both]
                .iter()
                .filter(|r| sims.iter().any(|(_, role)| role == *r))
                .map(|r| RoleCounters {
                    role: r.to_string(),
                    ..RoleCounters::default()
                })
                .collect();
        for (url, role) in sims {
            let text = scrape(http, url).await;
            let Some(c) = roles.iter_mut().find(|c| c.role == role.to_string()) else {
                continue;
            };
            c.workers += 1;
            c.prompt_tokens += sum(&text, "vllm:prefix_cache_queries_total", None);
            c.cached_tokens += sum(&text, "vllm:prefix_cache_hits_total", None);
            c.cpu_hit_tokens += sum(&text, "sim:cpu_hit_tokens_total", None);
            c.requests += sum(&text, "vllm:request_success_total", None);
            c.handoffs += sum(&text, "sim:prefill_handoffs_total", None);
            c.remote_prefills += sum(&text, "sim:remote_prefills_total", None);
            c.remote_tokens += sum(&text, "sim:remote_prefill_tokens_total", None);
        }
        let mut pd_paths = BTreeMap::new();
        let mut migrations = BTreeMap::new();
        for url in routers {
            let text = scrape(http, url).await;
            for path in ["disaggregated", "skip_prefill", "decode_only"] {
                let n = sum(
                    &text,
                    "prefix_router_pd_requests_total",
                    Some(("path", path)),
                );
                *pd_paths.entry(path.to_owned()).or_insert(0) += n;
            }
            for outcome in ["migrated", "not_migrated", "failed"] {
                let n = sum(
                    &text,
                    "prefix_router_migrations_total",
                    Some(("outcome", outcome)),
                );
                *migrations.entry(outcome.to_owned()).or_insert(0) += n;
            }
        }
        FleetCounters {
            roles,
            pd_paths,
            migrations,
        }
    }

    /// What was counted since `before` (a restarted process counts from 0:
    /// never below 0).
    pub fn since(&self, before: &FleetCounters) -> FleetCounters {
        let roles = self
            .roles
            .iter()
            .map(|c| {
                let b = before
                    .roles
                    .iter()
                    .find(|b| b.role == c.role)
                    .cloned()
                    .unwrap_or_default();
                RoleCounters {
                    role: c.role.clone(),
                    workers: c.workers,
                    prompt_tokens: c.prompt_tokens.saturating_sub(b.prompt_tokens),
                    cached_tokens: c.cached_tokens.saturating_sub(b.cached_tokens),
                    cpu_hit_tokens: c.cpu_hit_tokens.saturating_sub(b.cpu_hit_tokens),
                    requests: c.requests.saturating_sub(b.requests),
                    handoffs: c.handoffs.saturating_sub(b.handoffs),
                    remote_prefills: c.remote_prefills.saturating_sub(b.remote_prefills),
                    remote_tokens: c.remote_tokens.saturating_sub(b.remote_tokens),
                }
            })
            .collect();
        let since = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(then.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect()
        };
        FleetCounters {
            roles,
            pd_paths: since(&self.pd_paths, &before.pd_paths),
            migrations: since(&self.migrations, &before.migrations),
        }
    }

    /// The share of disaggregated requests whose prefill was skipped.
    pub fn skipped_share(&self) -> Option<f64> {
        let total: u64 = self.pd_paths.values().sum();
        let skipped = self.pd_paths.get("skip_prefill").copied().unwrap_or(0);
        (total > 0).then(|| skipped as f64 / total as f64)
    }
}

impl super::Fleet {
    /// What the sims (by role) and the routers counted so far.
    pub async fn counters(&self) -> FleetCounters {
        let roles = self.spec.arm.sim_roles.as_deref().unwrap_or_default();
        let sims: Vec<(String, protocol::WorkerRole)> = self
            .sims
            .iter()
            .enumerate()
            .map(|(i, s)| (s.url.clone(), roles.get(i).copied().unwrap_or_default()))
            .collect();
        let routers: Vec<String> = self
            .router_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        FleetCounters::read(&self.http, &sims, &routers).await
    }
}

impl super::Fleet {
    /// Every router's `GET /metrics` text, concatenated (best effort).
    pub async fn router_metrics(&self) -> String {
        let mut all = String::new();
        for p in &self.router_ports {
            all.push_str(&scrape(&self.http, &format!("http://127.0.0.1:{p}")).await);
            all.push('\n');
        }
        all
    }
}

async fn scrape(http: &reqwest::Client, base: &str) -> String {
    let url = format!("{}/metrics", base.trim_end_matches('/'));
    match http.get(&url).send().await {
        Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default(),
        _ => String::new(),
    }
}

/// The sum of `name`'s samples in Prometheus text, those with `label`'s
/// value only when given.
fn sum(text: &str, name: &str, label: Option<(&str, &str)>) -> u64 {
    sum_f64(text, name, label).max(0.0) as u64
}

/// [`sum`] as a real number (seconds, say).
pub fn sum_f64(text: &str, name: &str, label: Option<(&str, &str)>) -> f64 {
    sum_where(text, name, label.as_slice())
}

/// The sum of `name`'s samples in Prometheus text with every one of
/// `labels`' values.
pub fn sum_where(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            if metric != name {
                return None;
            }
            if !want.iter().all(|w| series.contains(w.as_str())) {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .filter(|v| v.is_finite())
        .map(|v| v.max(0.0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_sum_by_name_and_label() {
        let text = "# HELP x\n\
            vllm:prefix_cache_hits_total{model_name=\"m\",engine=\"0\"} 120.0\n\
            vllm:prefix_cache_hits_total{model_name=\"m\",engine=\"1\"} 30.0\n\
            vllm:prefix_cache_queries_total{model_name=\"m\"} 400.0\n\
            prefix_router_pd_requests_total{path=\"skip_prefill\"} 3\n\
            prefix_router_pd_requests_total{path=\"disaggregated\"} 5\n";
        assert_eq!(sum(text, "vllm:prefix_cache_hits_total", None), 150);
        assert_eq!(
            sum(
                text,
                "prefix_router_pd_requests_total",
                Some(("path", "skip_prefill"))
            ),
            3
        );
        assert_eq!(sum(text, "nothing", None), 0);
    }

    #[test]
    fn counts_since_a_moment_and_the_skipped_share() {
        let at = |hits: u64, skip: u64, disagg: u64| FleetCounters {
            roles: vec![RoleCounters {
                role: "prefill".into(),
                workers: 2,
                prompt_tokens: 1000 + hits,
                cached_tokens: hits,
                ..RoleCounters::default()
            }],
            pd_paths: BTreeMap::from([
                ("skip_prefill".to_owned(), skip),
                ("disaggregated".to_owned(), disagg),
            ]),
            migrations: BTreeMap::new(),
        };
        let d = at(700, 30, 60).since(&at(100, 0, 50));
        assert_eq!(d.roles[0].prompt_tokens, 600);
        assert_eq!(d.roles[0].hit_rate(), Some(1.0));
        assert_eq!(d.skipped_share(), Some(0.75));
        assert_eq!(FleetCounters::default().skipped_share(), None);
    }
}
