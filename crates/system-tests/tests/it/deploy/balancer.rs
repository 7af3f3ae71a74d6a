//! `deploy/haproxy.cfg` against the compose topology: a TCP balancer
//! that finds the routers through Docker's DNS, and workers that report
//! through it.

use super::*;

/// The simulated workers: services whose entrypoint is `sim-worker`.
fn sim_workers(c: &Value) -> Vec<(&String, &Value)> {
    services(c)
        .iter()
        .filter(|(_, s)| words(&s["entrypoint"]).first().map(String::as_str) == Some("sim-worker"))
        .collect()
}

// ---------------------------------------------------------------------------
// deploy/haproxy.cfg

#[derive(Debug)]
struct Section {
    kind: String,
    name: String,
    lines: Vec<Vec<String>>,
}

impl Section {
    fn directives(&self, name: &str) -> Vec<&Vec<String>> {
        self.lines.iter().filter(|l| l[0] == name).collect()
    }
}

/// Sections (an unindented keyword line, then its indented directives),
/// comments dropped, words split on blanks.
fn haproxy_sections() -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for raw in read("deploy/haproxy.cfg").lines() {
        let line = raw.split('#').next().unwrap();
        let ws: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if ws.is_empty() {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            sections
                .last_mut()
                .expect("a directive before any section")
                .lines
                .push(ws);
        } else {
            sections.push(Section {
                kind: ws[0].clone(),
                name: ws.get(1).cloned().unwrap_or_default(),
                lines: Vec::new(),
            });
        }
    }
    sections
}

fn section<'a>(all: &'a [Section], kind: &str, name: &str) -> &'a Section {
    all.iter()
        .find(|s| s.kind == kind && s.name == name)
        .unwrap_or_else(|| panic!("haproxy.cfg has no `{kind} {name}`"))
}

fn bind_port(s: &Section) -> u16 {
    let binds = s.directives("bind");
    assert_eq!(binds.len(), 1, "`{} {}`: one bind", s.kind, s.name);
    binds[0][1]
        .rsplit_once(':')
        .expect("bind ADDR:PORT")
        .1
        .parse()
        .expect("bind port")
}

