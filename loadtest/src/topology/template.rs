//! Filling in a peer's command template: the placeholders of
//! [`ExternalRouter`](super::ExternalRouter) from a replica's
//! [`LaunchContext`].

use super::kind::LaunchContext;

/// `args` with every placeholder of [`ExternalRouter`] filled in from `ctx`.
pub fn fill(args: &[String], ctx: &LaunchContext) -> Vec<String> {
    let host = &ctx.host;
    let csv = ctx.worker_urls.join(",");
    let join =
        |f: &dyn Fn(&(u16, u16)) -> String| ctx.peers.iter().map(f).collect::<Vec<_>>().join(",");
    let mesh_tcp = join(&|(_, m)| format!("tcp://{host}:{m}"));
    let aux_http = join(&|(a, _)| format!("http://{host}:{a}"));
    let workers_kv = || ctx.worker_urls.iter().zip(&ctx.kv_events);
    let mut out = Vec::new();
    for a in args {
        match a.as_str() {
            "{worker_urls}" => out.extend(ctx.worker_urls.iter().cloned()),
            "{mesh_peers}" => out.extend(ctx.peers.iter().map(|(_, m)| format!("{host}:{m}"))),
            "{kv_event_sources}" => {
                for (url, kv) in workers_kv() {
                    out.extend([
                        "--kv-event-source".into(),
                        format!("{url}={}", kv.publisher),
                    ]);
                }
            }
            "{kv_event_replay_sources}" => {
                for (url, kv) in workers_kv() {
                    out.extend([
                        "--kv-event-replay-source".into(),
                        format!("{url}={}", kv.replay),
                    ]);
                }
            }
            "{worker_kv_specs}" => out.extend(
                workers_kv().map(|(url, kv)| format!("{url}={},{}", kv.publisher, kv.replay)),
            ),
            _ => out.push(
                a.replace("{host}", host)
                    .replace("{port}", &ctx.port.to_string())
                    .replace("{aux_port}", &ctx.aux_port.to_string())
                    .replace("{mesh_port}", &ctx.mesh_port.to_string())
                    .replace("{index}", &ctx.index.to_string())
                    .replace("{model}", &ctx.model)
                    .replace("{tokenizer_dir}", &ctx.tokenizer_dir.display().to_string())
                    .replace("{valkey_url}", &ctx.valkey_url)
                    .replace("{worker_urls_csv}", &csv)
                    .replace("{mesh_peers_tcp_csv}", &mesh_tcp)
                    .replace("{aux_peers_http_csv}", &aux_http),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::kind::tests::ctx;

    #[test]
    fn kv_and_mesh_placeholders_expand() {
        let args: Vec<String> = [
            "{kv_event_sources}",
            "{kv_event_replay_sources}",
            "--mesh-port",
            "{mesh_port}",
            "--peers",
            "{mesh_peers}",
            "--sync",
            "{mesh_peers_tcp_csv}",
            "--idx",
            "{aux_peers_http_csv}",
            "{worker_kv_specs}",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            fill(&args, &ctx()).join(" "),
            "--kv-event-source http://a:1=tcp://127.0.0.1:11 \
             --kv-event-source http://b:2=tcp://127.0.0.1:21 \
             --kv-event-replay-source http://a:1=tcp://127.0.0.1:12 \
             --kv-event-replay-source http://b:2=tcp://127.0.0.1:22 \
             --mesh-port 9200 --peers 127.0.0.1:9201 127.0.0.1:9202 \
             --sync tcp://127.0.0.1:9201,tcp://127.0.0.1:9202 \
             --idx http://127.0.0.1:9101,http://127.0.0.1:9102 \
             http://a:1=tcp://127.0.0.1:11,tcp://127.0.0.1:12 \
             http://b:2=tcp://127.0.0.1:21,tcp://127.0.0.1:22"
        );
    }
}
