use super::*;

fn cand(id: &str, cached: u64) -> Candidate {
    Candidate {
        worker_id: id.into(),
        cached_tokens: cached,
        cpu_tokens: 0,
        disk_tokens: 0,
        in_flight: 0,
        prefill_tokens: 0,
        waiting: 0,
        running: 0,
        kv_usage: 0.0,
    }
}

fn held(tokens: u64, tier: Tier) -> Held {
    Held {
        worker_id: "w".into(),
        tokens,
        tier,
        location: "x".into(),
    }
}

#[test]
fn lmcache_tokens_past_the_index_count_on_their_tier() {
    let mut c = cand("w", 160);
    c.cpu_tokens = 32;
    widen(&mut c, &held(600, Tier::Cpu));
    assert_eq!(
        (c.cached_tokens, c.cpu_tokens, c.disk_tokens),
        (600, 472, 0)
    );
    widen(&mut c, &held(1000, Tier::Disk));
    assert_eq!(
        (c.cached_tokens, c.cpu_tokens, c.disk_tokens),
        (1000, 472, 400)
    );
    // Less than the index already has: nothing changes.
    let before = c.clone();
    widen(&mut c, &held(512, Tier::Cpu));
    assert_eq!(c, before);
    // Tier-weighted, a CPU hit beats a miss and loses to a GPU hit.
    let cfg = CacheAwareConfig::default();
    let mut cpu = cand("a", 0);
    widen(&mut cpu, &held(512, Tier::Cpu));
    let w = crate::routing::effective_tokens(&cfg, &cpu);
    assert!(w > 0.0 && w < 512.0, "{w}");
}

#[test]
fn equal_costs_go_to_the_worker_whose_lmcache_holds_more() {
    let candidates = vec![cand("a", 0), cand("b", 0), cand("c", 256)];
    let cfg = CacheAwareConfig::default();
    let request = crate::routing::RouteRequest {
        prompt_tokens: 1000,
        prefix_key: 0,
    };
    let counts: HashMap<String, u64> = [("b".to_owned(), 7), ("a".to_owned(), 1)].into();
    for _ in 0..20 {
        // c costs less; a and b tie, in either order before.
        let mut ranked = vec![2, 0, 1];
        tie_break(&mut ranked, &candidates, &cfg, &request, &counts);
        assert_eq!(ranked, vec![2, 1, 0]);
    }
    // No counts: the order is kept.
    let mut ranked = vec![2, 0, 1];
    tie_break(&mut ranked, &candidates, &cfg, &request, &HashMap::new());
    assert_eq!(ranked, vec![2, 0, 1]);
}

fn settings(controller: String) -> LmCacheSettings {
    let mut s = LmCacheSettings::new(controller);
    s.lookup_min_tokens = 4;
    s.deadline = Duration::from_millis(50);
    s
}

/// A controller that accepts connections and never answers.
async fn silent_controller() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (format!("http://{addr}"), task)
}

#[tokio::test]
async fn a_silent_controller_is_abandoned_at_the_deadline_then_left_alone() {
    let (url, task) = silent_controller().await;
    let lm = LmCache::new(settings(url)).unwrap();
    let started = Instant::now();
    let (held, outcome) = lm.lookup(&[1, 2, 3, 4, 5]).await;
    assert_eq!(outcome, Outcome::Timeout);
    assert!(held.is_empty());
    // Abandoned at the deadline, not at some client timeout (a bound far
    // above the 50 ms deadline, so a busy machine cannot fail it).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The next request does not wait at all: the controller is left alone.
    assert_eq!(lm.lookup(&[1, 2, 3, 4, 6]).await.1, Outcome::Backoff);
    // Short prompts are never asked about.
    assert_eq!(lm.lookup(&[1, 2]).await.1, Outcome::Short);
    task.abort();
}

#[tokio::test]
async fn an_unreachable_controller_is_an_error_not_a_match() {
    let port = fleet::free_port().unwrap();
    let lm = LmCache::new(settings(format!("http://127.0.0.1:{port}"))).unwrap();
    let (held, outcome) = lm.lookup(&[1, 2, 3, 4, 5]).await;
    assert_eq!(outcome, Outcome::Error);
    assert!(held.is_empty());
    lm.poll_once().await;
    assert!(lm.key_counts().is_empty());
}
