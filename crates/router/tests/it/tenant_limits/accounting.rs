//! What a request holds: tokens reserved and corrected by the answer's
//! usage, places in flight released at the end and when the client leaves.

use super::*;

#[tokio::test]
async fn tokens_are_reserved_and_corrected_by_the_answers_usage() {
    // 6000 tokens per minute: 10 ms of arrival time per token. A request
    // of 1000 max_tokens reserves about 1011 (10 s), more than the
    // tolerance, so the next one passes only once the bucket is idle.
    let (_valkey, worker, r) = one_router(|a| a.tenant_tokens_per_minute = Some(6000)).await;
    // The answer used 50 tokens: 961 come back, 0.5 s of arrival time left.
    *worker.shared.usage.lock().unwrap() =
        Some(json!({"prompt_tokens": 10, "completion_tokens": 40, "total_tokens": 50}));
    let first = send(&r, "sk-a", 1000, false).await;
    assert_eq!(first.status().as_u16(), 200);
    let remaining: u64 = header(&first, "x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!((4980..=4995).contains(&remaining), "{remaining}");
    first.bytes().await.unwrap();
    // Still reserved right after: refused.
    assert_limited(send(&r, "sk-a", 1000, false).await, "tokens", &["tokens"]).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Corrected: 0.5 s of arrival time has passed; without the correction
    // 10 s would be left.
    let second = send(&r, "sk-a", 1000, true).await;
    assert_eq!(
        second.status().as_u16(),
        200,
        "the reservation was corrected"
    );
    // Streamed, the usage comes in the last event: corrected too.
    for _ in 0..4 {
        worker.release.send(()).unwrap();
    }
    second.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Now an answer without usage: its reservation stands.
    *worker.shared.usage.lock().unwrap() = None;
    let third = send(&r, "sk-a", 1000, false).await;
    assert_eq!(
        third.status().as_u16(),
        200,
        "the streamed answer was corrected"
    );
    third.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_limited(send(&r, "sk-a", 1000, false).await, "tokens", &["tokens"]).await;
    // A request larger than the whole limit can never pass: refused at once.
    let huge = send(&r, "sk-b", 10_000, false).await;
    assert_eq!(huge.status().as_u16(), 429);
    let body: Value = huge.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );
    r.stop().await;
}

#[tokio::test]
async fn places_in_flight_are_released_at_the_end_and_when_the_client_leaves() {
    let (_valkey, worker, r) = one_router(|a| a.tenant_max_concurrent = Some(1)).await;
    // A stream held open by the worker holds the tenant's one place.
    let held = send(&r, "sk-a", 4, true).await;
    assert_eq!(held.status().as_u16(), 200);
    assert_limited(send(&r, "sk-a", 4, false).await, "concurrency", &[]).await;
    // Another tenant has its own place.
    assert_eq!(send(&r, "sk-b", 4, false).await.status().as_u16(), 200);
    for _ in 0..3 {
        worker.release.send(()).unwrap();
    }
    held.bytes().await.unwrap();
    let admitted_again = async {
        for _ in 0..50 {
            let resp = send(&r, "sk-a", 4, false).await;
            if resp.status().as_u16() == 200 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        admitted_again.await,
        "the place came back at the answer's end"
    );
    // A client that leaves mid-stream gives its place back too.
    let endless = http()
        .post(r.url("/v1/completions"))
        .bearer_auth("sk-a")
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true, "endless": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(endless.status().as_u16(), 200);
    let mut body = endless.bytes_stream();
    body.next().await.unwrap().unwrap();
    assert_limited(send(&r, "sk-a", 4, false).await, "concurrency", &[]).await;
    drop(body);
    for _ in 0..50 {
        if worker.shared.stream_cancelled.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worker.shared.stream_cancelled.load(Ordering::SeqCst));
    let mut freed = false;
    for _ in 0..50 {
        if send(&r, "sk-a", 4, false).await.status().as_u16() == 200 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the place came back when the client left");
    r.stop().await;
}
