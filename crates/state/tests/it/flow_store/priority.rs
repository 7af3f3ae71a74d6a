//! Priority across routers: high priority on one router before low
//! priority waiting on another; a router whose lease ended loses its entries.

use super::*;

#[tokio::test]
async fn high_priority_on_one_router_goes_before_low_priority_waiting_on_another() {
    let v = Valkey::start();
    let (a, b) = (router(&v, "A").await, router(&v, "B").await);
    worker(&a, "w1").await;
    let t = limits(1);
    // The only worker is full: one request in flight.
    a.change_in_flight(
        MODEL,
        "w1",
        InFlight {
            requests: 1,
            prefill_tokens: 0,
        },
    )
    .await
    .unwrap();
    let mut low = Vec::new();
    for i in 0..3 {
        let (m, at) = arrive(&b, &t, i, 0, "batch", 1.0).await;
        assert!(matches!(at, Arrival::Queued(_)), "{at:?}");
        low.push(m);
    }
    let (high, at) = arrive(&a, &t, 100, 10, "chat", 1.0).await;
    assert!(matches!(at, Arrival::Queued(_)), "{at:?}");
    // Sheddable while saturated: refused at once.
    let (_, at) = arrive(&a, &t, 101, -1, "bg", 1.0).await;
    assert_eq!(at, Arrival::Refused);
    // Saturated: nobody is dispatched.
    let d = b
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(d.saturated);
    assert!(d.dispatched.is_empty());
    assert_eq!(d.waiting, 4);
    // The worker frees its place: router B may not take it for its low-
    // priority work while A's high-priority request waits.
    a.change_in_flight(
        MODEL,
        "w1",
        InFlight {
            requests: -1,
            prefill_tokens: 0,
        },
    )
    .await
    .unwrap();
    let d = b
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(!d.saturated);
    assert!(d.dispatched.is_empty(), "B dispatched {:?}", d.dispatched);
    let d = a
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(d.dispatched, std::slice::from_ref(&high));
    assert!(d.held.is_empty());
    // Until it is routed (or its dispatch expires) it holds the place.
    let d = b
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(d.dispatched.is_empty());
    assert!(d.held.is_empty(), "another router's dispatch: {:?}", d.held);
    // Its router is told again until it is routed (the reply that
    // dispatched it may have been lost).
    let d = a
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(d.dispatched.is_empty());
    assert_eq!(d.held, std::slice::from_ref(&high));
    assert_eq!(a.flow_leave(MODEL, &[(high, None)]).await.unwrap(), 1);
    let d = b
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(
        d.dispatched,
        [low[0].clone()],
        "B's oldest low-priority request next"
    );
}

#[tokio::test]
async fn entries_of_a_router_whose_lease_ended_are_dropped() {
    let v = Valkey::start();
    let a = router(&v, "A").await;
    let gone = store(&v, "pr", "gone", ttls());
    gone.router_lease(MODEL, Duration::from_millis(300))
        .await
        .unwrap();
    worker(&a, "w1").await;
    let t = limits(1);
    a.change_in_flight(
        MODEL,
        "w1",
        InFlight {
            requests: 1,
            prefill_tokens: 0,
        },
    )
    .await
    .unwrap();
    let (_, at) = arrive(&gone, &t, 1, 10, "x", 1.0).await;
    assert!(matches!(at, Arrival::Queued(_)));
    let (mine, _) = arrive(&a, &t, 2, 0, "y", 1.0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.change_in_flight(
        MODEL,
        "w1",
        InFlight {
            requests: -1,
            prefill_tokens: 0,
        },
    )
    .await
    .unwrap();
    // The dead router's higher-priority entry does not hold the place.
    let d = a
        .flow_dispatch(MODEL, &t, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(d.dispatched, [mine]);
    assert_eq!(d.waiting, 0);
}
