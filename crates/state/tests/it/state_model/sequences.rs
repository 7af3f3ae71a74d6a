//! Random operation sequences, and operations during a sync's patch,
//! match the model.

use super::*;

/// `op()`, plus syncs left unpatched and patch steps: reports, claims and
/// evictions then land while a patch is under way.
fn op_mid_patch() -> impl Strategy<Value = Op> {
    let w = 0..WORKERS.len();
    prop_oneof![
        6 => op(),
        2 => (w.clone(), hashes(), any::<bool>()).prop_map(|(w, h, t)| Op::SyncUnpatched(w, h, t)),
        2 => w.prop_map(Op::PatchStep),
    ]
}

fn long_ttls() -> StateTtls {
    StateTtls {
        speculative: Duration::from_secs(600),
        confirmed: Duration::from_secs(600),
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    }
}

/// Tiny chunks and steps so that chunking and multi-step patches are exercised.
fn tiny_limits() -> BatchLimits {
    BatchLimits {
        hashes_per_call: 3,
        stage_per_call: 2,
        step_budget: 2,
        sweep_budget: 2,
        ..BatchLimits::default()
    }
}

fn new_store(v: &Valkey, ttls: StateTtls) -> StateStore {
    // Routing-lane calls (lookups) get a deadline a loaded machine meets.
    let settings = ConnectionSettings {
        hot_timeout: Duration::from_secs(2),
        ..ConnectionSettings::new(&v.url())
    };
    StateStore::new(settings, PREFIX, "router-1", ttls, tiny_limits()).unwrap()
}

/// Runs `cases` random sequences of `ops` from a flushed Valkey, checking
/// the model after every step; then finishes every patch under way and
/// checks again (the entries are then the model's).
fn run_sequences(cases: u32, ops: impl Strategy<Value = Op>) {
    let valkey = Valkey::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(ops, 1..40))| {
        rt.block_on(async {
            let _: () = redis::cmd("FLUSHALL").query(&mut valkey.conn()).unwrap();
            let short = StateTtls { worker_lease: Duration::from_millis(1), ..long_ttls() };
            let mut h = Harness {
                conn: valkey.client().get_multiplexed_async_connection().await.unwrap(),
                store: new_store(&valkey, long_ttls()),
                short_lease: new_store(&valkey, short),
                model: Model::default(),
                hashes: universe(),
            };
            for op in &ops {
                h.apply(op).await;
                h.check(&valkey, op).await;
            }
            for w in h.model.patching.clone() {
                while h.model.patching.contains(&w) {
                    h.apply(&Op::PatchStep(w)).await;
                }
                h.check(&valkey, &Op::PatchStep(w)).await;
            }
        });
    });
}

#[test]
fn random_operation_sequences_match_the_model() {
    run_sequences(support::cases(24), op());
}

/// Reports, claims and evictions while a committed sync is patched (a
/// hash listed twice in one report included) keep the digests equal to
/// the target's, tiers included, and the patch ends on the model's entries.
#[test]
fn operations_during_a_patch_match_the_model() {
    run_sequences(support::cases(32), op_mid_patch());
}
