//! The order across routers: high priority first wherever it waits, no
//! router going past another's waiting entries, a burst only to the places
//! seen free, the lowest priority shed first.

use super::*;

#[tokio::test]
async fn high_priority_sent_to_router_a_goes_before_low_priority_waiting_on_router_b() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let a = Router::start(&valkey.url(), args(Duration::from_secs(20), 1024)).await;
    let b = Router::start(&valkey.url(), args(Duration::from_secs(20), 1024)).await;
    // "one" is held long enough that every request below waits behind it.
    warm(&valkey, &[&a, &b], &w, 1500).await;
    let mut all = vec![send(&b, "one", None)];
    tokio::time::sleep(Duration::from_millis(150)).await;
    for i in 0..3 {
        all.push(send(&b, &format!("low{i}"), None));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..2 {
        all.push(send(&a, &format!("high{i}"), Some("high")));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A sheddable request while saturated: refused at once.
    let (status, kind) = send(&a, "batch", Some("batch")).await.unwrap();
    assert_eq!((status, kind.as_str()), (429, "sheddable_refused"));
    for r in all {
        assert_eq!(r.await.unwrap().0, 200);
    }
    let got = received(&w);
    assert_eq!(got[0], "one");
    let mut highs: Vec<&String> = got[1..3].iter().collect();
    highs.sort();
    assert_eq!(highs, ["high0", "high1"], "worker received {got:?}");
    assert_eq!(
        got[3..],
        ["low0", "low1", "low2"],
        "worker received {got:?}"
    );
}

/// A router whose own view is clean (its last request left the worker a
/// free place) and that holds no waiter itself must still not route past
/// entries waiting on another router: in the 10:1 fairness run the heavy
/// tenant's router sent 48–68 requests "direct" within the second it
/// trusted such a view, while the other routers' entries waited.
#[tokio::test]
async fn a_router_with_an_empty_room_does_not_go_past_entries_waiting_on_another() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let two_each = || {
        let mut s = args(Duration::from_secs(20), 1024);
        s.flow.max_in_flight_per_worker = Some(2);
        s
    };
    let a = Router::start(&valkey.url(), two_each()).await;
    let b = Router::start(&valkey.url(), two_each()).await;
    warm(&valkey, &[&a, &b], &w, 1500).await;
    // Both routers' views from the warm-up grow stale: the next request of
    // each asks the fleet's room.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // B: "one" leaves the worker a free place, so B trusts for a second
    // that requests may go straight to routing.
    let one = send(&b, "one", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // A: "two" takes the last place; "three" waits in the fleet's room.
    let two = send(&a, "two", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let three = send(&a, "three", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // B again, within its second: "four" must wait behind "three".
    let four = send(&b, "four", None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        received(&w),
        ["one", "two"],
        "a request went past the fleet's waiting room"
    );
    for r in [one, two, three, four] {
        assert_eq!(r.await.unwrap().0, 200);
    }
    assert_eq!(received(&w), ["one", "two", "three", "four"]);
}

/// A burst on a router whose view is clean goes straight to routing only
/// as far as the places it saw free; the rest ask the fleet's room (in the
/// 10:1 fairness run, 60 requests of a burst at a phase's start went past
/// the room before any routing reply said the workers were saturated).
#[tokio::test]
async fn a_burst_after_a_clean_view_goes_straight_only_to_the_places_seen_free() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let mut s = args(Duration::from_secs(20), 1024);
    s.flow.max_in_flight_per_worker = Some(2);
    let r = Router::start(&valkey.url(), s).await;
    warm(&valkey, &[&r], &w, 1500).await;
    // The warm-up's reply is fresh and clean: two places free.
    let burst: Vec<_> = (0..8).map(|i| send(&r, &format!("b{i}"), None)).collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let at_once = received(&w).len();
    assert!(
        at_once <= 3,
        "{at_once} of a burst of 8 reached a worker with 2 places: {:?}",
        received(&w)
    );
    for r in burst {
        assert_eq!(r.await.unwrap().0, 200);
    }
    assert_eq!(received(&w).len(), 8);
}

#[tokio::test]
async fn a_full_waiting_room_sheds_the_lowest_priority_first() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let r = Router::start(&valkey.url(), args(Duration::from_secs(20), 2)).await;
    warm(&valkey, &[&r], &w, 400).await;
    let first = send(&r, "one", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let low0 = send(&r, "low0", None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let low1 = send(&r, "low1", None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Full: a high-priority arrival sheds the latest low-priority waiter.
    let high = send(&r, "high", Some("high"));
    assert_eq!(low1.await.unwrap(), (503, "queue_full".to_owned()));
    // Full again: a low-priority arrival is itself the lowest.
    let low2 = send(&r, "low2", None);
    assert_eq!(low2.await.unwrap(), (503, "queue_full".to_owned()));
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(high.await.unwrap().0, 200);
    assert_eq!(low0.await.unwrap().0, 200);
    assert_eq!(received(&w), ["one", "high", "low0"]);
}
