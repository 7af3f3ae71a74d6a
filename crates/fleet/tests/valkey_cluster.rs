//! `scripts/valkey-cluster.sh` through [`fleet::ValkeyCluster`]: a real
//! 3 + 3 Valkey Cluster on loopback comes up with every slot served and
//! every replica synced, keeps serving after a primary is killed (its
//! replica is promoted), and stops cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use fleet::ValkeyCluster;
use fleet::valkey_cluster::cli;

#[test]
fn three_primaries_and_three_replicas_survive_a_killed_primary() {
    let cluster = ValkeyCluster::start(3, 1).unwrap();
    assert_eq!(cluster.ports().len(), 6);
    assert_eq!(cluster.seeds().split(',').count(), 6);
    assert!(cluster.seeds().starts_with("redis://127.0.0.1:"));
    let primaries = cluster.primaries();
    assert_eq!(
        primaries.len(),
        3,
        "roles: {:?}",
        cluster
            .ports()
            .iter()
            .map(|&p| cluster.role(p))
            .collect::<Vec<_>>()
    );
    let info = cli(primaries[0], &["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    // Keys land on every primary (-c follows MOVED), and read back.
    for k in 0..30 {
        let key = format!("k{k}");
        assert_eq!(
            cli(primaries[0], &["-c", "SET", &key, "v"]).unwrap().trim(),
            "OK"
        );
    }
    let dbsizes: Vec<u64> = primaries
        .iter()
        .map(|&p| cli(p, &["DBSIZE"]).unwrap().trim().parse().unwrap())
        .collect();
    assert!(
        dbsizes.iter().all(|&n| n > 0),
        "keys per primary: {dbsizes:?}"
    );
    // A primary crashes: its replica takes over. Keys on the other
    // primaries read back; the crashed shard serves again, but what it
    // held survives only as far as its replica had it (asynchronous
    // replication; a replica promoted before its first sync has nothing,
    // which the fleet heals with the workers' next syncs).
    let victim = primaries[1];
    let on_victim = |key: &str| cli(victim, &["EXISTS", key]).unwrap().trim() == "1";
    let keys: Vec<(String, bool)> = (0..30)
        .map(|k| format!("k{k}"))
        .map(|key| {
            let lost_with_it = on_victim(&key);
            (key, lost_with_it)
        })
        .collect();
    assert!(keys.iter().any(|(_, v)| *v) && keys.iter().any(|(_, v)| !*v));
    cluster.kill(victim).unwrap();
    let took = cluster.wait_healthy(3, Duration::from_secs(30)).unwrap();
    eprintln!("failover took {took:?}");
    assert!(!cluster.primaries().contains(&victim));
    let reader = cluster.primaries()[0];
    // A node may redirect to the dead primary for a moment after the
    // cluster reports ok: retry briefly.
    let retry = |args: &[&str], want: &str| {
        let mut got = String::new();
        for _ in 0..50 {
            got = cli(reader, args).unwrap_or_else(|e| format!("{e:#}"));
            if got.trim() == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        got.trim().to_owned()
    };
    for (key, on_victim) in &keys {
        if !on_victim {
            assert_eq!(retry(&["-c", "GET", key], "v"), "v", "{key}");
        }
        // Every slot takes writes again, the promoted replica's too.
        assert_eq!(retry(&["-c", "SET", key, "w"], "OK"), "OK", "{key}");
        assert_eq!(retry(&["-c", "GET", key], "w"), "w", "{key}");
    }
    let dir = cluster.dir().to_owned();
    let ports = cluster.ports().to_vec();
    drop(cluster);
    assert!(!dir.exists(), "the directory goes with the cluster");
    assert!(
        ports.iter().all(|&p| cli(p, &["PING"]).is_err()),
        "every node stopped"
    );
}
