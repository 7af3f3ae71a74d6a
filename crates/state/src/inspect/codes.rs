//! [`Code`]: every violation `inspect --check` can report, grouped by the
//! invariant (1 to 5) it breaks. docs/state.md, "Inspecting the state",
//! lists them.

use serde::Serialize;

/// One kind of violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    /// 1: a forward entry `<idx>` for h, but h ∉ `r:<idx>`.
    ForwardWithoutReverse,
    /// 1: h ∈ `r:<idx>`, but no forward entry `<idx>` for h.
    ReverseWithoutForward,
    /// 1: a speculative entry whose hash is not in `sp:<idx>`.
    SpeculativeNotInSp,
    /// 1: h ∈ `sp:<idx>`, but the entry is confirmed or missing.
    SpMemberNotSpeculative,
    /// 1: h ∈ `sp:<idx>` but h ∉ `r:<idx>`.
    SpNotInReverse,
    /// 2: a forward entry of an incarnation neither leased nor being purged.
    EntryOfUnknownIncarnation,
    /// 2: `w:`/`r:`/`sp:`/`s:` keys of an incarnation neither leased nor
    /// being purged.
    KeysOfUnknownIncarnation,
    /// 2: `ids` maps a worker id to an incarnation neither leased nor purged.
    IdOfUnknownIncarnation,
    /// 2: `ids` maps a worker id to an incarnation whose record names another id.
    IdRecordMismatch,
    /// 2: a leased incarnation that `ids` does not map its worker id to.
    LeaseNotInIds,
    /// 2: an incarnation both leased and queued for purge.
    LeasedAndPurging,
    /// 2: a leased or purging incarnation without its record `w:<idx>`.
    MissingRecord,
    /// 2: an incarnation above `seq` (or `seq` missing).
    IncarnationAboveSeq,
    /// 2: a worker record without `id`, or with a bad sync state.
    BadRecord,
    /// 2: a sync target `s:<idx>` while the worker is not syncing.
    SyncTargetNotSyncing,
    /// 3: a forward value that is not `<idx><s|c><expiry_s>,...` (one per
    /// incarnation).
    MalformedEntry,
    /// 3: a speculative entry expiring beyond the TTL horizon.
    SpeculativeExpiryTooFar,
    /// 3: a worker lease ending beyond the TTL horizon.
    LeaseTooFar,
    /// 3: a router lease ending beyond the TTL horizon.
    RouterLeaseTooFar,
    /// 3: a staged sync without a TTL (it would never go away).
    StageWithoutTtl,
    /// 3: a response cache key without a TTL (it would never go away).
    ResponseCacheWithoutTtl,
    /// 3: a tenant limit key without a TTL (it would never go away).
    TenantKeyWithoutTtl,
    /// 3: a TTL on a key the scripts keep forever (it would vanish).
    UnexpectedTtl,
    /// 4: a leased incarnation without a routing-view record.
    MissingViewRecord,
    /// 4: a view record of an incarnation neither leased nor purging.
    ViewRecordOfPurged,
    /// 4: a view record that differs from the worker record.
    StaleViewRecord,
    /// 4: an in-flight count for an incarnation neither leased nor purging.
    InflightOfUnknownIncarnation,
    /// 4: an in-flight count under a router whose lease ended more than
    /// 5 s ago: no live request stands behind it, and gc should have
    /// dropped it. (A live router's counts are reconciled with its own
    /// ledger at every lease renewal.)
    InflightOfDeadRouter,
    /// 4: a view field that is neither `<idx>` nor `<idx>:<router>`, or an
    /// in-flight count that is not a positive integer.
    BadViewField,
    /// 5: a key under the prefix that is not in the schema.
    UnknownKey,
    /// 5: a key of the schema with the wrong type.
    WrongType,
    /// 5: a model with keys that `<ns>:models` does not list.
    ModelNotListed,
    /// 5: a forward field that is not a block hash, or in the wrong bucket.
    MisplacedForwardField,
    /// 5: a member of `r:`/`sp:`/`leases`/`purge` that is not a block hash
    /// (or incarnation).
    BadMember,
}

