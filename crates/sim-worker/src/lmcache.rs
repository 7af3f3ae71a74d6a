//! LMCache's own view of a prompt's KV: its chunk keys and the messages an
//! LMCache instance sends its controller (issue 31's load-test arm).
//!
//! A sim started with `--lmcache-controller` plays an engine with LMCache
//! beside it: what its KV tiers hold is reported to a real LMCache
//! controller as LMCache reports it, in LMCache's chunk keys. Both are
//! pure here; `server::lmcache_link` does the I/O.
//!
//! **Chunk keys** (lmcache 0.5.6, `v1/token_database.py`, the defaults the
//! controller's own `lookup` uses: `ChunkedTokenDatabase()` without a
//! config): the prompt is cut in chunks of [`CHUNK_TOKENS`] tokens; the key
//! of chunk `i` is Python's builtin `hash((key_{i-1}, tuple(chunk_i), ()))`
//! with `key_{-1} = 0` (`NONE_HASH`). Python hashes an `int` modulo the
//! Mersenne prime 2^61 − 1 (sign kept, −1 becomes −2) and a tuple with
//! its xxHash-based combination (CPython ≥ 3.8, `tupleobject.c`), both
//! independent of `PYTHONHASHSEED`, so the keys are the same in every
//! process. Only full chunks are computed here: the sim's blocks are full
//! blocks, so a partial last chunk is never whole in its tiers.
//!
//! **Messages** (`v1/cache_controller/message.py`): msgspec structs
//! tagged with their class name, encoded as msgpack maps whose first entry
//! is `"type"` then the fields in declaration order.

use rmpv::Value;

/// Tokens of one LMCache chunk (its default `chunk_size`).
pub const CHUNK_TOKENS: usize = 256;

/// The location an LMCache CPU tier reports its chunks at.
pub const CPU_LOCATION: &str = "LocalCPUBackend";

const MERSENNE_61: u64 = (1 << 61) - 1;
const XXPRIME_1: u64 = 11_400_714_785_074_694_791;
const XXPRIME_2: u64 = 14_029_467_366_897_019_727;
const XXPRIME_5: u64 = 2_870_177_450_012_600_261;

/// Python's `hash(v)` of an `int` that fits an `i64`.
fn hash_int(v: i64) -> i64 {
    let magnitude = v.unsigned_abs() % MERSENNE_61;
    // < 2^61: fits.
    let h = i64::try_from(magnitude).unwrap_or(i64::MAX);
    let h = if v < 0 { -h } else { h };
    if h == -1 { -2 } else { h }
}

/// Python's `hash` of a tuple whose items hash to `lanes`.
fn hash_tuple(lanes: impl ExactSizeIterator<Item = i64>) -> i64 {
    let len = lanes.len() as u64;
    let mut acc = XXPRIME_5;
    for lane in lanes {
        acc = acc.wrapping_add((lane as u64).wrapping_mul(XXPRIME_2));
        acc = acc.rotate_left(31);
        acc = acc.wrapping_mul(XXPRIME_1);
    }
    acc = acc.wrapping_add(len ^ (XXPRIME_5 ^ 3_527_539));
    if acc == u64::MAX {
        1_546_275_796
    } else {
        acc as i64
    }
}

/// The key of a chunk of `tokens` after the chunk keyed `prefix` (0 for
/// the first): `hash((prefix, tuple(tokens), ()))`.
pub fn chunk_key(prefix: i64, tokens: &[u32]) -> i64 {
    let chunk = hash_tuple(tokens.iter().map(|&t| hash_int(i64::from(t))));
    let empty = hash_tuple(std::iter::empty());
    hash_tuple([hash_int(prefix), chunk, empty].into_iter())
}

/// The keys of the full chunks of `tokens`, in order (a partial last chunk
/// has none here).
pub fn chunk_keys(tokens: &[u32]) -> Vec<i64> {
    let mut prefix = 0;
    tokens
        .chunks_exact(CHUNK_TOKENS)
        .map(|chunk| {
            prefix = chunk_key(prefix, chunk);
            prefix
        })
        .collect()
}

/// An admit or an evict of one chunk key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkOp {
    /// The instance now holds the chunk.
    Admit(i64),
    /// The instance no longer holds it.
    Evict(i64),
}

fn tagged(tag: &str, fields: Vec<(&str, Value)>) -> Vec<u8> {
    let mut map = vec![(Value::from("type"), Value::from(tag))];
    map.extend(fields.into_iter().map(|(k, v)| (Value::from(k), v)));
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &Value::Map(map));
    out
}

