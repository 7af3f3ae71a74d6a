//! The LMCache controller's HTTP answers the router reads (lmcache 0.5.6,
//! docs/lmcache.md cites the lines), and what they mean for our workers.

use std::collections::HashMap;

use protocol::Tier;
use serde::Deserialize;

use crate::config::LmCacheSettings;

/// `POST /lookup {"tokens": [...]}`'s answer
/// (lmcache/v1/api_server/__main__.py:180-198): per instance id, the
/// location of the last chunk it was found holding and the prompt tokens
/// up to that chunk's end.
#[derive(Debug, Deserialize)]
pub struct LookupReply {
    pub layout_info: HashMap<String, (String, u64)>,
}

/// `GET /controller/key-stats`'s answer
/// (lmcache/v1/internal_api_server/controller/key_stats_api.py:12-22).
#[derive(Debug, Deserialize)]
pub struct KeyStats {
    pub instances: Vec<InstanceKeys>,
}

/// One instance's chunk count in [`KeyStats`].
#[derive(Debug, Deserialize)]
pub struct InstanceKeys {
    pub instance_id: String,
    pub key_count: u64,
}

/// A worker's prompt prefix held by its LMCache, as the controller's
/// lookup reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Our worker id (the instance id through the map).
    pub worker_id: String,
    /// Leading prompt tokens held (the end of the last chunk found).
    pub tokens: u64,
    /// The tier of the location: LMCache's copy is never on the engine's
    /// GPU, so a GPU label counts as the CPU tier; an unknown one as disk.
    pub tier: Tier,
    /// The location as LMCache names it (`LocalCPUBackend`, …).
    pub location: String,
}

impl LookupReply {
    /// What each worker holds of a prompt of `prompt_tokens` tokens, by the
    /// instance map; at most the prompt (a reply cannot claim more), an
    /// instance named twice through the map keeps its larger prefix.
    pub fn held(self, settings: &LmCacheSettings, prompt_tokens: u64) -> Vec<Held> {
        let mut held: Vec<Held> = Vec::with_capacity(self.layout_info.len());
        for (instance, (location, tokens)) in self.layout_info {
            let tokens = tokens.min(prompt_tokens);
            if tokens == 0 {
                continue;
            }
            let worker_id = settings.worker_of(&instance).to_owned();
            let tier = match Tier::from_medium(Some(&location)) {
                Tier::Gpu => Tier::Cpu,
                t => t,
            };
            match held.iter_mut().find(|h| h.worker_id == worker_id) {
                Some(h) if h.tokens >= tokens => {}
                Some(h) => {
                    *h = Held {
                        worker_id,
                        tokens,
                        tier,
                        location,
                    }
                }
                None => held.push(Held {
                    worker_id,
                    tokens,
                    tier,
                    location,
                }),
            }
        }
        held.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        held
    }
}

impl KeyStats {
    /// Chunk counts per worker id, by the instance map (instances mapped
    /// to one worker add up).
    pub fn per_worker(self, settings: &LmCacheSettings) -> HashMap<String, u64> {
        let mut counts = HashMap::new();
        for i in self.instances {
            *counts
                .entry(settings.worker_of(&i.instance_id).to_owned())
                .or_insert(0u64) += i.key_count;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LmCacheSettings {
        let mut s = LmCacheSettings::new("http://c:1");
        s.instance_map.insert("vllm-a".into(), "w0".into());
        s.instance_map.insert("vllm-b".into(), "w0".into());
        s
    }

    #[test]
    fn a_lookup_reply_becomes_tiered_prefixes_per_worker() {
        // As the controller of lmcache 0.5.6 answers (recorded from it).
        let body = r#"{"event_id":"Lookup1","layout_info":{
            "w1":["LocalCPUBackend",600],
            "vllm-a":["LocalDiskBackend",256],
            "vllm-b":["LocalCPUBackend",512],
            "w2":["SomethingNew",1000],
            "w3":["GPU",0]}}"#;
        let reply: LookupReply = serde_json::from_str(body).unwrap();
        let held = reply.held(&settings(), 700);
        assert_eq!(
            held,
            vec![
                Held {
                    worker_id: "w0".into(),
                    tokens: 512,
                    tier: Tier::Cpu,
                    location: "LocalCPUBackend".into()
                },
                Held {
                    worker_id: "w1".into(),
                    tokens: 600,
                    tier: Tier::Cpu,
                    location: "LocalCPUBackend".into()
                },
                // Unknown location: the slowest tier; at most the prompt.
                Held {
                    worker_id: "w2".into(),
                    tokens: 700,
                    tier: Tier::Disk,
                    location: "SomethingNew".into()
                },
            ]
        );
    }

    #[test]
    fn malformed_replies_are_errors_not_matches() {
        for bad in [
            r#"{}"#,
            r#"{"layout_info":{"w1":["LocalCPUBackend",-1]}}"#,
            r#"{"layout_info":{"w1":["LocalCPUBackend"]}}"#,
            r#"{"layout_info":[]}"#,
            r#"{"detail":"boom"}"#,
        ] {
            assert!(serde_json::from_str::<LookupReply>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_stats_become_counts_per_worker() {
        let body = r#"{"total_key_count":7,"total_instance_count":3,"total_worker_count":3,
            "instances":[{"instance_id":"vllm-a","key_count":3,"worker_count":1},
                         {"instance_id":"vllm-b","key_count":1,"worker_count":1},
                         {"instance_id":"w1","key_count":3,"worker_count":1}]}"#;
        let stats: KeyStats = serde_json::from_str(body).unwrap();
        let counts = stats.per_worker(&settings());
        assert_eq!(counts["w0"], 4);
        assert_eq!(counts["w1"], 3);
        assert_eq!(counts.len(), 2);
    }
}
