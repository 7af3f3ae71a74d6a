//! Routing on tiers: a GPU hit before a CPU hit before none, and a
//! syncing worker's tiers as the targets of the route and the lookup.

use super::*;

#[tokio::test]
async fn routing_prefers_a_gpu_hit_to_a_cpu_hit_and_a_cpu_hit_to_none() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    for w in ["gpu", "cpu", "none"] {
        register_in(&s, w).await;
    }
    let chain = spread(64, 5);
    s.stored_on(M, "gpu", &chain, Tier::Gpu).await.unwrap();
    // The CPU holder's first 16 blocks are still on its GPU, the rest
    // offloaded (an engine offloads a chain's tail first).
    s.stored_on(M, "cpu", &chain[..16], Tier::Gpu)
        .await
        .unwrap();
    s.stored_on(M, "cpu", &chain[16..], Tier::Cpu)
        .await
        .unwrap();
    let params = |prompt, block_size, seed| state::RouteParams {
        epsilon: 100.0,
        ..state::RouteParams::new(prompt, block_size, seed)
    };
    let prompt = 64 * 16;
    let route = |allowed: Vec<String>| {
        let s = s.clone();
        let chain = chain.clone();
        async move {
            let o = s
                .route(M, &chain, &params(prompt, 16, 11), &[], &allowed)
                .await
                .unwrap();
            let w = &o.lookup.workers[o.chosen.unwrap()];
            let cpu = o
                .lookup
                .workers
                .iter()
                .find(|w| w.info.worker_id == "cpu")
                .unwrap();
            assert_eq!(
                cpu.by_tier(),
                TierBlocks {
                    gpu: 16,
                    cpu: 48,
                    disk: 0
                },
                "the route's probes find the tiers"
            );
            (w.info.worker_id.clone(), o)
        }
    };
    let (chosen, o) = route(Vec::new()).await;
    assert_eq!(chosen, "gpu");
    s.change_in_flight(
        M,
        "gpu",
        state::InFlight {
            requests: -1,
            prefill_tokens: -(o.prefill_tokens as i64),
        },
    )
    .await
    .unwrap();
    // Without the GPU holder, the CPU holder still beats a miss, and its
    // offloaded blocks are not claimed again (a load, not a prefill).
    let (chosen, o) = route(vec!["cpu".into(), "none".into()]).await;
    assert_eq!(chosen, "cpu");
    assert_eq!(o.prefill_tokens, 0, "nothing to compute: all is cached");
    let idx = idx_of(&v, "cpu");
    assert_eq!(letter(&v, &idx, chain[40]), Some('h'));
    assert_eq!(letter(&v, &idx, chain[63]), Some('h'));
}

#[tokio::test]
async fn a_syncing_workers_tiers_are_the_targets_for_the_route_and_the_lookup() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    register_in(&s, "w").await;
    let chain = spread(80, 8);
    s.stored_on(M, "w", &chain, Tier::Gpu).await.unwrap();
    // A snapshot committed, not patched: the first 16 blocks on the GPU,
    // 16 on the CPU, 16 on disk (each ending at an indexed block), the
    // last 32 gone.
    let tiers: Vec<Tier> = (0..48).map(|i| Tier::ALL[i / 16]).collect();
    commit_unpatched(&v, &s, "w", &chain[..48], &tiers).await;
    let want = TierBlocks {
        gpu: 16,
        cpu: 16,
        disk: 16,
    };
    let exact = s.probe_with_gaps(M, &chain).await.unwrap();
    assert_eq!(exact.workers[0].by_tier(), want, "lookup");
    let o = s
        .route(
            M,
            &chain,
            &state::RouteParams::new(80 * 16, 16, 3),
            &[],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(o.lookup.workers[0].by_tier(), want, "route");
    assert_eq!(o.prefill_tokens, 32 * 16, "the prompt beyond every tier");
}
