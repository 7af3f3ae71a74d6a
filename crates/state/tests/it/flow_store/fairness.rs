//! Fairness between tenants: shares by weight across routers, equal shares
//! while backlogged, nothing charged for requests that leave unserved.

use super::*;

/// Dispatches everything waiting, one at a time, returning the tenants in
/// the fleet's order.
async fn drain(
    routers: &[&StateStore],
    t: &SaturationThresholds,
    owner: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut order = Vec::new();
    loop {
        for r in routers {
            let d = r
                .flow_dispatch(MODEL, t, Duration::from_secs(5), None)
                .await
                .unwrap();
            for m in &d.dispatched {
                order.push(owner(m));
                r.flow_leave(MODEL, &[(m.clone(), None)]).await.unwrap();
            }
            if d.waiting == 0 && d.dispatched.is_empty() {
                return order;
            }
        }
    }
}

#[tokio::test]
async fn tenants_share_by_weight_across_routers() {
    let v = Valkey::start();
    let rs = [
        router(&v, "r0").await,
        router(&v, "r1").await,
        router(&v, "r2").await,
        router(&v, "r3").await,
    ];
    worker(&rs[0], "w1").await;
    let t = limits(1);
    for (weights, want_x) in [((1.0, 1.0), 0.5), ((3.0, 1.0), 0.75)] {
        // Saturated while they queue.
        rs[0]
            .change_in_flight(
                MODEL,
                "w1",
                InFlight {
                    requests: 1,
                    prefill_tokens: 0,
                },
            )
            .await
            .unwrap();
        let mut owner = std::collections::HashMap::new();
        // X offers ten times Y's requests, spread over the four routers;
        // Y sends from one.
        let mut seq = 0;
        for i in 0..200u64 {
            let r = &rs[(i % 4) as usize];
            let (m, _) = arrive(r, &t, seq, 0, "X", weights.0).await;
            owner.insert(m, "X");
            seq += 1;
            if i % 10 == 0 {
                for _ in 0..4 {
                    let (m, _) = arrive(&rs[3], &t, seq, 0, "Y", weights.1).await;
                    owner.insert(m, "Y");
                    seq += 1;
                }
            }
        }
        rs[0]
            .change_in_flight(
                MODEL,
                "w1",
                InFlight {
                    requests: -1,
                    prefill_tokens: 0,
                },
            )
            .await
            .unwrap();
        let refs: Vec<&StateStore> = rs.iter().collect();
        let order = drain(&refs, &t, &|m: &str| owner[m].to_owned()).await;
        assert_eq!(order.len(), 280);
        // While both are backlogged (the first 80 dispatches: Y has 80),
        // X gets its weight's share.
        let both = if weights.0 > weights.1 { 100 } else { 80 };
        let x = order[..both].iter().filter(|o| *o == "X").count() as f64 / both as f64;
        assert!(
            (x - want_x).abs() <= 0.05,
            "X served {x} of the first {both}, want {want_x}"
        );
    }
}

#[tokio::test]
async fn requests_that_leave_unserved_cost_their_tenant_nothing() {
    let v = Valkey::start();
    let rs = [router(&v, "r0").await, router(&v, "r1").await];
    worker(&rs[0], "w1").await;
    let t = limits(1);
    rs[0]
        .change_in_flight(
            MODEL,
            "w1",
            InFlight {
                requests: 1,
                prefill_tokens: 0,
            },
        )
        .await
        .unwrap();
    // X floods the room; every one of its requests times out unserved.
    let mut seq = 0;
    let mut gone = Vec::new();
    for _ in 0..200 {
        let (m, at) = arrive(&rs[0], &t, seq, 0, "X", 1.0).await;
        assert!(matches!(at, Arrival::Queued(_)), "{at:?}");
        gone.push((m, Some(0)));
        seq += 1;
    }
    assert_eq!(rs[0].flow_leave(MODEL, &gone).await.unwrap(), 200);
    // Then both are backlogged, Y on another router: equal weights, equal
    // shares from the start, whatever X asked for before.
    let mut owner = std::collections::HashMap::new();
    for _ in 0..40 {
        let (m, _) = arrive(&rs[1], &t, seq, 0, "Y", 1.0).await;
        owner.insert(m, "Y");
        let (m, _) = arrive(&rs[0], &t, seq + 1, 0, "X", 1.0).await;
        owner.insert(m, "X");
        seq += 2;
    }
    rs[0]
        .change_in_flight(
            MODEL,
            "w1",
            InFlight {
                requests: -1,
                prefill_tokens: 0,
            },
        )
        .await
        .unwrap();
    let refs: Vec<&StateStore> = rs.iter().collect();
    let order = drain(&refs, &t, &|m: &str| owner[m].to_owned()).await;
    assert_eq!(order.len(), 80);
    let x = order[..20].iter().filter(|o| *o == "X").count();
    assert!(
        (8..=12).contains(&x),
        "X got {x} of the first 20 dispatches: {order:?}"
    );
}

