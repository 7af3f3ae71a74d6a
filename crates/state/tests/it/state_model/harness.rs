//! The harness: one operation applied to the real store and to the model
//! alike, and the two compared.

use super::*;

pub(super) const MODEL: &str = "model-a";

/// A worker's set after a full sync of `list` (on `tiers`): the snapshot,
/// confirmed (a hash listed twice keeps its first tier), and the
/// speculative entries it does not list.
pub(super) fn synced(set: &mut BTreeMap<BlockHash, Kind>, list: &[BlockHash], tiers: &[Tier]) {
    let mut next: BTreeMap<BlockHash, Kind> = BTreeMap::new();
    for (h, t) in list.iter().zip(tiers) {
        next.entry(*h).or_insert(Kind::Confirmed(*t));
    }
    for (h, k) in set.iter() {
        if *k == Kind::Speculative && !next.contains_key(h) {
            next.insert(*h, Kind::Speculative);
        }
    }
    *set = next;
}

pub(super) struct Harness {
    pub(super) conn: redis::aio::MultiplexedConnection,
    pub(super) store: StateStore,
    pub(super) short_lease: StateStore,
    pub(super) model: Model,
    pub(super) hashes: Vec<BlockHash>,
}

impl Harness {
    pub(super) fn pick(&self, idx: &[usize]) -> Vec<BlockHash> {
        idx.iter().map(|&i| self.hashes[i]).collect()
    }

    pub(super) async fn heartbeat(&mut self, store_short: bool, w: usize) {
        let hb = WorkerHeartbeat {
            worker_id: WORKERS[w].into(),
            url: format!("http://127.0.0.1:{}", 9000 + w),
            load: None,
        };
        let store = if store_short {
            &self.short_lease
        } else {
            &self.store
        };
        let lease = store.heartbeat(MODEL, &hb).await.unwrap();
        let idx = lease.incarnation.to_string();
        match self.model.live.get(&w) {
            Some((cur, _)) => {
                assert_eq!(cur, &idx, "a live worker keeps its incarnation");
                assert!(!lease.new);
            }
            None => {
                assert!(lease.new);
                self.model.live.insert(w, (idx, BTreeMap::new()));
            }
        }
    }

    /// Applies `op` to Valkey and to the model; checks the outcome agrees.
    pub(super) async fn apply(&mut self, op: &Op) {
        match op {
            Op::Heartbeat(w) => self.heartbeat(false, *w).await,
            Op::Claim(w, hs) => {
                let r = self.store.claim(MODEL, WORKERS[*w], &self.pick(hs)).await;
                let expected = self.model.live.get_mut(w).map(|(_, set)| {
                    let mut n = 0;
                    for &i in hs {
                        let h = self.hashes[i];
                        if let std::collections::btree_map::Entry::Vacant(e) = set.entry(h) {
                            e.insert(Kind::Speculative);
                            n += 1;
                        }
                    }
                    n
                });
                check_result(r, expected);
            }
            Op::Stored(w, hs, tier) => {
                let r = self
                    .store
                    .stored_on(MODEL, WORKERS[*w], &self.pick(hs), *tier)
                    .await
                    .map(|_| 0u64);
                let expected = self.model.live.get_mut(w).map(|(_, set)| {
                    for &i in hs {
                        set.insert(self.hashes[i], Kind::Confirmed(*tier));
                    }
                    0
                });
                check_result(r, expected);
            }
            Op::Evict(w, hs) => {
                let r = self.store.evict(MODEL, WORKERS[*w], &self.pick(hs)).await;
                // Mid-patch, the count is of the forward entries removed: a
                // target block the patch has not written yet has none.
                let r = match r {
                    Ok(_) if self.model.patching.contains(w) => {
                        let set = &self.model.live[w].1;
                        let mut seen = BTreeSet::new();
                        Ok(hs
                            .iter()
                            .filter(|&&i| set.contains_key(&self.hashes[i]) && seen.insert(i))
                            .count() as u64)
                    }
                    r => r,
                };
                let expected = self.model.live.get_mut(w).map(|(_, set)| {
                    let mut n = 0;
                    for &i in hs {
                        if set.remove(&self.hashes[i]).is_some() {
                            n += 1;
                        }
                    }
                    n
                });
                check_result(r, expected);
            }
            Op::Sync(w, hs, chunks, tiered) => {
                let list = self.pick(hs);
                let tiers: Vec<Tier> = hs
                    .iter()
                    .map(|&i| if *tiered { snapshot_tier(i) } else { Tier::Gpu })
                    .collect();
                let r = self.sync_in_chunks(*w, &list, &tiers, *chunks).await;
                // A commit first finishes the patch under way.
                self.model.patching.remove(w);
                let expected = self.model.live.get_mut(w).map(|(_, set)| {
                    synced(set, &list, &tiers);
                    set.len() as u64
                });
                check_result(r, expected);
            }
            Op::ExpireLease(w) => {
                if self.model.live.contains_key(w) {
                    self.heartbeat(true, *w).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let (idx, _) = self.model.live.remove(w).unwrap();
                    self.model.patching.remove(w);
                    self.model.dead.insert(idx);
                }
            }
            Op::Deregister(w) => {
                let r = self.store.deregister(MODEL, WORKERS[*w]).await.unwrap();
                // An expired, not yet collected worker is still deregistrable,
                // so only a live one must report true.
                if let Some((idx, _)) = self.model.live.remove(w) {
                    self.model.patching.remove(w);
                    assert!(r);
                    self.model.dead.insert(idx);
                }
            }
            Op::Gc => {
                self.store.gc(MODEL, 10_000).await.unwrap();
                self.model.dead.clear();
            }
            Op::SyncUnpatched(w, hs, tiered) => self.sync_unpatched(*w, hs, *tiered).await,
            Op::PatchStep(w) => {
                if self.model.patching.contains(w) {
                    let idx = self.model.live[w].0.clone();
                    let done: (u8, u64) = self
                        .script(ScriptName::SyncPatch, &[idx.as_bytes(), b"2"])
                        .await;
                    if done.0 == 1 {
                        self.model.patching.remove(w);
                    }
                }
            }
        }
    }

