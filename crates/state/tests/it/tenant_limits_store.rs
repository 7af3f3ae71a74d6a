//! A tenant's limits in the store (`limit_admit.lua`, `limit_settle.lua`,
//! `limit_lease.lua`) against a real server: all-or-nothing admission,
//! dry runs that write nothing, token corrections, and places in flight
//! that a dead router stops holding when its lease expires. Also run
//! against redis-server 7 (scripts/test.sh).

use crate::support;

use std::time::Duration;

use state::{Gcra, LimitCheck, LimitReason};
use support::{Valkey, fast_ttls, store};

const TENANT: &str = "key:0123456789abcdef";

fn keys(v: &Valkey) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut v.conn()).unwrap();
    k.sort();
    k
}

#[tokio::test]
async fn admission_is_all_or_nothing_and_dry_runs_write_nothing() {
    let v = Valkey::start();
    let s = store(&v, "pr", "r1", fast_ttls());
    // 1 request per second, 2 at once; 100 tokens per second, 50 at once.
    let check = |cost| LimitCheck {
        requests: Some(Gcra {
            interval_us: 1_000_000,
            tolerance_us: 2_000_000,
        }),
        tokens: Some(Gcra {
            interval_us: 10_000,
            tolerance_us: 500_000,
        }),
        cost,
        max_concurrent: None,
    };
    let dry = s.limit_admit(TENANT, &check(10), true).await.unwrap();
    assert_eq!(dry.refused, None);
    assert!(keys(&v).is_empty(), "a dry run writes nothing");
    let first = s.limit_admit(TENANT, &check(10), false).await.unwrap();
    assert_eq!(first.refused, None);
    assert!(first.requests_debt_us > 900_000 && first.tokens_debt_us > 90_000);
    assert_eq!(
        keys(&v),
        [
            "pr:tenant:{key:0123456789abcdef}:rq",
            "pr:tenant:{key:0123456789abcdef}:tk"
        ]
    );
    // Tokens refuse the next: nothing is written, not even its request.
    let refused = s.limit_admit(TENANT, &check(60), false).await.unwrap();
    assert_eq!(refused.refused, Some(LimitReason::Tokens));
    assert!(refused.wait_us > 0);
    let after = s.limit_admit(TENANT, &check(10), true).await.unwrap();
    assert!(after.requests_debt_us <= first.requests_debt_us);
    // A correction gives tokens back (never more than the bucket).
    s.limit_settle(TENANT, check(0).tokens, -10, false)
        .await
        .unwrap();
    let corrected = s.limit_admit(TENANT, &check(50), false).await.unwrap();
    assert_eq!(corrected.refused, None);
    // Requests refuse the third at once: 2 s of tolerance is 2 requests.
    let third = s.limit_admit(TENANT, &check(0), false).await.unwrap();
    assert_eq!(third.refused, Some(LimitReason::Requests));
    // The keys expire with their arrival times.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("pr:tenant:{key:0123456789abcdef}:rq")
        .query(&mut v.conn())
        .unwrap();
    assert!(ttl > 0 && ttl <= 3_100, "{ttl}");
}

#[tokio::test]
async fn a_dead_routers_places_expire_with_its_lease() {
    let v = Valkey::start();
    // fast_ttls: router leases of 2 s.
    let (a, b) = (
        store(&v, "pr", "r1", fast_ttls()),
        store(&v, "pr", "r2", fast_ttls()),
    );
    let one = LimitCheck {
        max_concurrent: Some(2),
        ..LimitCheck::default()
    };
    assert_eq!(
        a.limit_admit(TENANT, &one, false).await.unwrap().in_flight,
        1
    );
    assert_eq!(
        b.limit_admit(TENANT, &one, false).await.unwrap().in_flight,
        2
    );
    let full = b.limit_admit(TENANT, &one, false).await.unwrap();
    assert_eq!(full.refused, Some(LimitReason::Concurrency));
    // r2 releases its own; r1 "dies" holding one.
    b.limit_settle(TENANT, None, 0, true).await.unwrap();
    assert_eq!(
        b.limit_admit(TENANT, &one, false).await.unwrap().in_flight,
        2
    );
    // r2 keeps renewing from its ledger (1 held); r1's lease runs out.
    for _ in 0..5 {
        assert!(
            b.limit_lease(TENANT, 1, Duration::from_secs(2))
                .await
                .unwrap()
                >= 1
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let after = b.limit_admit(TENANT, &one, false).await.unwrap();
    assert_eq!(after.refused, None, "r1's place expired with its lease");
    assert_eq!(after.in_flight, 2);
    // A renewal sets the count to the ledger's: a lost release heals.
    assert_eq!(
        b.limit_lease(TENANT, 1, Duration::from_secs(2))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        b.limit_lease(TENANT, 0, Duration::from_secs(2))
            .await
            .unwrap(),
        0
    );
}
