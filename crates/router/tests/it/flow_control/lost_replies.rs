//! Lost replies from Valkey: the waiting room is not released and no
//! arrival goes past; a dispatch whose reply was lost is handed on.

use super::*;

/// One unanswered poll (Valkey paused for 300 ms, so the routing lane's
/// calls time out) is not an outage: the waiting request keeps its place
/// and is not sent to the busy worker (it was, with every waiting request
/// of the router, before; found by the overload benchmark).
#[tokio::test]
async fn a_lost_reply_does_not_release_the_waiting_room_nor_let_an_arrival_past() {
    let v = Valkey::start();
    let w = worker(&v).await;
    let mut a = args(Duration::from_secs(10), 1024);
    // The routing lane's deadline, as in production (20 ms): a pause of
    // Valkey times its calls out.
    a.valkey_timeout = Some(Duration::from_millis(20));
    let router = Router::start(&v.url(), a).await;
    warm(&v, &[&router], &w, 2500).await;
    let url = router.url("/v1/completions");
    let first = occupy(&url);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(&router, "two", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut c = v.conn();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("ALL")
        .query::<()>(&mut c)
        .unwrap();
    // A request arriving while its call times out asks again: it does not
    // go past the waiting room to the saturated worker.
    let third = send(&router, "three", None);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        received(&w),
        ["one"],
        "a request went past the waiting room"
    );
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap().0, 200);
    assert_eq!(third.await.unwrap().0, 200);
    assert_eq!(received(&w), ["one", "two", "three"]);
}

/// A dispatch whose reply the router never saw (its call timed out on
/// the routing lane while Valkey still ran it: the overload benchmark's
/// interactive requests then waited out their 20 s) is handed on by the
/// router's next call, not left waiting until its timeout. The lost reply
/// is made deterministic: a caller with the router's id and a higher
/// in-flight limit dispatches its waiting request, and the reply goes to
/// the test.
#[tokio::test]
async fn a_dispatch_whose_reply_was_lost_is_handed_on_by_the_next_call() {
    let v = Valkey::start();
    let w = worker(&v).await;
    let mut a = args(Duration::from_secs(3), 1024);
    a.router_id = Some("ra".into());
    let router = Router::start(&v.url(), a).await;
    warm(&v, &[&router], &w, 6000).await;
    let first = occupy(&router.url("/v1/completions"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(&router, "two", None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received(&w), ["one"]);
    // With the suite's 2 s Valkey deadline: at the default 20 ms, a store
    // whose connection is not up yet answers "routing lane connecting" on
    // a loaded machine.
    let thief = support::store_with(&v, "pr", "ra", StateTtls::default(), BatchLimits::default());
    let two_places = SaturationThresholds {
        max_in_flight: 2,
        waiting: None,
        kv_usage: None,
        prefill_tokens: None,
        stale_load: Duration::from_secs(10),
    };
    let lost = thief
        .flow_dispatch(MODEL, &two_places, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(lost.dispatched.len(), 1, "{lost:?}");
    // On the old code "two" waited out its 3 s: a 503 queue_timeout.
    let (status, err) = second.await.unwrap();
    assert_eq!(status, 200, "{err}");
    assert_eq!(received(&w), ["one", "two"]);
    assert_eq!(first.await.unwrap(), 200);
}