/// Who an instance is: the fields `RegisterMsg` and `HeartbeatMsg` share.
fn about(instance_id: &str, port: u16) -> Vec<(&'static str, Value)> {
    vec![
        ("instance_id", Value::from(instance_id)),
        ("worker_id", Value::from(0)),
        ("ip", Value::from("127.0.0.1")),
        ("port", Value::from(port)),
        ("peer_init_url", Value::Nil),
    ]
}

/// `RegisterMsg` of worker 0 of `instance_id` (sent to the reply port).
pub fn register_msg(instance_id: &str, port: u16) -> Vec<u8> {
    tagged("RegisterMsg", about(instance_id, port))
}

/// `HeartbeatMsg` of worker 0 of `instance_id` (sent to the heartbeat port).
pub fn heartbeat_msg(instance_id: &str, port: u16) -> Vec<u8> {
    tagged("HeartbeatMsg", about(instance_id, port))
}

/// `BatchedKVOperationMsg` of `ops` at `location`, numbered from
/// `first_seq` (sent to the pull port).
pub fn batch_msg(instance_id: &str, location: &str, ops: &[ChunkOp], first_seq: u64) -> Vec<u8> {
    let operations = ops
        .iter()
        .zip(first_seq..)
        .map(|(op, seq)| {
            let (kind, key) = match *op {
                ChunkOp::Admit(k) => ("admit", k),
                ChunkOp::Evict(k) => ("evict", k),
            };
            Value::Map(vec![
                (Value::from("op_type"), Value::from(kind)),
                (Value::from("key"), Value::from(key)),
                (Value::from("seq_num"), Value::from(seq)),
            ])
        })
        .collect();
    tagged(
        "BatchedKVOperationMsg",
        vec![
            ("instance_id", Value::from(instance_id)),
            ("worker_id", Value::from(0)),
            ("location", Value::from(location)),
            ("operations", Value::Array(operations)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Values printed by CPython 3.11 and lmcache 0.5.6 (target/lmcache-venv):
    /// `hash((0,(1,2,3),()))`, `hash((-5,(),()))`, `hash(-1)`,
    /// `hash(2**61-1)`, `hash(2**63-5)`.
    #[test]
    fn python_hashes_of_ints_and_tuples() {
        assert_eq!(chunk_key(0, &[1, 2, 3]), 7_754_693_342_585_032_853);
        assert_eq!(chunk_key(-5, &[]), 3_991_399_180_879_185_100);
        assert_eq!(hash_int(-1), -2);
        assert_eq!(hash_int((1 << 61) - 1), 0);
        assert_eq!(hash_int(i64::MAX - 4), 2_305_843_009_213_693_950);
    }

    /// `[k for _,_,k in ChunkedTokenDatabase().process_tokens(toks,
    /// make_key=False)]` with `toks = [(i*7919+13)%151000 for i in
    /// range(600)]`: two full chunks and a partial one (not computed here).
    #[test]
    fn chunk_keys_equal_lmcaches_own() {
        let tokens: Vec<u32> = (0..600u32).map(|i| (i * 7919 + 13) % 151_000).collect();
        assert_eq!(
            chunk_keys(&tokens),
            vec![-5_735_714_404_071_939_816, -3_646_571_630_471_233_921]
        );
        assert!(chunk_keys(&tokens[..255]).is_empty());
    }

    /// Bytes of `msgspec.msgpack.encode(...)` of the same messages.
    #[test]
    fn messages_encode_as_msgspec_does() {
        assert_eq!(
            hex(&register_msg("a", 1)),
            "86a474797065ab52656769737465724d7367ab696e7374616e63655f6964a161a9776f726b65725f6964\
             00a26970a93132372e302e302e31a4706f727401ad706565725f696e69745f75726cc0"
        );
        assert_eq!(
            hex(&batch_msg("a", CPU_LOCATION, &[ChunkOp::Admit(-5)], 0)),
            "85a474797065b5426174636865644b564f7065726174696f6e4d7367ab696e7374616e63655f6964a1\
             61a9776f726b65725f696400a86c6f636174696f6eaf4c6f63616c4350554261636b656e64aa6f7065\
             726174696f6e739183a76f705f74797065a561646d6974a36b6579fba77365715f6e756d00"
        );
    }
}
