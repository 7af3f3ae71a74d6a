//! The reporter's session over real ZeroMQ sockets (a vLLM-format
//! publisher with its replay socket, and the reporter's subscriber): gaps
//! are filled from the replay socket, unfillable gaps and engine restarts
//! resynchronise, duplicates are skipped. The sink records what the fleet
//! would be told and keeps the resulting set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHasher;
use protocol::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch};
use worker::kv_events::{
    KvEventPublisher, KvEventPublisherConfig, KvEventSubscriber, KvEventSubscriberConfig,
    ReceivedBatch,
};
use worker::reporter::{EngineBlocks, FleetSink, Session};

/// What the fleet would hold: reports applied in order; a resync replaces
/// everything with the source's snapshot (read when the test checks).
#[derive(Clone, Default)]
struct RecordingSink {
    held: Arc<Mutex<BTreeSet<u64>>>,
    resyncs: Arc<Mutex<u32>>,
}

impl FleetSink for RecordingSink {
    fn stored(&self, hashes: &[FamilyBlock]) {
        self.held
            .lock()
            .unwrap()
            .extend(hashes.iter().map(|b| b.hash.0));
    }
    fn evicted(&self, hashes: &[FamilyBlock]) {
        let mut held = self.held.lock().unwrap();
        for b in hashes {
            held.remove(&b.hash.0);
        }
    }
    fn resync(&self) {
        *self.resyncs.lock().unwrap() += 1;
    }
}

fn tokens(k: u64) -> Vec<u32> {
    (0..16).map(|i| (k * 100 + i) as u32).collect()
}

/// Batch storing one standalone block (engine hash k) of tokens(k).
fn store(k: u64, ts: f64) -> KvEventBatch {
    KvEventBatch {
        ts,
        events: vec![KvEvent::BlockStored(BlockStored {
            block_hashes: vec![EngineHash::Int(k)],
            parent_block_hash: None,
            token_ids: tokens(k),
            block_size: 16,
            medium: Some("GPU".into()),
            ..BlockStored::default()
        })],
        data_parallel_rank: None,
        extra_fields: 0,
    }
}

fn remove(k: u64, ts: f64) -> KvEventBatch {
    KvEventBatch {
        ts,
        events: vec![KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineHash::Int(k)],
            medium: Some("GPU".into()),
            ..BlockRemoved::default()
        })],
        data_parallel_rank: None,
        extra_fields: 0,
    }
}

fn router_hash(k: u64) -> u64 {
    BlockHasher::default().block_hashes(&tokens(k), &Default::default())[0].0
}

struct Rig {
    publisher: KvEventPublisher,
    sub: KvEventSubscriber,
    blocks: Arc<Mutex<EngineBlocks>>,
    sink: RecordingSink,
    session: Session<RecordingSink>,
}

async fn rig(buffer_steps: usize) -> Rig {
    let publisher = KvEventPublisher::start(KvEventPublisherConfig {
        buffer_steps,
        ..KvEventPublisherConfig::default()
    })
    .await
    .unwrap();
    let sub = subscriber(&publisher).await;
    let blocks = Arc::new(Mutex::new(EngineBlocks::new(
        BlockHasher::default(),
        HashMap::new(),
        1 << 16,
    )));
    let sink = RecordingSink::default();
    let session = Session::new(blocks.clone(), sink.clone());
    let mut rig = Rig {
        publisher,
        sub,
        blocks,
        sink,
        session,
    };
    rig.join().await;
    rig
}

async fn subscriber(publisher: &KvEventPublisher) -> KvEventSubscriber {
    let mut cfg = KvEventSubscriberConfig::new(publisher.endpoint());
    cfg.replay_endpoint = publisher.replay_endpoint().map(str::to_owned);
    KvEventSubscriber::start(cfg).await.unwrap()
}

impl Rig {
    /// Publishes empty batches until one arrives (ZeroMQ's slow joiner),
    /// then resyncs the session as the reporter does at start.
    async fn join(&mut self) {
        loop {
            self.publisher
                .publish(KvEventBatch {
                    ts: -1.0,
                    events: vec![],
                    data_parallel_rank: None,
                    extra_fields: 0,
                })
                .unwrap();
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(200), self.sub.recv()).await
            {
                break;
            }
        }
        self.session.resync(&self.sub).await;
    }

    async fn recv(&mut self) -> ReceivedBatch {
        tokio::time::timeout(Duration::from_secs(10), self.sub.recv())
            .await
            .expect("a batch within 10 s")
            .expect("a decodable batch")
    }

    /// The fleet's view: the sink's reports, or after a resync the snapshot.
    fn fleet(&self) -> BTreeSet<u64> {
        self.blocks
            .lock()
            .unwrap()
            .snapshot()
            .into_iter()
            .map(|b| b.hash.0)
            .collect()
    }
}

