//! Raw ZMQ frames of a real engine's KV events, recorded as they arrive
//! (a SUB socket of our own beside the reporter's) and from one replay
//! request, so that the default CI can decode what a real vLLM sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde::Serialize;
use tokio::task::JoinHandle;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// One multipart message, each frame in hex.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// Which engine sent it (`vllm-0`).
    pub engine: String,
    /// `sub` (published) or `replay` (a reply on the replay socket).
    pub socket: &'static str,
    /// Its frames.
    pub frames_hex: Vec<String>,
}

/// Every message a [`Recorder`]'s subscribers received, in order.
#[derive(Debug, Default, Clone)]
pub struct Recorded(Arc<Mutex<Vec<Message>>>);

impl Recorded {
    fn push(&self, m: Message) {
        if let Ok(mut v) = self.0.lock() {
            v.push(m);
        }
    }

    /// A copy of what was recorded so far.
    pub fn snapshot(&self) -> Vec<Message> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Subscribes to engines' publishers and records what they send.
#[derive(Debug, Default)]
pub struct Recorder {
    recorded: Recorded,
    tasks: Vec<JoinHandle<()>>,
}

fn hex_frames(frames: Vec<Bytes>) -> Vec<String> {
    frames.iter().map(hex::encode).collect()
}

impl Recorder {
    /// Starts recording `endpoint` (an engine's bound PUB socket) as `engine`.
    pub async fn subscribe(&mut self, engine: &str, endpoint: &str) -> anyhow::Result<()> {
        let mut socket = SubSocket::new();
        socket
            .connect(endpoint)
            .await
            .with_context(|| format!("connecting a SUB socket to {endpoint}"))?;
        socket.subscribe("").await.context("subscribing")?;
        let recorded = self.recorded.clone();
        let engine = engine.to_owned();
        self.tasks.push(tokio::spawn(async move {
            // Ends with the socket (the engine gone) or when aborted.
            while let Ok(msg) = socket.recv().await {
                recorded.push(Message {
                    engine: engine.clone(),
                    socket: "sub",
                    frames_hex: hex_frames(msg.into_vec()),
                });
            }
        }));
        Ok(())
    }

    /// Asks `endpoint` (an engine's replay ROUTER) for every batch from
    /// `start_seq`, recording each reply until the end marker (at most
    /// `max` replies).
    pub async fn replay(
        &self,
        engine: &str,
        endpoint: &str,
        start_seq: u64,
        max: usize,
    ) -> anyhow::Result<usize> {
        let mut socket = DealerSocket::new();
        tokio::time::timeout(Duration::from_secs(5), socket.connect(endpoint))
            .await
            .context("replay connect timed out")?
            .with_context(|| format!("connecting a DEALER socket to {endpoint}"))?;
        let request = ZmqMessage::try_from(protocol::kv_events::replay_request_frames(start_seq))
            .map_err(|_| anyhow::anyhow!("empty replay request"))?;
        socket
            .send(request)
            .await
            .context("sending the replay request")?;
        let mut n = 0;
        while n < max {
            let msg = tokio::time::timeout(Duration::from_secs(5), socket.recv())
                .await
                .context("replay reply timed out")?
                .context("receiving a replay reply")?;
            let frames = msg.into_vec();
            let end = frames
                .iter()
                .any(|f| f.as_ref() == protocol::kv_events::REPLAY_END_SEQ.to_be_bytes());
            self.recorded.push(Message {
                engine: engine.to_owned(),
                socket: "replay",
                frames_hex: hex_frames(frames),
            });
            n += 1;
            if end {
                break;
            }
        }
        Ok(n)
    }

    /// What was recorded so far.
    pub fn recorded(&self) -> Recorded {
        self.recorded.clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The recorded frames as a test fixture, with what produced them.
#[derive(Debug, Serialize)]
pub struct Fixture<'a> {
    /// How it was made.
    pub source: &'static str,
    /// The engine's `GET /version`.
    pub vllm_version: String,
    /// The engines' block size.
    pub block_size: u32,
    /// The engines' `--prefix-caching-hash-algo`.
    pub hash_algo: &'static str,
    /// The engines' `PYTHONHASHSEED`.
    pub python_hash_seed: &'static str,
    /// Every message, in arrival order per engine.
    pub messages: &'a [Message],
}

impl<'a> Fixture<'a> {
    /// A fixture of `messages` from engines of `vllm_version`.
    pub fn new(messages: &'a [Message], vllm_version: String, block_size: u32) -> Self {
        Fixture {
            source: "loadtest real-engine (scripts/real-vllm.sh): two vLLM CPU engines, tiny Qwen3 with dummy weights",
            vllm_version,
            block_size,
            hash_algo: "sha256_cbor",
            python_hash_seed: "0",
            messages,
        }
    }
}
