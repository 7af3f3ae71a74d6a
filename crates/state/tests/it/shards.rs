//! A model split into shards by prefix family (`protocol::family`), on one
//! Valkey and on a real 3 + 3 Valkey Cluster: reports land in their
//! family's part only, routes and claims happen in the part of the
//! prompt's family and see what a single part would, the per-shard sync
//! check recognises an unchanged worker, a flushed state comes back from a
//! sync, `inspect --check` is clean, and on the cluster a killed primary's
//! replica takes over while the store follows and a sync restores the
//! state.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use fleet::ValkeyCluster;
use fleet::valkey_cluster::cli;
use protocol::Tier;
use protocol::family::{FamilyBlock, block_shards, chain_family, split_families};
use protocol::hashing::BlockHash;
use protocol::index::{digests, digests_hex, indexed_positions};
use state::{
    BatchLimits, ConnectionSettings, InFlight, Sharding, StateStore, StateTtls, WorkerHeartbeat,
    part_names,
};
use support::{Valkey, register_in};

const M: &str = "m";
const BLOCKS: u64 = 40;

fn chain(salt: u64) -> Vec<BlockHash> {
    (0..BLOCKS)
        .map(|i| BlockHash(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i + 1)))
        .collect()
}

/// The blocks a worker holding all of `chain` reports: its indexed ones,
/// each in the chain's family (family depth 1: the first block).
fn reported(chain: &[BlockHash]) -> Vec<FamilyBlock> {
    let family = chain_family(chain, 1);
    indexed_positions(chain.len())
        .map(|p| FamilyBlock::new(chain[p], family))
        .collect()
}

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        router_lease: Duration::from_secs(120),
        ..StateTtls::default()
    }
}

fn sharded_store(url: &str, shards: usize) -> StateStore {
    let mut settings = ConnectionSettings::new(url);
    settings.hot_timeout = Duration::from_secs(2);
    let s = StateStore::new(settings, "pr", "r1", ttls(), BatchLimits::default()).unwrap();
    s.set_sharding(Sharding {
        shards,
        family_blocks: 1,
    })
    .unwrap();
    s
}

async fn store_chain(s: &StateStore, worker: &str, chain: &[BlockHash]) {
    let (hashes, families) = split_families(&reported(chain));
    s.stored_in_families(M, worker, &hashes, Some(&families), Tier::Gpu)
        .await
        .unwrap();
}

/// What the part that routes `chain` knows of `worker`.
async fn seen(s: &StateStore, chain: &[BlockHash], worker: &str) -> Option<state::WorkerMatch> {
    s.probe(M, chain)
        .await
        .unwrap()
        .workers
        .into_iter()
        .find(|w| w.info.worker_id == worker)
}

async fn matched(s: &StateStore, chain: &[BlockHash], worker: &str) -> usize {
    seen(s, chain, worker).await.map_or(0, |w| w.matched_blocks)
}

/// `worker`'s requests in flight as the part that routes `chain` sees them.
async fn in_flight(s: &StateStore, chain: &[BlockHash], worker: &str) -> u64 {
    seen(s, chain, worker).await.map_or(0, |w| w.info.in_flight)
}

