//! A store shared by serving threads (one single-threaded runtime each)
//! gives each thread its own routing connection, connected on that
//! thread's runtime: its replies wake only that thread, and it outlives
//! another thread's runtime.

use std::time::Duration;

use state::{BatchLimits, ConnectionSettings, StateStore, StateTtls};

use crate::support::Valkey;

/// Clients connected to `v`, besides the one asking.
fn others_connected(c: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
    list.lines().count() - 1
}

/// A single-threaded runtime on a thread marked serving thread `index`,
/// which connects and pings there; the runtime is handed back (alive).
fn ping_on_thread(index: usize, s: &StateStore) -> tokio::runtime::Runtime {
    let s = s.clone();
    std::thread::spawn(move || {
        state::set_serving_thread(index);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            s.connect().await.unwrap();
            s.ping().await.unwrap();
        });
        rt
    })
    .join()
    .unwrap()
}

#[test]
fn each_serving_thread_has_its_own_routing_connection() {
    let v = Valkey::start();
    let mut settings = ConnectionSettings::new(&v.url());
    settings.hot_timeout = Duration::from_secs(2);
    settings.serving_threads = 2;
    let s = StateStore::new(
        settings,
        "pr",
        "r1",
        StateTtls::default(),
        BatchLimits::default(),
    )
    .unwrap();
    let mut c = v.conn();
    let before = others_connected(&mut c);
    let first = ping_on_thread(0, &s);
    let second = ping_on_thread(1, &s);
    assert_eq!(others_connected(&mut c) - before, 2, "one connection each");
    // Thread 1's runtime ends, and its connection with it; thread 0's
    // (this test's thread is thread 0) still answers on its own, without
    // reconnecting.
    drop(second);
    first.block_on(async { s.ping().await.unwrap() });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while others_connected(&mut c) - before != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "thread 1's connection outlived its runtime"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
