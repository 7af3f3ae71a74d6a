//! [`Tier`]: the best medium a worker holds a KV block on (issue 14,
//! "Tiers"): GPU memory, CPU memory (vLLM's offloading connector, LMCache's
//! local CPU backend) or anything slower (LMCache's disk and remote tiers).
//!
//! vLLM labels its KV events with a `medium` string (absent on a GPU
//! event); engines and connectors spell it differently. One rule,
//! [`Tier::from_label`], reads every label, in the push API (`medium` of
//! `/internal/stored`, `tiers` of `/internal/sync`) and in the reporter's
//! KV events alike, in any case and with surrounding spaces ignored:
//!
//! * GPU: absent or empty, `gpu…` (vLLM's `GPU`), `cuda…` (`cuda:0`);
//! * CPU: the tier name `cpu`, any label containing `cpu` (vLLM's
//!   offloading connector's `CPU`, `cpu_pinned`, LMCache's
//!   `LocalCPUBackend`), or starting with `host`;
//! * disk: the tier name `disk`, any label containing `disk` (LMCache's
//!   `LocalDiskBackend`), or starting with `nvme`, `ssd`, `gds` or
//!   `remote` (LMCache's remote backends: slower than the host's memory).
//!
//! Anything else is no tier: the push API refuses it (a 400 naming the
//! label), and the reporter, which must not stop on a connector newer than
//! this build, takes it as the slowest tier, [`Tier::Disk`]
//! ([`Tier::from_medium`]), so that its blocks count as a cheap hit rather
//! than as a full one or as none.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A block's best medium on a worker, fastest first (`Gpu < Cpu < Disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Tier {
    /// In the engine's GPU KV cache: a hit costs nothing.
    #[default]
    Gpu,
    /// Offloaded to host memory: a hit is a load over PCIe.
    Cpu,
    /// On disk or another slower store: a hit is a slower load.
    Disk,
}

impl Tier {
    /// Every tier, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Gpu, Tier::Cpu, Tier::Disk];

    /// The tier a label names by the module's rule; `None` for a label
    /// the rule does not know.
    pub fn from_label(label: &str) -> Option<Tier> {
        let m = label.trim().to_ascii_lowercase();
        if m.is_empty() || m.starts_with("gpu") || m.starts_with("cuda") {
            Some(Tier::Gpu)
        } else if m.contains("cpu") || m.starts_with("host") {
            Some(Tier::Cpu)
        } else if m.contains("disk")
            || ["nvme", "ssd", "gds", "remote"]
                .iter()
                .any(|p| m.starts_with(p))
        {
            Some(Tier::Disk)
        } else {
            None
        }
    }

    /// The tier of a KV event's `medium` as the reporter takes it: absent
    /// is the GPU, a label by [`from_label`](Self::from_label), and a label
    /// the rule does not know the slowest tier, disk.
    pub fn from_medium(medium: Option<&str>) -> Tier {
        medium.map_or(Tier::Gpu, |m| Tier::from_label(m).unwrap_or(Tier::Disk))
    }

    /// The wire name: `gpu`, `cpu` or `disk`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Gpu => "gpu",
            Tier::Cpu => "cpu",
            Tier::Disk => "disk",
        }
    }

    /// The kind of a confirmed index entry on this tier (docs/state.md):
    /// `c` (GPU, the kind every entry had before tiers), `h` (host), `d`.
    pub fn entry_kind(self) -> char {
        match self {
            Tier::Gpu => 'c',
            Tier::Cpu => 'h',
            Tier::Disk => 'd',
        }
    }

    /// The tier of a confirmed entry kind; None for `s` and anything else.
    pub fn from_entry_kind(kind: char) -> Option<Tier> {
        match kind {
            'c' => Some(Tier::Gpu),
            'h' => Some(Tier::Cpu),
            'd' => Some(Tier::Disk),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Tier {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Tier {
    /// A label by [`Tier::from_label`] (an engine's label is as good as a
    /// tier name); a label the rule does not know, or a value of another
    /// JSON type, is an error.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Tier::from_label(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown tier {s:?}: gpu, cpu, disk or an engine's medium label (GPU, CPU, cpu_pinned, LocalCPUBackend, LocalDiskBackend, …)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_reads_tier_names_and_engine_labels() {
        for (label, tier) in [
            ("GPU", Some(Tier::Gpu)),
            ("gpu", Some(Tier::Gpu)),
            ("cuda:0", Some(Tier::Gpu)),
            ("", Some(Tier::Gpu)),
            (" CPU ", Some(Tier::Cpu)),
            ("cpu_pinned", Some(Tier::Cpu)),
            ("Host", Some(Tier::Cpu)),
            ("LocalCPUBackend", Some(Tier::Cpu)),
            ("disk", Some(Tier::Disk)),
            ("LocalDiskBackend", Some(Tier::Disk)),
            ("LMCache-disk", Some(Tier::Disk)),
            ("nvme0", Some(Tier::Disk)),
            ("RemoteBackend", Some(Tier::Disk)),
            ("weird", None),
            ("lmcache", None),
            ("tpu", None),
        ] {
            assert_eq!(Tier::from_label(label), tier, "{label:?}");
            // The reporter: the same rule, an unknown label as disk.
            assert_eq!(
                Tier::from_medium(Some(label)),
                tier.unwrap_or(Tier::Disk),
                "{label:?}"
            );
        }
        assert_eq!(Tier::from_medium(None), Tier::Gpu);
        for t in Tier::ALL {
            assert_eq!(Tier::from_entry_kind(t.entry_kind()), Some(t));
            assert_eq!(Tier::from_label(t.as_str()), Some(t));
        }
        assert_eq!(Tier::from_entry_kind('s'), None);
        assert!(Tier::Gpu < Tier::Cpu && Tier::Cpu < Tier::Disk);
    }

    #[test]
    fn json_takes_known_labels_and_refuses_the_rest() {
        let t: Tier = serde_json::from_str(r#""LMCache-disk""#).unwrap();
        assert_eq!(t, Tier::Disk);
        assert_eq!(serde_json::to_string(&Tier::Cpu).unwrap(), r#""cpu""#);
        let e = serde_json::from_str::<Tier>(r#""weird""#).unwrap_err();
        assert!(e.to_string().contains("unknown tier \"weird\""), "{e}");
        assert!(serde_json::from_str::<Tier>("3").is_err());
        assert!(serde_json::from_str::<Tier>("null").is_err());
    }
}
