//! Prefill/decode disaggregation (issue 14): what a worker of each role
//! does with a request's `kv_transfer_params` (`protocol::kv_transfer`
//! has the handshake and the shapes, after vLLM's NIXL connector).
//!
//! * `both` ignores them, as the sim always did: a colocated worker.
//! * `prefill` honours `do_remote_decode`: it prefills as usual (cache
//!   lookup, prefill time, blocks stored and reported) and answers one
//!   JSON whose `kv_transfer_params` tell the decode worker where the KV
//!   is: the block ids it holds for the prompt, its engine id (the worker
//!   id), the request's id, and its HTTP address as `remote_host` and
//!   `remote_port` (the sim has no NIXL side channel: nothing connects to
//!   it; the address names the worker), plus the prompt's block hashes.
//!   vLLM keeps those blocks pinned until the decode worker has read them;
//!   the sim frees them when the request ends, which leaves them cached
//!   (evictable) like any finished prompt's.
//! * `decode` honours `do_remote_prefill`: the blocks it does not hold are
//!   pulled (the transfer model's time), then cached here and reported,
//!   and only the last token is computed before decoding
//!   ([`KvSource::RemotePrefill`]). Without params it prefills itself, as
//!   `both` does: the router's skip-prefill path.
//!
//! A request asking a worker for the other role's half, or with params no
//! connector could act on, is a 400 in vLLM's error shape.

use axum::http::StatusCode;
use serde_json::Value;

use super::error::SimError;
use super::prompt::Prepared;
use crate::{Admission, KvSource};
use protocol::WorkerRole;
use protocol::kv_transfer::{self, KvTransfer, RemotePrefill};

/// What a request's `kv_transfer_params` ask of this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disagg {
    /// Serve it as a colocated worker does.
    Local,
    /// Prefill it for a remote decode and answer with the handoff params.
    Handoff,
    /// Pull its prompt's KV from the remote prefill that computed it.
    Receive,
}

impl Disagg {
    /// Where the engine takes the prompt's KV from.
    pub fn source(self) -> KvSource {
        match self {
            Disagg::Receive => KvSource::RemotePrefill,
            Disagg::Local | Disagg::Handoff => KvSource::Local,
        }
    }
}

fn bad(message: impl Into<String>) -> SimError {
    SimError::new(StatusCode::BAD_REQUEST, "BadRequestError", message)
}

/// Reads `p`'s `kv_transfer_params` for a worker of `role`; see the module
/// docs.
pub fn plan(role: WorkerRole, p: &Prepared) -> Result<Disagg, SimError> {
    if role == WorkerRole::Both {
        return Ok(Disagg::Local);
    }
    let transfer =
        kv_transfer::parse(p.kv_transfer_params.as_ref()).map_err(|e| bad(e.to_string()))?;
    if transfer != KvTransfer::Local && p.prompts.len() != 1 {
        return Err(bad(
            "kv_transfer_params: a disaggregated request has exactly one prompt",
        ));
    }
    match (role, transfer) {
        (_, KvTransfer::Local) => Ok(Disagg::Local),
        (WorkerRole::Prefill, KvTransfer::RemoteDecode) if p.stream => Err(bad(
            "kv_transfer_params.do_remote_decode: the prefill of a remote decode is answered \
             as one JSON; send it with stream false",
        )),
        (WorkerRole::Prefill, KvTransfer::RemoteDecode) => Ok(Disagg::Handoff),
        (WorkerRole::Decode, KvTransfer::RemotePrefill(r)) => {
            check_hashes(&r, p)?;
            Ok(Disagg::Receive)
        }
        (_, KvTransfer::RemoteDecode) => Err(bad(format!(
            "kv_transfer_params.do_remote_decode: this worker's role is {role}; only a prefill \
             worker prefills for a remote decode"
        ))),
        (_, KvTransfer::RemotePrefill(_)) => Err(bad(format!(
            "kv_transfer_params.do_remote_prefill: this worker's role is {role}; only a decode \
             worker takes a remote prefill's KV"
        ))),
    }
}

/// The prefill worker's hashes must be this prompt's: other ones mean the
/// params belong to another request, or the two workers hash differently
/// (block size, hash seed). A prompt the sim cannot reproduce (no hashes)
/// is not checked.
fn check_hashes(r: &RemotePrefill, p: &Prepared) -> Result<(), SimError> {
    let hashes = p.prompts.first().map_or(&[][..], |q| &q.hashes[..]);
    match &r.remote_block_hashes {
        Some(theirs) if !hashes.is_empty() && *theirs != hashes => Err(bad(format!(
            "kv_transfer_params.remote_block_hashes name {} blocks that are not this prompt's \
             {} (another request's params, or another block size or hash seed?)",
            theirs.len(),
            hashes.len()
        ))),
        _ => Ok(()),
    }
}

/// Where a prefill worker says its KV is.
#[derive(Debug, Clone)]
pub struct Producer<'a> {
    /// `remote_engine_id`: the worker id.
    pub engine_id: &'a str,
    /// `remote_request_id`: the answer's id.
    pub request_id: &'a str,
    /// `remote_host` and `remote_port`: the worker's HTTP address.
    pub host: String,
    /// See `host`.
    pub port: u16,
}

/// The `kv_transfer_params` of a prefill worker's answer: the request's
/// blocks that hold the prompt (`block_ids`, its block table) as vLLM's
/// `NixlPullConnectorScheduler.request_finished` fills them in.
pub fn handoff_params(
    producer: &Producer<'_>,
    p: &Prepared,
    a: &Admission,
    block_ids: &[usize],
    block_size: usize,
) -> Value {
    let prompt_blocks = a.prompt_tokens.div_ceil(block_size.max(1));
    let ids = block_ids.iter().take(prompt_blocks).map(|&b| b as u64);
    let params = RemotePrefill {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_block_ids: vec![ids.collect()],
        remote_engine_id: producer.engine_id.to_owned(),
        remote_request_id: Some(producer.request_id.to_owned()),
        remote_host: producer.host.clone(),
        remote_port: producer.port,
        tp_size: 1,
        dcp_size: 1,
        pp_size: 1,
        remote_num_tokens: Some(a.prompt_tokens as u64),
        remote_blocks_expiry_time: None,
        transfer_mode: Some("pull".into()),
        remote_block_hashes: p.prompts.first().map(|q| q.hashes.clone()),
    };
    serde_json::to_value(params).unwrap_or(Value::Null)
}
