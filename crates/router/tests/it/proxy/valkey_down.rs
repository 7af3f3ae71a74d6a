//! Requests are still answered while Valkey is down or refuses writes.

use super::*;

#[tokio::test]
async fn requests_are_still_answered_while_valkey_is_down() {
    let mut f = fleet(2).await;
    let (st, _, _) = complete(&f, json!({"model": MODEL, "prompt": "warm up"})).await;
    assert_eq!(st, 200);
    f.valkey.kill();
    for i in 0..4 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("during outage {i}")}),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        assert!(w == "w0" || w == "w1");
    }
}

#[tokio::test]
async fn requests_are_still_answered_while_valkey_refuses_writes() {
    let f = fleet(2).await;
    let (st, _, _) = complete(&f, json!({"model": MODEL, "prompt": "warm up"})).await;
    assert_eq!(st, 200);
    // Out of memory with no eviction: every script that writes gets OOM,
    // as it would get READONLY from a demoted primary or LOADING while an
    // AOF loads. Those are "not now", not "bad request".
    let mut conn = f.valkey.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    for i in 0..4 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("while full {i}")}),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        assert!(w == "w0" || w == "w1");
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut conn)
        .unwrap();
}
