//! [`KvTransferModel`]: how long moving KV blocks takes, for the two ways a
//! simulated engine gets KV it did not compute: a decode worker pulling a
//! prompt's blocks from a prefill worker (NIXL over the network), and a
//! load from its own CPU tier (over PCIe).
//!
//! ```text
//! bytes    = blocks × block_size × kv_bytes_per_token
//! transfer = scale × bytes × 8 / (gbps × 10⁹)
//! ```
//!
//! Transfers are not compute: the engine runs them before a request's
//! prefill and, with serial prefills, they do not hold the prefill compute
//! (vLLM parks such a request in `WAITING_FOR_REMOTE_KVS` meanwhile).

use std::time::Duration;

/// A transfer model that cannot be used: a bandwidth that is not a positive
/// finite number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{what} must be a positive finite number of Gbit/s, got {gbps}")]
pub struct TransferModelError {
    /// Which bandwidth.
    pub what: &'static str,
    /// Its value.
    pub gbps: f64,
}

/// KV bytes and bandwidths; see the module docs. Durations are real time,
/// before the [`TimeModel`](crate::TimeModel)'s scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvTransferModel {
    /// KV-cache bytes of one token, all layers, keys and values.
    pub kv_bytes_per_token: u64,
    /// Bandwidth from a prefill worker to a decode worker, in Gbit/s.
    pub remote_gbps: f64,
    /// Bandwidth from the CPU tier back to the GPU, in Gbit/s.
    pub cpu_gbps: f64,
}

impl Default for KvTransferModel {
    /// Qwen3-8B in bf16 (36 layers × 8 KV heads × 128 dims × 2 for keys
    /// and values × 2 bytes = 147,456 bytes a token), over a 100 Gbit/s
    /// RDMA link and a PCIe 4.0 x16 link (about 200 Gbit/s).
    fn default() -> Self {
        KvTransferModel {
            kv_bytes_per_token: 36 * 8 * 128 * 2 * 2,
            remote_gbps: 100.0,
            cpu_gbps: 200.0,
        }
    }
}

impl KvTransferModel {
    /// Checks that the bandwidths are usable.
    pub fn validate(&self) -> Result<(), TransferModelError> {
        for (what, gbps) in [
            ("the remote transfer bandwidth", self.remote_gbps),
            ("the CPU transfer bandwidth", self.cpu_gbps),
        ] {
            if !(gbps.is_finite() && gbps > 0.0) {
                return Err(TransferModelError { what, gbps });
            }
        }
        Ok(())
    }

    /// Real time to pull `blocks` blocks from a prefill worker.
    pub fn remote(&self, blocks: usize, block_size: usize) -> Duration {
        self.time(blocks, block_size, self.remote_gbps)
    }

    /// Real time to load `blocks` blocks from the CPU tier.
    pub fn cpu(&self, blocks: usize, block_size: usize) -> Duration {
        self.time(blocks, block_size, self.cpu_gbps)
    }

    fn time(&self, blocks: usize, block_size: usize, gbps: f64) -> Duration {
        if blocks == 0 {
            return Duration::ZERO;
        }
        let bytes = blocks as f64 * block_size as f64 * self.kv_bytes_per_token as f64;
        Duration::try_from_secs_f64(bytes * 8.0 / (gbps * 1e9)).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_bytes_over_bandwidth() {
        let m = KvTransferModel {
            kv_bytes_per_token: 1000,
            remote_gbps: 8.0,
            cpu_gbps: 80.0,
        };
        // 10 blocks × 100 tokens × 1000 bytes = 1 MB; at 1 GB/s, 1 ms.
        assert_eq!(m.remote(10, 100), Duration::from_millis(1));
        assert_eq!(m.cpu(10, 100), Duration::from_micros(100));
        assert_eq!(m.remote(0, 100), Duration::ZERO);
        assert!(m.validate().is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = KvTransferModel { cpu_gbps: bad, ..m }.validate();
            assert!(err.is_err(), "{bad}");
        }
    }
}
