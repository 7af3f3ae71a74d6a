//! [`Tier`]: the best medium a worker holds a KV block on (issue 14,
//! "Tiers"): GPU memory, CPU memory (vLLM's offloading connector, LMCache's
//! local CPU backend) or anything slower (LMCache's disk and remote tiers).
//!
//! vLLM labels its KV events with a `medium` string (absent on a GPU
//! event); engines and connectors spell it differently. Every label maps to
//! a tier, none is refused: a label this build does not know is taken as
//! the slowest tier, [`Tier::Disk`], so that a new connector's blocks count
//! as a cheap hit rather than as a full one or as none.

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

    /// The tier of a KV event's `medium`: absent, `GPU`, `cuda` (any case)
    /// are the GPU; `CPU`, `cpu_pinned`, `host` (any case, and labels
    /// starting with them) the CPU; anything else, disk.
    pub fn from_medium(medium: Option<&str>) -> Tier {
        let Some(m) = medium else { return Tier::Gpu };
        let m = m.trim().to_ascii_lowercase();
        if m.is_empty() || m == "gpu" || m.starts_with("cuda") || m.starts_with("gpu") {
            Tier::Gpu
        } else if m.starts_with("cpu") || m.starts_with("host") {
            Tier::Cpu
        } else {
            Tier::Disk
        }
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
    /// Any string, by [`Tier::from_medium`] (an engine's label is as good as
    /// a tier name); a value of another JSON type is an error.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(Tier::from_medium(Some(&s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_has_a_tier() {
        for (label, tier) in [
            (None, Tier::Gpu),
            (Some("GPU"), Tier::Gpu),
            (Some("gpu"), Tier::Gpu),
            (Some("cuda:0"), Tier::Gpu),
            (Some(""), Tier::Gpu),
            (Some("CPU"), Tier::Cpu),
            (Some("cpu_pinned"), Tier::Cpu),
            (Some("Host"), Tier::Cpu),
            (Some("disk"), Tier::Disk),
            (Some("LocalDiskBackend"), Tier::Disk),
            (Some("nvme"), Tier::Disk),
        ] {
            assert_eq!(Tier::from_medium(label), tier, "{label:?}");
        }
        for t in Tier::ALL {
            assert_eq!(Tier::from_entry_kind(t.entry_kind()), Some(t));
            assert_eq!(Tier::from_medium(Some(t.as_str())), t);
        }
        assert_eq!(Tier::from_entry_kind('s'), None);
        assert!(Tier::Gpu < Tier::Cpu && Tier::Cpu < Tier::Disk);
    }

    #[test]
    fn json_takes_any_string_and_refuses_other_types() {
        let t: Tier = serde_json::from_str(r#""LMCache-disk""#).unwrap();
        assert_eq!(t, Tier::Disk);
        assert_eq!(serde_json::to_string(&Tier::Cpu).unwrap(), r#""cpu""#);
        assert!(serde_json::from_str::<Tier>("3").is_err());
        assert!(serde_json::from_str::<Tier>("null").is_err());
    }
}
