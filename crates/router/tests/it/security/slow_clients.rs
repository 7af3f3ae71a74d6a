//! Slow clients are cut off at the socket; slow answers are not.

use super::*;

/// Reads from `s` until the server closes it (EOF or error); the bytes
/// read and when.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Instant>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, Some(Instant::now())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, None),
        }
    }
}

/// Reads one response head of a `/health` answer (it fits one read).
async fn read_response_head(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("no answer")
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Writes `bytes` one at a time every `gap`, until done or the server
/// closes; returns when it closed (None if it never did).
async fn trickle(s: &mut TcpStream, bytes: &[u8], gap: Duration) -> Option<Instant> {
    let (mut rd, mut wr) = s.split();
    let mut buf = [0u8; 1024];
    for b in bytes {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => return Some(Instant::now()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(gap) => {
                if wr.write_all(&[*b]).await.is_err() {
                    return Some(Instant::now());
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_slow_answers_are_not() {
    let timeout = Duration::from_millis(1000);
    let (_v, r, workers) = fleet(1, |a| a.exposure.client_timeout = Some(timeout)).await;
    let addr = r.addr;
    let cut_in_time = |started: Instant, closed: Option<Instant>, what: &str| {
        let at = closed.unwrap_or_else(|| panic!("{what}: never cut off"));
        let took = at - started;
        assert!(
            took >= timeout - Duration::from_millis(50) && took < timeout * 4,
            "{what}: cut after {took:?}"
        );
    };

    // Connects and sends nothing.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let (got, closed) = read_until_closed(&mut s, timeout * 5).await;
    cut_in_time(started, closed, "silent client");
    assert!(got.is_empty());

    // Trickles its head, one byte per 100 ms (each byte alone would reset
    // an idle timeout).
    let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let closed = trickle(&mut s, head.as_bytes(), Duration::from_millis(100)).await;
    cut_in_time(started, closed, "slow head");

    // Sends its head, then part of the body and stalls: a JSON 408, and
    // the connection is closed.
    let body = json!({"model": QWEN, "prompt": "hello"}).to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..10]
    );
    let started = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let (got, closed) = read_until_closed(&mut s, timeout * 5).await;
    cut_in_time(started, closed, "stalled body");
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let json_at = text.find("\r\n\r\n").unwrap() + 4;
    assert_json_error(408, &text.as_bytes()[json_at..], "stalled body");

    // Trickles its body: the deadline is for the whole body.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /internal/stored HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 200\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let closed = trickle(&mut s, &[b' '; 200], Duration::from_millis(50)).await;
    cut_in_time(started, closed, "slow body");
    assert_eq!(workers[0].hits(), 0);

    // A keep-alive connection may wait idle between requests; the next
    // request's head is timed from its first byte.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(get).await.unwrap();
    assert!(read_response_head(&mut s).await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(timeout + timeout / 2).await;
    s.write_all(get).await.unwrap();
    assert!(
        read_response_head(&mut s).await.starts_with("HTTP/1.1 200"),
        "idle connection was cut"
    );
    let started = Instant::now();
    let closed = trickle(&mut s, get, Duration::from_millis(200)).await;
    cut_in_time(started, closed, "slow second head");

    // An answer may take longer than the timeout (non-streamed, then
    // streamed): only what the client sends is timed.
    *workers[0].shared.answer_delay.lock().unwrap() = Some(timeout * 2);
    let client = http();
    let complete = |stream: bool| {
        client
            .post(r.url("/v1/completions"))
            .json(&json!({"model": QWEN, "prompt": "hello there", "stream": stream}))
            .send()
    };
    let resp = complete(false).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.bytes().await.unwrap();
    *workers[0].shared.answer_delay.lock().unwrap() = None;
    let resp = complete(true).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let release = workers[0].release.clone();
    tokio::spawn(async move {
        for _ in SSE_CHUNKS {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _ = release.send(());
        }
    });
    let started = Instant::now();
    let text = resp.text().await.unwrap();
    assert!(started.elapsed() > timeout, "the stream was not slow");
    assert_eq!(text, SSE_CHUNKS.concat());
    assert_eq!(workers[0].hits(), 2);
    assert!(!workers[0].shared.stream_cancelled.load(Ordering::SeqCst));
    assert!(r.is_running());
    r.stop().await;
}