/// Waits (up to 10 s: the other parts count from the next batch) until
/// every part of `chains` counts `want` requests in flight on `worker`.
async fn in_flight_everywhere(s: &StateStore, chains: &[Vec<BlockHash>], worker: &str, want: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for c in chains {
        loop {
            let n = in_flight(s, c, worker).await;
            if n == want {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "part of {:?}: {n} in flight, not {want}",
                c[0]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Routes `chain` as a request that then completes: (chosen worker, blocks
/// it held). The release waits for the other parts' in-flight counts.
async fn route(s: &StateStore, chain: &[BlockHash]) -> (String, usize) {
    let params = state::RouteParams::new(BLOCKS * 16, 16, 7);
    let out = s.route(M, chain, &params, &[], &[]).await.unwrap();
    let w = &out.lookup.workers[out.chosen.unwrap()];
    assert_eq!(out.covered, chain.len());
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.change_in_flight(M, &w.info.worker_id, state::InFlight::requests(-1))
        .await
        .unwrap();
    (w.info.worker_id.clone(), w.matched_blocks)
}

/// Per shard, the digests of what `worker` holds there.
fn shard_digests(blocks: &[FamilyBlock], shards: usize) -> Vec<String> {
    let mut sets = vec![Vec::new(); shards];
    for b in blocks {
        for s in block_shards(b.family, shards) {
            sets[s].push(b.hash);
        }
    }
    sets.into_iter().map(|v| digests_hex(&digests(v))).collect()
}

/// The scenario both deployments run. `flush` empties every server.
async fn scenario(s: &StateStore, shards: usize, flush: impl Fn()) {
    register_in(s, "w1").await;
    register_in(s, "w2").await;
    // In-flight counts count while this router's lease lives (every part).
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    // Thirty prefix families, alternately held by w1 and w2.
    let chains: Vec<Vec<BlockHash>> = (1..=30).map(chain).collect();
    for (i, c) in chains.iter().enumerate() {
        store_chain(s, if i % 2 == 0 { "w1" } else { "w2" }, c).await;
    }
    for (i, c) in chains.iter().enumerate() {
        let (holder, other) = if i % 2 == 0 {
            ("w1", "w2")
        } else {
            ("w2", "w1")
        };
        assert_eq!(matched(s, c, holder).await, BLOCKS as usize, "chain {i}");
        assert_eq!(matched(s, c, other).await, 0, "chain {i}");
        // A prompt extending the chain matches the held prefix, to its
        // last anchor (block 32; protocol::index).
        let mut longer = c.clone();
        longer.push(BlockHash(0xabc0 + i as u64));
        assert_eq!(matched(s, &longer, holder).await, 32);
    }
    // Listing sums the parts' entries: each block is in one part.
    let listed = s.workers(M).await.unwrap();
    assert_eq!(listed.len(), 2);
    let per_chain = reported(&chains[0]).len() as u64;
    for w in &listed {
        assert_eq!(w.info.blocks, Some(15 * per_chain), "{w:?}");
    }

    // Routing: a held prompt goes to its holder; a new one is claimed in
    // its family's part, where the next route finds it.
    assert_eq!(
        route(s, &chains[3]).await,
        ("w2".to_owned(), BLOCKS as usize)
    );
    let fresh = chain(1000);
    let (first, held) = route(s, &fresh).await;
    assert_eq!(held, 0);
    assert_eq!(matched(s, &fresh, &first).await, BLOCKS as usize);
    assert_eq!(
        route(s, &fresh).await,
        (first, BLOCKS as usize),
        "the claim steers the repeat"
    );

    // Every part counts a routed request in flight: the routing part at
    // once, the others from the next batch (state's fan_out); the release
    // clears them all.
    let params = state::RouteParams::new(BLOCKS * 16, 16, 9);
    let out = s.route(M, &chains[5], &params, &[], &[]).await.unwrap();
    let held_by = out.lookup.workers[out.chosen.unwrap()]
        .info
        .worker_id
        .clone();
    in_flight_everywhere(s, &chains, &held_by, 1).await;
    s.change_in_flight(M, &held_by, state::InFlight::requests(-1))
        .await
        .unwrap();
    in_flight_everywhere(s, &chains, &held_by, 0).await;

    // Anti-entropy: w1's confirmed set, digested per shard, is unchanged;
    // a missing block makes its shard differ.
    let w1: Vec<FamilyBlock> = chains.iter().step_by(2).flat_map(|c| reported(c)).collect();
    let digests = shard_digests(&w1, shards);
    assert_eq!(s.sync_check_shards(M, "w1", &digests).await.unwrap(), None);
    let fewer = shard_digests(&w1[1..], shards);
    let differing = s.sync_check_shards(M, "w1", &fewer).await.unwrap().unwrap();
    assert_eq!(differing.len(), 1, "{differing:?}");
    assert!(s.sync_check_shards(M, "w1", &digests[1..]).await.is_err());
    // A repair syncs that shard's bucket alone, both ways.
    let (fewer_h, fewer_f) = split_families(&w1[1..]);
    let out = s
        .sync_repair(M, "w1", &differing, &fewer_h, Some(&fewer_f), None)
        .await
        .unwrap();
    assert_eq!((out.added, out.removed), (0, 1));
    assert_eq!(s.sync_check_shards(M, "w1", &fewer).await.unwrap(), None);
    let (all_h, all_f) = split_families(&w1);
    let out = s
        .sync_repair(M, "w1", &differing, &all_h, Some(&all_f), None)
        .await
        .unwrap();
    assert_eq!((out.added, out.removed), (1, 0));
    assert_eq!(s.sync_check_shards(M, "w1", &digests).await.unwrap(), None);

    // Evicting a chain's tip shortens the match to the last anchor.
    let tip = FamilyBlock::new(chains[0][BLOCKS as usize - 1], Some(chains[0][0]));
    let (h, f) = split_families(&[tip]);
    assert_eq!(s.evict_in_families(M, "w1", &h, Some(&f)).await.unwrap(), 1);
    assert_eq!(matched(s, &chains[0], "w1").await, 32);

    // Valkey loses everything: one heartbeat and one sync bring it back.
    flush();
    assert_eq!(matched(s, &chains[2], "w1").await, 0);
    register_in(s, "w1").await;
    let (hashes, families) = split_families(&w1);
    s.sync_in_families(M, "w1", &hashes, Some(&families), None)
        .await
        .unwrap();
    for c in chains.iter().step_by(2) {
        assert_eq!(matched(s, c, "w1").await, BLOCKS as usize);
    }
    let digests = shard_digests(&w1, shards);
    assert_eq!(s.sync_check_shards(M, "w1", &digests).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_model_on_one_server_routes_and_syncs_by_family() {
    let valkey = Valkey::start();
    let s = sharded_store(&valkey.url(), 3);
    let url = valkey.url();
    let flush = move || {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut c = client.get_connection().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    };
    scenario(&s, 3, flush).await;
    let mut inspect = state::inspect::InspectArgs::new(&valkey.url());
    inspect.recheck_delay = Duration::ZERO;
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{:#?}", report.shown);
    // Every part holds forward buckets: the families spread.
    let client = redis::Client::open(valkey.url().as_str()).unwrap();
    let mut c = client.get_connection().unwrap();
    for part in part_names(M, 3) {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("pr:{{{part}}}:f:*"))
            .query(&mut c)
            .unwrap();
        assert!(!keys.is_empty(), "no buckets in {part}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_model_spreads_over_a_valkey_cluster() {
    let cluster = ValkeyCluster::start(3, 1).unwrap();
    let s = sharded_store(cluster.seeds(), 6);
    let primaries = cluster.primaries();
    let flush_on = primaries.clone();
    let flush = move || {
        for &p in &flush_on {
            cli(p, &["FLUSHALL"]).unwrap();
        }
    };
    scenario(&s, 6, flush).await;
    // inspect reads each primary on its own and merges.
    let mut inspect = state::inspect::InspectArgs::new(cluster.seeds());
    inspect.recheck_delay = Duration::ZERO;
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{:#?}", report.shown);
    assert_eq!(report.stats.models, 6, "{:?}", report.stats);
    let summary = state::inspect::summarize(&inspect).await.unwrap();
    let names: Vec<&str> = summary.models.iter().map(|m| m.model.as_str()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names.iter().all(|n| state::part_model(n) == M), "{names:?}");
    // Each primary owns two of the six parts and holds part of the model.
    for &p in &primaries {
        let size: u64 = cli(p, &["DBSIZE"]).unwrap().trim().parse().unwrap();
        assert!(size > 10, "primary {p} holds {size} keys");
    }

    // A primary crashes. Its replica takes over; the store follows the
    // new topology by itself, the workers' heartbeats and syncs restore
    // whatever the promoted replica lacked, and the state checks clean.
    cluster.kill(primaries[0]).unwrap();
    cluster.wait_healthy(3, Duration::from_secs(30)).unwrap();
    let chains: Vec<Vec<BlockHash>> = (1..=30).map(chain).collect();
    let w1: Vec<FamilyBlock> = chains.iter().step_by(2).flat_map(|c| reported(c)).collect();
    let (hashes, families) = split_families(&w1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let healed = async {
            let hb = WorkerHeartbeat {
                worker_id: "w1".into(),
                url: "http://127.0.0.1:9/w1".into(),
                load: None,
            };
            s.heartbeat(M, &hb).await?;
            s.sync_in_families(M, "w1", &hashes, Some(&families), None)
                .await
        };
        match tokio::time::timeout(Duration::from_secs(5), healed).await {
            Ok(Ok(_)) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "no sync after the failover: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for c in chains.iter().step_by(2) {
        assert_eq!(matched(&s, c, "w1").await, BLOCKS as usize);
    }
    let digests = shard_digests(&w1, 6);
    assert_eq!(s.sync_check_shards(M, "w1", &digests).await.unwrap(), None);
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{:#?}", report.shown);
}

/// The other parts of a sharded model get a request's count and, often in
/// the same 10 ms batch, the end of its prefill (or of another request's):
/// the batch's net goes to Valkey and to this router's ledger alike, so the
/// lease renewals that reconcile the two leave the real counts in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_counts_and_prefill_releases_survive_reconciliation() {
    let valkey = Valkey::start();
    let s = sharded_store(&valkey.url(), 3);
    register_in(&s, "w1").await;
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    // Two requests on two families.
    let chains: Vec<Vec<BlockHash>> = (1..=12).map(chain).collect();
    let params = state::RouteParams::new(BLOCKS * 16 + 5, 16, 7);
    let first = s.route(M, &chains[0], &params, &[], &[]).await.unwrap();
    assert_eq!(first.prefill_tokens, BLOCKS * 16 + 5);
    // Its count reaches the other parts; then, in one batch, its prefill
    // ends and a second request comes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let done = InFlight::prefill_tokens(-(first.prefill_tokens as i64));
    s.change_in_flight(M, "w1", done).await.unwrap();
    let second = s.route(M, &chains[1], &params, &[], &[]).await.unwrap();
    let open = second.prefill_tokens;
    // Every part, seen through a chain it routes, after the batch and two
    // renewals: two requests, the second's prefill.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    }
    for c in &chains {
        let w = seen(&s, c, "w1").await.unwrap();
        assert_eq!((w.info.in_flight, w.info.prefill_tokens), (2, open));
    }
}