impl Code {
    /// The invariant (1 to 5, as in docs/state.md) this code breaks.
    pub fn invariant(self) -> u8 {
        use Code::*;
        match self {
            ForwardWithoutReverse
            | ReverseWithoutForward
            | SpeculativeNotInSp
            | SpMemberNotSpeculative
            | SpNotInReverse => 1,
            EntryOfUnknownIncarnation
            | KeysOfUnknownIncarnation
            | IdOfUnknownIncarnation
            | IdRecordMismatch
            | LeaseNotInIds
            | LeasedAndPurging
            | MissingRecord
            | IncarnationAboveSeq
            | BadRecord
            | SyncTargetNotSyncing => 2,
            MalformedEntry
            | SpeculativeExpiryTooFar
            | LeaseTooFar
            | RouterLeaseTooFar
            | StageWithoutTtl
            | ResponseCacheWithoutTtl
            | TenantKeyWithoutTtl
            | UnexpectedTtl => 3,
            MissingViewRecord
            | ViewRecordOfPurged
            | StaleViewRecord
            | InflightOfUnknownIncarnation
            | InflightOfDeadRouter
            | BadViewField => 4,
            UnknownKey | WrongType | ModelNotListed | MisplacedForwardField | BadMember => 5,
        }
    }

    /// The kebab-case name printed and used in JSON.
    pub fn name(self) -> &'static str {
        use Code::*;
        match self {
            ForwardWithoutReverse => "forward-without-reverse",
            ReverseWithoutForward => "reverse-without-forward",
            SpeculativeNotInSp => "speculative-not-in-sp",
            SpMemberNotSpeculative => "sp-member-not-speculative",
            SpNotInReverse => "sp-not-in-reverse",
            EntryOfUnknownIncarnation => "entry-of-unknown-incarnation",
            KeysOfUnknownIncarnation => "keys-of-unknown-incarnation",
            IdOfUnknownIncarnation => "id-of-unknown-incarnation",
            IdRecordMismatch => "id-record-mismatch",
            LeaseNotInIds => "lease-not-in-ids",
            LeasedAndPurging => "leased-and-purging",
            MissingRecord => "missing-record",
            IncarnationAboveSeq => "incarnation-above-seq",
            BadRecord => "bad-record",
            SyncTargetNotSyncing => "sync-target-not-syncing",
            MalformedEntry => "malformed-entry",
            SpeculativeExpiryTooFar => "speculative-expiry-too-far",
            LeaseTooFar => "lease-too-far",
            RouterLeaseTooFar => "router-lease-too-far",
            StageWithoutTtl => "stage-without-ttl",
            ResponseCacheWithoutTtl => "response-cache-without-ttl",
            TenantKeyWithoutTtl => "tenant-key-without-ttl",
            UnexpectedTtl => "unexpected-ttl",
            MissingViewRecord => "missing-view-record",
            ViewRecordOfPurged => "view-record-of-purged",
            StaleViewRecord => "stale-view-record",
            InflightOfUnknownIncarnation => "inflight-of-unknown-incarnation",
            InflightOfDeadRouter => "inflight-of-dead-router",
            BadViewField => "bad-view-field",
            UnknownKey => "unknown-key",
            WrongType => "wrong-type",
            ModelNotListed => "model-not-listed",
            MisplacedForwardField => "misplaced-forward-field",
            BadMember => "bad-member",
        }
    }
}

/// One violation found in some facts: its code and a human explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    /// What is violated.
    pub(crate) code: Code,
    /// The particulars.
    pub(crate) detail: String,
}

impl Issue {
    /// An issue of `code`.
    pub(crate) fn new(code: Code, detail: impl Into<String>) -> Self {
        Issue {
            code,
            detail: detail.into(),
        }
    }
}
