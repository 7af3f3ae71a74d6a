//! Fault 4: eviction reports lost (`--drop-evictions 1`: every evicted
//! block goes unreported), with the sims' periodic full sync on (every
//! 1 s) and, for comparison, practically off (every hour).
//!
//! Two routers, three sims with small KV pools (256 blocks, about 7 of the
//! 32 documents each: constant eviction), 20 req/s over 32 documents of
//! ~36 blocks (Zipf 1.0; long enough to hold anchors, every 16th block,
//! besides their last block), 8 s per arm. Before each request the client asks
//! `/admin/explain` how many leading blocks the fleet believes each worker
//! holds; a **false hit** is a request routed to a worker the fleet
//! believed held `m > 0` blocks of its prompt, which then reported fewer
//! cached tokens than those blocks (`x-sim-cached-tokens`, allowing for
//! vLLM's rule that the prompt's last token is always computed). Asserts:
//! no request failed; with syncs the false-hit rate is lower than without;
//! with syncs the state converges by itself; without, phantom entries
//! remain until a snapshot (`/sim/resync`) heals them; `inspect --check`
//! is clean. Prints both rates. (With a 2 s sync the gap is smaller and
//! noisier at this churn: see `docs/reliability.md`.)

use std::time::Duration;

use crate::fleet::{Fleet, FleetSpec, sim_flags};
use crate::load::{Load, LoadConfig, Record, counts, failures};
use crate::support::http;

/// Tokens per block (the engines' `--block-size`).
const BLOCK: u64 = 16;

pub async fn run() {
    let arms = [("sync-1s", "1s"), ("sync-1h", "1h")];
    let flags = |sync: &str| {
        sim_flags()
            .set("--num-blocks", "256")
            .set("--time-scale", "0.05")
            .set("--drop-evictions", "1")
            .set("--sync-interval", sync)
    };
    // The second arm's sims start with the fleet, silent until their turn.
    let spec = FleetSpec {
        sims: 3,
        sim_flags: flags(arms[0].1),
        standby: (0..3)
            .map(|i| (format!("{}-{i}", arms[1].0), flags(arms[1].1)))
            .collect(),
        ..FleetSpec::default()
    };
    let mut f = Fleet::start("lost-evictions", spec).await;
    let mut rates = Vec::new();
    for (n, (arm, _)) in arms.into_iter().enumerate() {
        if n > 0 {
            f.activate_standby().await;
        }
        let cfg = LoadConfig {
            rate: 20.0,
            docs: 32,
            doc_lines: 40,
            zipf: 1.0,
            max_tokens: 4,
            explain: true,
            doc_prefix: if n == 0 { "on" } else { "off" },
            ..LoadConfig::default()
        };
        let traffic = Load::start(f.url(), cfg, f.epoch);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let records = traffic.stop().await;
        f.mark(&format!("{arm}: load stopped"));
        let c = counts(&records);
        let fails = failures(&records);
        assert_eq!(c.failed, 0, "{arm}: client requests failed:\n{fails}");
        let (believed, false_hits) = false_hits(&records);
        let rate = false_hits as f64 / believed.max(1) as f64;
        let mut dropped = 0;
        for s in f.live_sims() {
            let st = s.state().await.expect("state");
            dropped += st["pusher"]["dropped_evictions"].as_u64().unwrap_or(0);
        }
        assert!(dropped > 0, "{arm}: no eviction report was dropped");
        let phantoms: usize = f.mismatches().await.iter().map(|(_, a, _)| a).sum();
        let converge = if n == 0 {
            f.wait_converged(&format!("{arm}, by the periodic sync"))
                .await
        } else {
            // Phantom entries stay: nothing heals them but a snapshot.
            assert!(phantoms > 0, "{arm}: no phantom entry without syncs");
            tokio::time::sleep(Duration::from_secs(1)).await;
            let still: usize = f.mismatches().await.iter().map(|(_, a, _)| a).sum();
            assert!(still > 0, "{arm}: phantom entries vanished without a sync");
            for s in f.live_sims() {
                let resp = http()
                    .post(s.url("/sim/resync"))
                    .send()
                    .await
                    .expect("resync");
                assert_eq!(resp.status(), 202);
            }
            f.wait_converged(&format!("{arm}, after /sim/resync")).await
        };
        f.inspect_check(arm).await;
        println!(
            "FAULTS lost-evictions-{arm} sent={} failed={} dropped_eviction_reports={dropped} \
             believed_hits={believed} false_hits={false_hits} false_hit_rate={rate:.3} \
             phantom_entries_at_stop={phantoms} converge_after_stop={converge:.2}s cached_share={:.3}",
            c.sent, c.failed, c.cached_share
        );
        rates.push((arm, rate, false_hits, believed));
    }
    let (on, off) = (rates[0].1, rates[1].1);
    assert!(
        on < off,
        "the false-hit rate with syncs ({on:.3}) is not below the rate without ({off:.3}): {rates:?}"
    );
}

/// (requests the fleet believed a hit on their worker, false hits).
fn false_hits(records: &[Record]) -> (usize, usize) {
    let (mut believed, mut false_hits) = (0, 0);
    for r in records.iter().filter(|r| r.ok) {
        let (Some(m), Some(cached), Some(prompt)) =
            (r.believed_blocks(), r.cached_tokens, r.prompt_tokens)
        else {
            continue;
        };
        if m == 0 {
            continue;
        }
        believed += 1;
        // The engine computes the prompt's last token whatever it caches.
        let expected = m.min(prompt.saturating_sub(1) / BLOCK);
        if cached / BLOCK < expected {
            false_hits += 1;
        }
    }
    (believed, false_hits)
}