    /// Runs `script` with `args` after the base (KEYS[1] = ids).
    pub(super) async fn script<T: redis::FromRedisValue>(
        &self,
        script: ScriptName,
        args: &[&[u8]],
    ) -> T {
        let mut c = self.conn.clone();
        support::call_script(&mut c, PREFIX, MODEL, script, args).await
    }

    /// Stages and commits a snapshot for `w` (a live worker not already
    /// patching one) and leaves its patch to PatchStep.
    pub(super) async fn sync_unpatched(&mut self, w: usize, hs: &[usize], tiered: bool) {
        if !self.model.live.contains_key(&w) || self.model.patching.contains(&w) {
            return;
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("mid-{w}-{n}");
        let list = self.pick(hs);
        let tiers: Vec<Tier> = hs
            .iter()
            .map(|&i| if tiered { snapshot_tier(i) } else { Tier::Gpu })
            .collect();
        self.store
            .sync_stage_in_families(MODEL, WORKERS[w], &id, &list, None, Some(&tiers))
            .await
            .unwrap();
        let r: (u8, u64, u64) = self
            .script(
                ScriptName::SyncCommit,
                &[WORKERS[w].as_bytes(), id.as_bytes(), b"600000"],
            )
            .await;
        assert_eq!(r.0, 1, "committed");
        self.model.patching.insert(w);
        let (_, set) = self.model.live.get_mut(&w).unwrap();
        synced(set, &list, &tiers);
    }

    pub(super) async fn sync_in_chunks(
        &self,
        w: usize,
        list: &[BlockHash],
        tiers: &[Tier],
        chunks: usize,
    ) -> Result<u64, StateError> {
        // Every snapshot has its own id: a committed id is never applied
        // twice (a retried commit is a no-op).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("sync-{w}-{n}");
        let size = list.len().div_ceil(chunks).max(1);
        let mut parts: Vec<(&[BlockHash], &[Tier])> =
            list.chunks(size).zip(tiers.chunks(size)).collect();
        if parts.is_empty() {
            parts.push((&[], &[]));
        }
        for (p, t) in parts {
            self.store
                .sync_stage_in_families(MODEL, WORKERS[w], &id, p, None, Some(t))
                .await?;
        }
        self.store
            .sync_commit(MODEL, WORKERS[w], &id)
            .await
            .map(|o| o.active)
    }

    /// The invariants, checked after every step.
    pub(super) async fn check(&self, v: &Valkey, after: &Op) {
        let raw = raw_state(v, PREFIX, MODEL);
        assert_eq!(
            raw.forward_pairs(),
            raw.reverse_pairs(),
            "forward and reverse maps disagree after {after:?}"
        );
        assert_eq!(
            raw.speculative_forward_pairs(),
            raw.speculative_pairs(),
            "speculative sets disagree with the forward map after {after:?}"
        );
        let live_idx: BTreeSet<String> = self.model.live.values().map(|(i, _)| i.clone()).collect();
        for (w, (idx, set)) in &self.model.live {
            let patching = self.model.patching.contains(w);
            // Only the target's tiers are kept while a patch is under way,
            // and no one's after it.
            let st: bool =
                redis::Commands::exists(&mut v.conn(), format!("{PREFIX}:{{{MODEL}}}:st:{idx}"))
                    .unwrap();
            assert!(
                !st || patching,
                "st:{idx} outlived its sync (after {after:?})"
            );
            if patching {
                // Mid-patch the entries are not the target's yet; the
                // digests already are.
                let confirmed = set.iter().filter_map(|(h, k)| match k {
                    Kind::Confirmed(t) => Some((*h, *t)),
                    Kind::Speculative => None,
                });
                let want = digests_hex(&tiered_digests(confirmed));
                let have: BTreeMap<String, String> = redis::Commands::hgetall(
                    &mut v.conn(),
                    format!("{PREFIX}:{{{MODEL}}}:dg:{idx}"),
                )
                .unwrap();
                let got: String = (0..256)
                    .map(|b| {
                        have.get(&format!("{b:02x}"))
                            .cloned()
                            .unwrap_or_else(|| "0".repeat(16))
                    })
                    .collect();
                let differ: Vec<usize> = (0..256)
                    .filter(|b| got[16 * b..16 * b + 16] != want[16 * b..16 * b + 16])
                    .collect();
                assert!(
                    differ.is_empty(),
                    "digests of {} mid-patch differ in buckets {differ:x?} after {after:?}",
                    WORKERS[*w]
                );
                continue;
            }
            let got: BTreeMap<String, char> = raw
                .forward
                .iter()
                .filter_map(|(h, m)| m.get(idx).map(|(k, _)| (h.clone(), *k)))
                .collect();
            let want: BTreeMap<String, char> =
                set.iter().map(|(h, k)| (h.to_hex(), k.letter())).collect();
            assert_eq!(
                got, want,
                "worker {} (incarnation {idx}) after {after:?}",
                WORKERS[*w]
            );
            // Its digests are those of its confirmed blocks with their tiers.
            let confirmed = set.iter().filter_map(|(h, k)| match k {
                Kind::Confirmed(t) => Some((*h, *t)),
                Kind::Speculative => None,
            });
            let digests = digests_hex(&tiered_digests(confirmed));
            let differing = self
                .store
                .sync_check(MODEL, WORKERS[*w], &digests)
                .await
                .unwrap();
            assert_eq!(
                differing, None,
                "digests of {} after {after:?}",
                WORKERS[*w]
            );
        }
        for idx in raw.reverse.keys() {
            assert!(
                live_idx.contains(idx) || self.model.dead.contains(idx),
                "entries of incarnation {idx} survived its purge (after {after:?})"
            );
        }
        // Lookups see exactly the live holders of each block, on their tier
        // (a speculative entry counts as the GPU: the request computes it).
        for h in &self.hashes {
            let l = self.store.probe(MODEL, &[*h]).await.unwrap();
            let got: BTreeMap<String, state::TierBlocks> = l
                .workers
                .iter()
                .filter(|m| m.matched_blocks == 1)
                .map(|m| (m.info.worker_id.clone(), m.by_tier()))
                .collect();
            let want: BTreeMap<String, state::TierBlocks> = self
                .model
                .live
                .iter()
                .filter_map(|(w, (idx, set))| {
                    // Mid-patch, a speculative entry the patch has not
                    // promoted yet still reads as the GPU.
                    let unpromoted = self.model.patching.contains(w)
                        && raw
                            .forward
                            .get(&h.to_hex())
                            .and_then(|m| m.get(idx))
                            .is_some_and(|(k, _)| *k == 's');
                    let tier = match set.get(h)? {
                        Kind::Speculative => Tier::Gpu,
                        Kind::Confirmed(_) if unpromoted => Tier::Gpu,
                        Kind::Confirmed(t) => *t,
                    };
                    let one = state::TierBlocks {
                        gpu: usize::from(tier == Tier::Gpu),
                        cpu: usize::from(tier == Tier::Cpu),
                        disk: usize::from(tier == Tier::Disk),
                    };
                    Some((WORKERS[*w].to_owned(), one))
                })
                .collect();
            assert_eq!(got, want, "lookup of {h} after {after:?}");
        }
    }
}

pub(super) fn check_result(got: Result<u64, StateError>, expected: Option<u64>) {
    match (got, expected) {
        (Ok(n), Some(e)) => assert_eq!(n, e),
        (Err(StateError::UnknownWorker { .. }), None) => {}
        (got, expected) => panic!("got {got:?}, model expected {expected:?}"),
    }
}