#[tokio::test]
async fn a_lost_batch_is_filled_from_the_replay_socket() {
    let mut r = rig(10_000).await;
    for k in 1..=4 {
        r.publisher.publish(store(k, k as f64)).unwrap();
    }
    r.publisher.publish(remove(2, 5.0)).unwrap();
    let batches: Vec<ReceivedBatch> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(r.recv().await);
        }
        v
    };
    // The session never sees the third batch (block 3) live: a lost message.
    for (i, b) in batches.iter().enumerate() {
        if i != 2 {
            r.session.on_batch(&r.sub, b.seq, &b.batch).await;
        }
    }
    assert_eq!(r.session.stats().gaps_filled, 1);
    let want: BTreeSet<u64> = [1, 3, 4].map(router_hash).into();
    assert_eq!(*r.sink.held.lock().unwrap(), want, "reports");
    assert_eq!(r.fleet(), want, "snapshot");
    // A batch already applied by the replay, arriving again, is skipped.
    r.session
        .on_batch(&r.sub, batches[2].seq, &batches[2].batch)
        .await;
    assert_eq!(r.session.stats().duplicates, 1);
    assert_eq!(r.fleet(), want);
}

#[tokio::test]
async fn an_unfillable_gap_resynchronises_from_what_the_engine_still_buffers() {
    let mut r = rig(2).await;
    let resyncs_at_start = *r.sink.resyncs.lock().unwrap();
    r.publisher.publish(store(1, 1.0)).unwrap();
    let first = r.recv().await;
    r.session.on_batch(&r.sub, first.seq, &first.batch).await;
    for batch in [store(2, 2.0), remove(1, 3.0), store(4, 4.0), store(5, 5.0)] {
        r.publisher.publish(batch).unwrap();
    }
    let mut last = None;
    for _ in 0..4 {
        last = Some(r.recv().await);
    }
    let last = last.unwrap();
    // Only the last batch reaches the session; the buffer (2) no longer
    // holds the start of the gap.
    r.session.on_batch(&r.sub, last.seq, &last.batch).await;
    assert_eq!(*r.sink.resyncs.lock().unwrap(), resyncs_at_start + 1);
    // Blocks 2 (stored in the lost part) and 1 (removed there) are not
    // guessed: the fleet gets exactly what the buffer proves.
    assert_eq!(r.fleet(), [4, 5].map(router_hash).into());
}

#[tokio::test]
async fn an_engine_restart_resets_the_workers_state() {
    let mut r = rig(10_000).await;
    r.publisher.publish(store(1, 1.0)).unwrap();
    r.publisher.publish(store(2, 2.0)).unwrap();
    for _ in 0..2 {
        let b = r.recv().await;
        r.session.on_batch(&r.sub, b.seq, &b.batch).await;
    }
    assert_eq!(r.fleet(), [1, 2].map(router_hash).into());
    // A new engine: numbering starts again at 0 on new sockets.
    let restarted = KvEventPublisher::start(KvEventPublisherConfig::default())
        .await
        .unwrap();
    let old = std::mem::replace(&mut r.publisher, restarted);
    old.shutdown(Duration::from_secs(1)).await;
    r.sub = subscriber(&r.publisher).await;
    let resyncs = *r.sink.resyncs.lock().unwrap();
    // Its first batches (the probes) come with numbers already seen.
    loop {
        r.publisher.publish(store(7, 70.0)).unwrap();
        if let Ok(Ok(b)) = tokio::time::timeout(Duration::from_millis(200), r.sub.recv()).await {
            r.session.on_batch(&r.sub, b.seq, &b.batch).await;
            break;
        }
    }
    assert!(
        *r.sink.resyncs.lock().unwrap() > resyncs,
        "restart not detected"
    );
    assert_eq!(r.fleet(), [7].map(router_hash).into());
}

#[tokio::test]
async fn a_restarted_engine_past_the_old_numbering_is_not_taken_for_a_gap() {
    let mut r = rig(10_000).await;
    r.publisher.publish(store(1, 1.0)).unwrap();
    let b = r.recv().await;
    r.session.on_batch(&r.sub, b.seq, &b.batch).await;
    assert_eq!(r.fleet(), [1].map(router_hash).into());
    // The new engine publishes more than the old one did before anyone
    // hears it: its first batch received has a number beyond the old one's.
    let restarted = KvEventPublisher::start(KvEventPublisherConfig::default())
        .await
        .unwrap();
    let old = std::mem::replace(&mut r.publisher, restarted);
    old.shutdown(Duration::from_secs(1)).await;
    for k in 0..20 {
        r.publisher
            .publish(store(100 + k, 100.0 + k as f64))
            .unwrap();
    }
    r.sub = subscriber(&r.publisher).await;
    loop {
        r.publisher.publish(store(7, 70.0)).unwrap();
        if let Ok(Ok(b)) = tokio::time::timeout(Duration::from_millis(200), r.sub.recv()).await {
            r.session.on_batch(&r.sub, b.seq, &b.batch).await;
            break;
        }
    }
    let fleet = r.fleet();
    assert!(
        !fleet.contains(&router_hash(1)),
        "the old engine's block remains"
    );
    assert!(fleet.contains(&router_hash(7)) && fleet.contains(&router_hash(100)));
}
