//! Inspecting a Valkey Cluster: [`Nodes`] finds its primaries and reads
//! the models set once through a cluster connection; each primary is then
//! inspected as a server of its own (every part of a sharded model lives
//! in one slot, so on one node), and [`merge_checks`] adds the reports up.

use std::collections::BTreeSet;

use super::redact::{Redactor, redact_url};
use super::{CheckReport, CheckStats, InspectArgs, InspectError};
use crate::{KeySpace, normalize_url};

/// A cluster's primaries and its models set.
pub(crate) struct Nodes {
    url: String,
    listed: BTreeSet<String>,
    primaries: Vec<String>,
}

impl Nodes {
    /// None for one server (a single URL); else the cluster behind the
    /// comma-separated seeds of `args.valkey`.
    pub(crate) async fn discover(args: &InspectArgs) -> Result<Option<Nodes>, InspectError> {
        if !args.valkey.contains(',') {
            return Ok(None);
        }
        let redactor = Redactor::new(&args.valkey);
        let url = redact_url(&args.valkey);
        let seeds = args
            .valkey
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(normalize_url)
            .collect::<Result<Vec<_>, _>>()?;
        let fail = |context: &str, e: redis::RedisError| InspectError::Valkey {
            url: url.clone(),
            context: context.to_owned(),
            detail: redactor.clean(&e.to_string()),
        };
        let client = redis::cluster::ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(args.timeout)
            .response_timeout(args.timeout)
            .build()
            .map_err(|e| fail("configuring the cluster client", e))?;
        let mut conn = client
            .get_async_connection()
            .await
            .map_err(|e| fail("connecting to the cluster", e))?;
        let models = KeySpace::new(&args.key_prefix)?.models();
        let listed: BTreeSet<String> = redis::cmd("SMEMBERS")
            .arg(&models)
            .query_async(&mut conn)
            .await
            .map_err(|e| fail("SMEMBERS models", e))?;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await
            .map_err(|e| fail("CLUSTER NODES", e))?;
        let first = seeds.first().cloned().unwrap_or_default();
        let primaries = serving_primaries(&nodes)
            .into_iter()
            .map(|addr| with_address(&first, &addr))
            .collect();
        Ok(Some(Nodes {
            url,
            listed,
            primaries,
        }))
    }

    /// The seeds, passwords redacted.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The models set.
    pub(crate) fn listed(&self) -> &BTreeSet<String> {
        &self.listed
    }

    /// Each primary that serves slots, as a URL with the seeds' scheme and
    /// credentials.
    pub(crate) fn primaries(&self) -> &[String] {
        &self.primaries
    }

    /// `args` aimed at one node.
    pub(crate) fn args_for(&self, args: &InspectArgs, node: &str) -> InspectArgs {
        InspectArgs {
            valkey: node.to_owned(),
            ..args.clone()
        }
    }
}

/// `host:port` of every primary in a `CLUSTER NODES` reply that is not
/// failed and serves slots.
fn serving_primaries(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = f.get(2)?;
            let serving = flags.contains("master") && !flags.contains("fail") && f.len() > 8;
            serving.then(|| f[1].split(['@', ',']).next().unwrap_or("").to_owned())
        })
        .filter(|a| !a.is_empty())
        .collect()
}

/// `url` with its `host:port` replaced by `addr` (scheme, credentials and
/// database kept).
fn with_address(url: &str, addr: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("redis://{addr}");
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => format!("{scheme}://{userinfo}@{addr}{path}"),
        None => format!("{scheme}://{addr}{path}"),
    }
}

/// One report of the per-node reports.
pub(crate) fn merge_checks(
    url: &str,
    reports: Vec<CheckReport>,
    show: usize,
) -> Result<CheckReport, InspectError> {
    let mut it = reports.into_iter();
    let mut m = it.next().ok_or(InspectError::Invalid {
        what: "valkey cluster",
        detail: "no primary answered".into(),
    })?;
    m.valkey = url.to_owned();
    for r in it {
        m.clean &= r.clean;
        m.violations += r.violations;
        m.confirmed += r.confirmed;
        m.unverified += r.unverified;
        m.transient += r.transient;
        for (k, v) in r.by_code {
            *m.by_code.entry(k).or_default() += v;
        }
        for (k, v) in r.by_invariant {
            *m.by_invariant.entry(k).or_default() += v;
        }
        m.shown.extend(r.shown);
        add_stats(&mut m.stats, &r.stats);
    }
    m.shown.truncate(show);
    Ok(m)
}

fn add_stats(a: &mut CheckStats, b: &CheckStats) {
    a.models += b.models;
    a.keys += b.keys;
    a.incarnations += b.incarnations;
    a.forward_fields += b.forward_fields;
    a.entries += b.entries;
    a.reverse_members += b.reverse_members;
    a.speculative_members += b.speculative_members;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_come_from_cluster_nodes() {
        let nodes = "\
a 127.0.0.1:7000@7100 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@7101 master,fail - 0 0 2 disconnected
c 127.0.0.1:7004@7104 slave a 0 0 1 connected
d 127.0.0.1:7005@7105,host master - 0 0 7 connected 5461-10922
e 127.0.0.1:7006@7106 master - 0 0 8 connected
";
        assert_eq!(
            serving_primaries(nodes),
            ["127.0.0.1:7000", "127.0.0.1:7005"]
        );
    }

    #[test]
    fn node_urls_keep_the_seeds_credentials() {
        assert_eq!(
            with_address("redis://u:p@h:1/0", "10.0.0.2:7000"),
            "redis://u:p@10.0.0.2:7000/0"
        );
        assert_eq!(
            with_address("rediss://h:1", "10.0.0.2:7000"),
            "rediss://10.0.0.2:7000"
        );
    }
}