#[test]
fn the_balancer_is_tcp_and_finds_the_router_replicas_through_docker_dns() {
    let c = compose();
    let b = service(&c, "balancer");
    assert_eq!(b["image"], "haproxy:2.8");
    let cfg_mount = mounts(b)
        .into_iter()
        .find(|m| m.target == "/usr/local/etc/haproxy/haproxy.cfg")
        .expect("balancer: haproxy.cfg mounted at the image's default path");
    assert_eq!(
        cfg_mount.source.trim_start_matches("./"),
        "deploy/haproxy.cfg"
    );
    assert!(depends_on(b).contains("router"));

    let cfg = haproxy_sections();
    let defaults = section(&cfg, "defaults", "");
    assert!(
        defaults.lines.iter().any(|l| l == &["mode", "tcp"]),
        "defaults: mode tcp"
    );
    // Every proxy but the stats page stays in TCP mode.
    for s in cfg
        .iter()
        .filter(|s| s.kind != "listen" || s.name != "stats")
    {
        for m in s.directives("mode") {
            assert_eq!(m[1], "tcp", "`{} {}` is not TCP", s.kind, s.name);
        }
    }
    let frontends: Vec<&Section> = cfg.iter().filter(|s| s.kind == "frontend").collect();
    assert_eq!(frontends.len(), 1, "one frontend");
    let fe = frontends[0];
    let fe_port = bind_port(fe);
    let ports = published(b);
    assert!(
        ports
            .iter()
            .any(|(ip, _, container)| container == &fe_port.to_string() && ip == "127.0.0.1"),
        "the frontend port {fe_port} is published on 127.0.0.1: {ports:?}"
    );
    for (ip, _, _) in &ports {
        assert_eq!(
            ip, "127.0.0.1",
            "balancer ports are published on loopback only"
        );
    }
    let backend_name = &fe.directives("default_backend")[0][1];
    let be = section(&cfg, "backend", backend_name);
    let templates = be.directives("server-template");
    assert_eq!(
        templates.len(),
        1,
        "backend {backend_name}: one server-template"
    );
    let t = templates[0];
    let (host, port) = t[3].rsplit_once(':').expect("server-template ADDR:PORT");
    assert_eq!(host, "router", "the template resolves the `router` service");
    assert_eq!(port.parse::<u16>().unwrap(), router_port(&c));
    let count = t[2].rsplit('-').next().unwrap().parse::<u32>().unwrap();
    assert!(count >= 8, "room for at least 8 routers, got {count}");
    let opts = |l: &Vec<String>| l.iter().skip(1).cloned().collect::<Vec<_>>();
    let mut server_opts = opts(t);
    for d in be.directives("default-server") {
        server_opts.extend(opts(d));
    }
    assert!(
        server_opts.contains(&"check".to_owned()),
        "routers are health-checked"
    );
    let resolver = server_opts
        .windows(2)
        .find(|w| w[0] == "resolvers")
        .map(|w| w[1].clone())
        .expect("server-template uses a resolvers section");
    for s in [be, defaults] {
        assert!(
            s.directives("option").iter().all(|o| o[1] != "httpchk"),
            "TCP health checks, not HTTP ones"
        );
    }
    let res = section(&cfg, "resolvers", &resolver);
    assert!(
        res.directives("nameserver")
            .iter()
            .any(|n| n[2] == "127.0.0.11:53"),
        "resolvers {resolver}: Docker's DNS at 127.0.0.11:53"
    );
    // fleet.sh swaps the docker-only block and the template for static
    // servers: the markers must be there, around the resolvers section.
    let text = read("deploy/haproxy.cfg");
    let begin = text
        .find("# --- docker-only begin ---")
        .expect("begin marker");
    let end = text.find("# --- docker-only end ---").expect("end marker");
    let resolvers_at = text.find("\nresolvers ").expect("resolvers section");
    assert!(begin < resolvers_at && resolvers_at < end);
}

#[test]
fn workers_are_reachable_and_report_through_the_balancer() {
    let c = compose();
    let workers = sim_workers(&c);
    assert!(
        workers.len() >= 2,
        "a fleet has several workers: {}",
        workers.len()
    );
    let fe_port = bind_port(
        haproxy_sections()
            .iter()
            .find(|s| s.kind == "frontend")
            .unwrap(),
    );
    let router = service(&c, "router");
    let model = env(router)["PREFIX_ROUTER_MODEL"].clone();
    let mut ids = BTreeSet::new();
    for (name, w) in workers {
        let args = words(&w["command"]);
        let get = |f: &str| flag(&args, f).unwrap_or_else(|| panic!("{name}: no {f}: {args:?}"));
        assert_eq!(
            get("--fleet-url"),
            format!("http://balancer:{fe_port}"),
            "{name} reports through the balancer"
        );
        assert_eq!(
            get("--host"),
            "0.0.0.0",
            "{name} must be reachable by the routers"
        );
        let port: u16 = get("--port").parse().expect("--port");
        assert_eq!(
            get("--advertise-url"),
            format!("http://{name}:{port}"),
            "{name} advertises its service name and port"
        );
        assert_eq!(get("--model"), model, "{name} serves the routers' model");
        let tok = get("--tokenizer-dir");
        assert!(
            mounts(w)
                .iter()
                .any(|m| m.target == tok && m.kind == "bind"),
            "{name}: tokenizer {tok} not mounted"
        );
        assert!(
            ids.insert(get("--worker-id").to_owned()),
            "{name}: duplicate worker id"
        );
        assert!(
            env_files(w)
                .iter()
                .any(|f| f.trim_start_matches("./") == ".env"),
            "{name}: the token comes from env_file .env"
        );
        assert_eq!(
            w["image"], router["image"],
            "{name} runs the router's image"
        );
        assert!(w.get("build").is_some(), "{name}: the image is built here");
        assert!(
            depends_on(w).contains("balancer"),
            "{name} depends on the balancer"
        );
        assert!(w.get("container_name").is_none());
    }
}
