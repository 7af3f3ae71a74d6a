//! A real publisher and subscriber over TCP loopback (ephemeral ports).

use std::time::Duration;

use bytes::Bytes;
use protocol::kv_events::{BlockStored, EngineHash, KvEvent, KvEventBatch};
use tokio::time::timeout;
use worker::kv_events::{
    KvEventPublisher, KvEventPublisherConfig, KvEventSubscriber, KvEventSubscriberConfig,
    PublishError, ReceivedBatch, ReplayOptions, SocketMode, SubscriberError, replay_from,
};

const STEP: Duration = Duration::from_secs(10);

/// A batch the subscriber can tell apart from the others by its `ts`.
fn stored(i: u64) -> KvEventBatch {
    let tokens: Vec<u32> = (0..16).map(|t| (i * 100 + t) as u32).collect();
    KvEventBatch {
        ts: 1_767_225_600.0 + i as f64,
        events: vec![KvEvent::BlockStored(BlockStored {
            block_hashes: vec![EngineHash::Int(u64::MAX - i)],
            parent_block_hash: (i > 0).then(|| EngineHash::Int(u64::MAX - i + 1)),
            token_ids: tokens,
            block_size: 16,
            medium: Some("GPU".into()),
            group_idx: Some(0),
            ..BlockStored::default()
        })],
        data_parallel_rank: None,
        extra_fields: 0,
    }
}

/// Probe batches (negative `ts`) fill the slow-joiner window.
fn probe() -> KvEventBatch {
    KvEventBatch {
        ts: -1.0,
        events: vec![KvEvent::AllBlocksCleared],
        data_parallel_rank: None,
        extra_fields: 0,
    }
}

/// Publishes probes until the subscriber receives one, so the subscription
/// is known to be in place (PUB drops messages for a SUB that has not
/// subscribed yet). Returns how many probes were published.
async fn wait_for_subscription(publisher: &KvEventPublisher, sub: &mut KvEventSubscriber) -> u64 {
    let mut probes = 0;
    let give_up = tokio::time::Instant::now() + STEP;
    loop {
        assert!(
            tokio::time::Instant::now() < give_up,
            "subscription never established"
        );
        publisher.publish(probe()).expect("probe queued");
        probes += 1;
        match timeout(Duration::from_millis(100), sub.recv()).await {
            Ok(Ok(received)) => {
                assert_eq!(received.batch.ts, -1.0, "only probes so far");
                return probes;
            }
            Ok(Err(e)) => panic!("receive failed: {e}"),
            Err(_) => continue,
        }
    }
}

/// Receives until `n` non-probe batches arrived; checks that the probes
/// still in flight come first and that all sequence numbers are consecutive.
async fn receive_real(sub: &mut KvEventSubscriber, n: usize) -> Vec<ReceivedBatch> {
    let mut real = Vec::new();
    let mut last = sub.last_seq().expect("a probe was received");
    while real.len() < n {
        let got = timeout(STEP, sub.recv())
            .await
            .expect("batch in time")
            .expect("decodes");
        assert_eq!(got.seq, last + 1, "consecutive sequence numbers");
        last = got.seq;
        if got.batch.ts < 0.0 {
            assert!(real.is_empty(), "a probe after a real batch");
        } else {
            real.push(got);
        }
    }
    real
}

