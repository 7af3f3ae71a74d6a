//! No secret in the compose file, the image or git.

use super::*;

#[test]
fn no_secret_is_in_the_compose_file_the_image_or_git() {
    let c = compose();
    // A variable named like a secret: a word TOKEN, PASSWORD, … in its name.
    let secretish = |k: &str| {
        let k = k.to_ascii_uppercase();
        k.ends_with("API_KEY")
            || k.split('_').any(|w| {
                [
                    "TOKEN",
                    "PASSWORD",
                    "PASSWD",
                    "PASS",
                    "SECRET",
                    "CREDENTIALS",
                ]
                .contains(&w)
            })
    };
    assert!(secretish("PREFIX_ROUTER_INTERNAL_TOKEN") && !secretish("PREFIX_ROUTER_TOKENIZER_DIR"));
    for (name, s) in services(&c) {
        for (k, v) in env(s) {
            assert!(
                !secretish(&k),
                "{name}: {k}={v} in the compose file; use .env"
            );
        }
        for field in ["command", "entrypoint"] {
            let ws = words(&s[field]);
            assert!(
                !ws.iter().any(|w| w.starts_with("--internal-token")),
                "{name}: the token on a command line"
            );
        }
        if let Some(args) = s["build"].get("args") {
            panic!("{name}: build args {args} (nothing is baked into the image)");
        }
    }
    fn no_credentials(v: &Value) {
        match v {
            Value::String(s) => {
                if let Some((_, rest)) = s.split_once("://") {
                    let authority = rest.split('/').next().unwrap();
                    assert!(!authority.contains('@'), "credentials in a URL: {s}");
                }
            }
            Value::Array(a) => a.iter().for_each(no_credentials),
            Value::Object(m) => m.values().for_each(no_credentials),
            _ => {}
        }
    }
    no_credentials(&c);

    // .env is the operator's: ignored by git and by docker build.
    let lines = |f: &str| -> Vec<String> { read(f).lines().map(|l| l.trim().to_owned()).collect() };
    assert!(
        lines(".gitignore")
            .iter()
            .any(|l| l == ".env" || l == "/.env"),
        ".env is not git-ignored"
    );
    assert!(
        lines(".dockerignore").iter().any(|l| l == ".env"),
        ".env is not in .dockerignore"
    );
    // The example names the token and holds no value for it.
    let example = read(".env.example");
    let vars: BTreeMap<&str, &str> = example
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('=').expect("KEY=VALUE"))
        .collect();
    assert_eq!(
        vars.get("PREFIX_ROUTER_INTERNAL_TOKEN"),
        Some(&""),
        ".env.example declares PREFIX_ROUTER_INTERNAL_TOKEN, empty"
    );
    for (k, v) in &vars {
        assert!(
            !secretish(k) || v.is_empty(),
            ".env.example: a value for {k}"
        );
    }
    // Nothing secret in the image: no such ENV/ARG, no .env copied.
    for stage in dockerfile() {
        for (kw, rest) in &stage.instructions {
            if kw == "ENV" || kw == "ARG" {
                for name in rest
                    .split_whitespace()
                    .map(|w| w.split('=').next().unwrap())
                {
                    assert!(!secretish(name), "Dockerfile: {kw} {rest}");
                }
            }
            if kw == "COPY" || kw == "ADD" {
                assert!(!rest.contains(".env"), "Dockerfile: {kw} {rest}");
            }
        }
    }
}
