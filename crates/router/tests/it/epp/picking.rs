//! What the pickers choose: the same endpoint for the same prefix from
//! either picker, one endpoint for a herd of new prefixes, and the subset hint.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_prefix_gets_the_same_endpoint_from_either_picker() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = document("first");
    let mut first = Envoy::open(f.pickers[0].1).await;
    let a = pick_duplex(
        &mut first,
        &completion(&format!("{doc} Question one?")),
        true,
        None,
    )
    .await;
    assert_eq!(a.len(), 3, "the choice and two fallbacks: {a:?}");
    assert_eq!(a.iter().collect::<BTreeSet<_>>().len(), 3);
    assert!(a.iter().all(|e| f.endpoints.contains(e)), "{a:?}");
    // The answer starts: the endpoint's prefill of the document is over.
    first.send(response_headers("200", None)).await;
    first.recv().await;
    first
        .send(response_body(b"data: {\"choices\":[]}\n\n", false))
        .await;
    first.recv().await;
    wait_prefill(&f, &worker_of(&f, &a[0]), |n| n == 0).await;
    // Through the other picker, which was not told the body mode: it
    // assumes full-duplex streamed, as configured.
    let mut second = Envoy::open(f.pickers[1].1).await;
    let b = pick_duplex(
        &mut second,
        &completion(&format!("{doc} Question two?")),
        false,
        None,
    )
    .await;
    assert_eq!(a[0], b[0], "the same prefix goes where it was claimed");
    first.close().await;
    second.close().await;
}

/// Sixteen concurrent requests on one new document, through both pickers,
/// none answered yet: each pick sees the claims and the prefills the
/// earlier ones queued (route.lua serialises them). A follower adds only
/// its question to the document's prefill queued there, far less than a
/// cold endpoint's prefill of the document (weighed 3×), so the herd stays
/// on one endpoint, counted in full: sixteen requests, and their prefill.
/// Nothing stays counted once the streams end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_herd_of_new_prefixes_across_pickers_goes_to_one_endpoint() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = document("herd");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let grpc = f.pickers[i % 2].1;
        let body = completion(&format!("{doc} Concurrent question {i}"));
        tasks.push(tokio::spawn(async move {
            let mut envoy = Envoy::open(grpc).await;
            let chosen = pick_duplex(&mut envoy, &body, true, None).await;
            (chosen[0].clone(), envoy)
        }));
    }
    let mut chosen = BTreeSet::new();
    let mut streams = Vec::new();
    for t in tasks {
        let (endpoint, envoy) = t.await.unwrap();
        chosen.insert(endpoint);
        streams.push(envoy);
    }
    assert_eq!(
        chosen.len(),
        1,
        "16 concurrent requests split over {chosen:?}"
    );
    let worker = worker_of(&f, chosen.first().unwrap());
    wait_in_flight(&f, &[(&worker, 16)]).await;
    assert!(wait_prefill(&f, &worker, |n| n > 0).await > 300);
    for s in streams {
        s.close().await;
    }
    // Envoy ending the streams ends the requests: nothing stays counted.
    wait_in_flight(&f, &[("w0", 0), ("w1", 0), ("w2", 0)]).await;
    assert_eq!(wait_prefill(&f, &worker, |n| n == 0).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_subset_hint_limits_the_choice() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = completion(&document("subset"));
    for only in [&f.endpoints[1], &f.endpoints[2]] {
        let mut envoy = Envoy::open(f.pickers[0].1).await;
        let chosen = pick_duplex(&mut envoy, &doc, true, Some(subset(&[only]))).await;
        assert_eq!(chosen, vec![only.clone()], "only the subset");
        envoy.close().await;
    }
    // A herd of new prefixes within a subset, across both pickers, once
    // each has seen the workers (a picker's very first pick is a lookup
    // and a claim, not atomic): still one endpoint, of the subset.
    let mut envoy = Envoy::open(f.pickers[1].1).await;
    pick_duplex(
        &mut envoy,
        &completion("warm the second picker"),
        true,
        None,
    )
    .await;
    envoy.close().await;
    let pair = [f.endpoints[0].as_str(), f.endpoints[2].as_str()];
    let herd_doc = document("subset herd");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let grpc = f.pickers[i % 2].1;
        let body = completion(&format!("{herd_doc} Question {i}"));
        let hint = subset(&pair);
        tasks.push(tokio::spawn(async move {
            let mut envoy = Envoy::open(grpc).await;
            let chosen = pick_duplex(&mut envoy, &body, true, Some(hint)).await;
            envoy.close().await;
            chosen[0].clone()
        }));
    }
    let mut chosen = BTreeSet::new();
    for t in tasks {
        chosen.insert(t.await.unwrap());
    }
    assert_eq!(
        chosen.len(),
        1,
        "12 concurrent requests split over {chosen:?}"
    );
    assert!(pair.contains(&chosen.first().unwrap().as_str()));
    for endpoints in [vec!["10.9.9.9:8000"], vec![]] {
        let mut envoy = Envoy::open(f.pickers[1].1).await;
        envoy
            .send(request_headers(
                "/v1/completions",
                false,
                None,
                Some(subset(&endpoints)),
            ))
            .await;
        envoy.send(request_body(&doc, true)).await;
        let (status, body) = immediate(&envoy.recv().await);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["type"], "no_ready_endpoint");
        assert!(envoy.ended().await);
    }
}