/// The overload load test's regime, deterministic: arrivals keep coming
/// while the capacity serves two a tick; X offers ten times Y, Y offers
/// half again its fair share, both over four routers; a request waiting
/// more than 4 ticks times out (leaves unserved). Both backlogged: equal
/// weights, equal shares of what is dispatched.
#[tokio::test]
async fn backlogged_tenants_share_equally_while_requests_arrive_and_time_out() {
    let v = Valkey::start();
    let rs = [
        router(&v, "r0").await,
        router(&v, "r1").await,
        router(&v, "r2").await,
        router(&v, "r3").await,
    ];
    worker(&rs[0], "w1").await;
    let t = limits(1);
    let busy = |n: i64| {
        let r = &rs[0];
        async move {
            r.change_in_flight(
                MODEL,
                "w1",
                InFlight {
                    requests: n,
                    prefill_tokens: 0,
                },
            )
            .await
            .unwrap();
        }
    };
    let mut owner = std::collections::HashMap::new();
    // Waiting entries: member, router index, tick of arrival.
    let mut waiting: Vec<(String, usize, u64)> = Vec::new();
    let mut served = std::collections::HashMap::<&str, u64>::new();
    let mut seq = 0u64;
    let mut y_credit = 0.0;
    for tick in 0..60u64 {
        // The worker is full while requests arrive and time out.
        busy(1).await;
        // Arrivals: X 15 a tick, Y 1.5, each on the next router in turn.
        let mut arrivals: Vec<&str> = vec!["X"; 15];
        y_credit += 1.5;
        while y_credit >= 1.0 {
            arrivals.push("Y");
            y_credit -= 1.0;
        }
        for tenant in arrivals {
            let r = (seq % 4) as usize;
            let (m, at) = arrive(&rs[r], &t, seq, 0, tenant, 1.0).await;
            assert!(matches!(at, Arrival::Queued(_)), "{at:?}");
            owner.insert(m.clone(), tenant);
            waiting.push((m, r, tick));
            seq += 1;
        }
        // Timeouts: entries older than 4 ticks leave unserved.
        let (old, keep): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|w| tick - w.2 > 4);
        waiting = keep;
        for (m, r, _) in old {
            rs[r].flow_leave(MODEL, &[(m, Some(0))]).await.unwrap();
        }
        // Service: a free place, two dispatches a tick, routers polling in
        // turn (a dispatched request is routed at once, giving its place
        // back).
        busy(-1).await;
        let mut dispatched = 0;
        let mut polls = 0;
        while dispatched < 2 && polls < 64 {
            let r = polls % 4;
            polls += 1;
            let d = rs[r]
                .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
                .await
                .unwrap();
            for m in &d.dispatched {
                dispatched += 1;
                if tick >= 10 {
                    *served.entry(owner[m.as_str()]).or_default() += 1;
                }
                waiting.retain(|w| &w.0 != m);
                rs[r].flow_leave(MODEL, &[(m.clone(), None)]).await.unwrap();
            }
        }
        assert_eq!(dispatched, 2, "tick {tick}: the capacity went unused");
    }
    let (x, y) = (served["X"] as f64, served["Y"] as f64);
    let share = y / (x + y);
    assert!(
        (0.45..=0.55).contains(&share),
        "Y served {y} of {} (X {x})",
        x + y
    );
}
