//! What the scenarios read from the processes: the routers' metrics, a
//! process's RSS, HAProxy's connection log.

use super::*;

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

impl Fleet {
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
}