fn with_rank(mut batch: KvEventBatch, rank: i64) -> KvEventBatch {
    batch.data_parallel_rank = Some(rank);
    batch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_to_subscriber_over_tcp_then_replay() {
    let topic = "kv@sim-0@test-model";
    let config = KvEventPublisherConfig {
        topic: topic.into(),
        data_parallel_rank: 3,
        ..KvEventPublisherConfig::default()
    };
    let publisher = KvEventPublisher::start(config).await.expect("publisher");
    assert!(
        !publisher.endpoint().ends_with(":0"),
        "bound port is reported"
    );
    let replay_endpoint = publisher
        .replay_endpoint()
        .expect("replay enabled")
        .to_owned();
    let mut config = KvEventSubscriberConfig::new(publisher.endpoint());
    config.topic = "kv@sim-0".into();
    config.replay_endpoint = Some(replay_endpoint.clone());
    let mut sub = KvEventSubscriber::start(config).await.expect("subscriber");

    let probes = wait_for_subscription(&publisher, &mut sub).await;
    const N: u64 = 20;
    for i in 0..N {
        publisher.publish(stored(i)).expect("queued");
    }
    let received = receive_real(&mut sub, N as usize).await;
    for (i, got) in (0..N).zip(&received) {
        // Sequence numbers start at 0: the probes took 0..probes.
        assert_eq!(got.seq, probes + i);
        assert_eq!(got.topic, topic);
        assert_eq!(got.batch, with_rank(stored(i), 3), "publish fills the rank");
    }

    // A malformed payload is reported with its seq; the stream goes on.
    publisher
        .publish_payload(Bytes::from_static(b"\x93\xcb\x00"))
        .expect("queued");
    publisher.publish(stored(N)).expect("queued");
    match timeout(STEP, sub.recv()).await.expect("in time") {
        Err(SubscriberError::Decode { seq, .. }) => assert_eq!(seq, probes + N),
        other => panic!("expected a decode error, got {other:?}"),
    }
    let next = timeout(STEP, sub.recv())
        .await
        .expect("in time")
        .expect("decodes");
    assert_eq!((next.seq, next.batch.ts), (probes + N + 1, stored(N).ts));

    // Replay from batch k: exactly k..N-1 of the real ones, then the end.
    let k = 7;
    let replayed = sub.replay(probes + k).await.expect("replay");
    let (good, rest) = replayed.split_at((N - k) as usize);
    for (i, batch) in (k..N).zip(good) {
        assert_eq!(batch.seq, probes + i);
        assert_eq!(batch.topic.as_deref(), Some(topic));
        assert_eq!(
            batch.batch.as_ref().expect("decodes"),
            &with_rank(stored(i), 3)
        );
    }
    // ...followed by the malformed batch and the one after it.
    assert_eq!(rest.len(), 2);
    assert!(rest[0].batch.is_err());
    assert_eq!(rest[1].seq, probes + N + 1);

    // From 0 the whole buffer, probes included; past the end nothing.
    let options = ReplayOptions::default();
    let all = replay_from(&replay_endpoint, 0, &options)
        .await
        .expect("replay all");
    let seqs: Vec<u64> = all.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, (0..probes + N + 2).collect::<Vec<_>>());
    let none = replay_from(&replay_endpoint, probes + N + 2, &options)
        .await
        .expect("replay");
    assert!(none.is_empty());
    assert_eq!(publisher.dropped(), 0);
    publisher.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_buffer_keeps_only_the_last_buffer_steps_batches() {
    let config = KvEventPublisherConfig {
        buffer_steps: 5,
        ..KvEventPublisherConfig::default()
    };
    let publisher = KvEventPublisher::start(config).await.expect("publisher");
    for i in 0..12 {
        publisher.publish(stored(i)).expect("queued");
    }
    let give_up = tokio::time::Instant::now() + STEP;
    while publisher.published() < 12 {
        assert!(tokio::time::Instant::now() < give_up, "batches not sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let endpoint = publisher.replay_endpoint().expect("replay").to_owned();
    let replayed = replay_from(&endpoint, 0, &ReplayOptions::default())
        .await
        .expect("replay");
    let seqs: Vec<u64> = replayed.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, vec![7, 8, 9, 10, 11]);
    assert_eq!(
        replayed[0].batch.as_ref().expect("decodes"),
        &with_rank(stored(7), 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_publisher_reaches_a_binding_subscriber() {
    // vLLM with `tcp://router:5557` connects its PUB; the router binds.
    let mut config = KvEventSubscriberConfig::new("tcp://127.0.0.1:0");
    config.mode = SocketMode::vllm_pub_mode("tcp://router:5557").opposite();
    assert_eq!(config.mode, SocketMode::Bind);
    let mut sub = KvEventSubscriber::start(config).await.expect("subscriber");
    let config = KvEventPublisherConfig {
        endpoint: sub.endpoint().to_owned(),
        mode: SocketMode::Connect,
        replay_endpoint: None,
        ..KvEventPublisherConfig::default()
    };
    let publisher = KvEventPublisher::start(config).await.expect("publisher");
    assert!(publisher.replay_endpoint().is_none());
    wait_for_subscription(&publisher, &mut sub).await;
    publisher.publish(stored(1)).expect("queued");
    let got = receive_real(&mut sub, 1).await;
    assert_eq!(got[0].batch, with_rank(stored(1), 0));
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_drops_and_counts_instead_of_blocking() {
    let config = KvEventPublisherConfig {
        queue_capacity: 2,
        ..KvEventPublisherConfig::default()
    };
    let publisher = KvEventPublisher::start(config).await.expect("publisher");
    // On a current-thread runtime the sending task cannot run until we
    // yield, so the queue fills deterministically.
    let results: Vec<_> = (0..10).map(|i| publisher.publish(stored(i))).collect();
    assert!(results[..2].iter().all(Result::is_ok));
    assert!(
        results[2..]
            .iter()
            .all(|r| matches!(r, Err(PublishError::QueueFull { capacity: 2 })))
    );
    assert_eq!(publisher.dropped(), 8);
    let give_up = tokio::time::Instant::now() + STEP;
    while publisher.published() < 2 {
        assert!(
            tokio::time::Instant::now() < give_up,
            "queued batches not sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(publisher.published(), 2, "dropped batches get no seq");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_against_a_silent_endpoint_times_out() {
    // A listener that accepts TCP but never speaks ZMTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let endpoint = format!("tcp://{}", listener.local_addr().expect("addr"));
    let options = ReplayOptions {
        timeout: Duration::from_millis(300),
        ..ReplayOptions::default()
    };
    let started = std::time::Instant::now();
    let result = replay_from(&endpoint, 0, &options).await;
    assert!(result.is_err(), "no end marker, so no success");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeout"
    );
    drop(listener);
}
