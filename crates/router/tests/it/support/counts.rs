//! A worker's counts as a router shows them: requests in flight and the
//! prompt tokens they still have to prefill.

use std::time::{Duration, Instant};

use super::{Router, get};

/// `/admin/workers`'s (in_flight, prefill_tokens) of worker `id` of `model`.
pub async fn worker_counts(r: &Router, model: &str, id: &str) -> (u64, u64) {
    let (_, v) = get(r, &format!("/admin/workers?model={model}")).await;
    let w = v["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["worker_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no worker {id} in {v}"));
    (
        w["in_flight"].as_u64().unwrap_or(0),
        w["prefill_tokens"].as_u64().unwrap_or(0),
    )
}

/// Polls until [`worker_counts`] of `id` satisfy `ok` (or fails after 5 s,
/// saying `what`).
pub async fn wait_counts(
    r: &Router,
    model: &str,
    id: &str,
    ok: impl Fn((u64, u64)) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = worker_counts(r, model, id).await;
        if ok(now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {id} counts {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
