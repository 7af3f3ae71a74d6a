//! The `Dockerfile`: both binaries in a slim non-root image, and the
//! packages it selects read as cargo reads them.

use super::*;

fn cargo_toml() -> toml::Value {
    toml::from_str(&read("Cargo.toml")).expect("Cargo.toml")
}

/// Every binary of the workspace, with the package it belongs to: the
/// `[[bin]]` entries of each member, and its `src/main.rs` when no entry
/// names it (Cargo's implicit binary).
fn workspace_bins() -> BTreeMap<String, String> {
    let manifest = cargo_toml();
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("members");
    let mut bins = BTreeMap::new();
    for m in members {
        let member = m.as_str().expect("member path");
        let toml: toml::Value =
            toml::from_str(&read(&format!("{member}/Cargo.toml"))).expect("member Cargo.toml");
        let package = toml["package"]["name"]
            .as_str()
            .expect("package name")
            .to_owned();
        let mut main_named = false;
        for b in toml
            .get("bin")
            .and_then(|b| b.as_array())
            .into_iter()
            .flatten()
        {
            main_named |= b.get("path").and_then(|p| p.as_str()) == Some("src/main.rs");
            bins.insert(
                b["name"].as_str().expect("bin name").to_owned(),
                package.clone(),
            );
        }
        let autobins = toml["package"]
            .get("autobins")
            .and_then(|a| a.as_bool())
            .unwrap_or(true);
        if !main_named && autobins && root().join(member).join("src/main.rs").is_file() {
            bins.insert(package.clone(), package);
        }
    }
    bins
}

/// The packages a `cargo build` command line selects with `-p`/`--package`,
/// or `None` when it names none (or says `--workspace`): then every member
/// is a candidate and `--bin` alone picks the binaries.
fn selected_packages(cmd: &str) -> Option<BTreeSet<String>> {
    // Only the `cargo build` itself: `mkdir -p` after `&&` selects nothing.
    let from = cmd.find("cargo build").expect("a cargo build command");
    let words: Vec<&str> = cmd[from..]
        .split_whitespace()
        .take_while(|w| !matches!(*w, "&&" | "||" | ";" | "|"))
        .collect();
    let mut packages = BTreeSet::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "--workspace" || *w == "--all" {
            return None;
        }
        if *w == "-p" || *w == "--package" {
            packages.insert(words.get(i + 1).expect("a package after -p").to_string());
        } else if let Some(p) = w.strip_prefix("--package=") {
            packages.insert(p.to_owned());
        } else if let Some(p) = w.strip_prefix("-p").filter(|p| !p.is_empty()) {
            packages.insert(p.to_owned());
        }
    }
    (!packages.is_empty()).then_some(packages)
}

#[test]
fn the_dockerfile_builds_both_binaries_into_a_slim_non_root_image() {
    let stages = dockerfile();
    assert!(stages.len() >= 2, "multi-stage build");
    let builder = &stages[0];
    let rust_version = cargo_toml()["workspace"]["package"]["rust-version"]
        .as_str()
        .expect("rust-version")
        .to_owned();
    assert_eq!(
        builder.image,
        format!("rust:{rust_version}-bookworm"),
        "the builder uses the crate's rust-version"
    );
    let builder_name = builder.name.clone().expect("the builder stage is named");
    let build = instructions(builder, "RUN")
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .expect("the builder runs cargo build");
    assert!(
        build.contains("--release") && build.contains("--locked"),
        "{build}"
    );
    // Each binary exists, is asked for, and belongs to a package the line
    // selects: `-p prefix-router --bin sim-worker` fails in the workspace.
    let bins = workspace_bins();
    let packages = selected_packages(build);
    for bin in ["prefix-router", "sim-worker"] {
        let package = bins
            .get(bin)
            .unwrap_or_else(|| panic!("the workspace has no bin {bin}"));
        assert!(
            build.contains(&format!("--bin {bin} ")) || build.ends_with(&format!("--bin {bin}")),
            "{bin} is not built: {build}"
        );
        if let Some(selected) = &packages {
            assert!(
                selected.contains(package),
                "{bin} is in package {package}, which the build does not select: {build}"
            );
        }
    }

    let runtime = stages.last().unwrap();
    assert_eq!(runtime.image, "debian:bookworm-slim");
    assert!(
        instructions(runtime, "RUN")
            .iter()
            .any(|r| r.contains("apt-get install") && r.contains("ca-certificates")),
        "the runtime trusts the system CA store (rediss://)"
    );
    let copies: Vec<&str> = instructions(runtime, "COPY")
        .into_iter()
        .filter(|c| c.contains(&format!("--from={builder_name}")))
        .collect();
    for bin in ["prefix-router", "sim-worker"] {
        assert!(
            copies
                .iter()
                .any(|c| c.contains(&format!("/{bin} ")) || c.contains(&format!("/{bin}\t"))),
            "{bin} is not copied into the runtime: {copies:?}"
        );
    }
    let user = instructions(runtime, "USER");
    let user = user.last().expect("the runtime sets a USER");
    let name = user.split(':').next().unwrap();
    assert!(name != "root" && name != "0", "the runtime runs as root");
    assert_eq!(
        instructions(runtime, "ENTRYPOINT"),
        [r#"["prefix-router"]"#]
    );
    assert_eq!(instructions(runtime, "CMD"), [r#"["serve"]"#]);
    let c = compose();
    let port = router_port(&c).to_string();
    assert!(
        instructions(runtime, "EXPOSE").iter().any(|e| e
            .split_whitespace()
            .any(|p| p.trim_end_matches("/tcp") == port)),
        "EXPOSE {port}"
    );
    // The context leaves out build outputs and secrets.
    let ignore = read(".dockerignore");
    for must in ["target", ".git", ".env"] {
        assert!(
            ignore.lines().any(|l| l.trim() == must),
            ".dockerignore lacks {must}"
        );
    }
}

#[test]
fn package_selection_is_read_as_cargo_reads_it() {
    let set = |ps: &[&str]| Some(ps.iter().map(|p| p.to_string()).collect::<BTreeSet<_>>());
    assert_eq!(
        selected_packages("cargo build --release --bin a --bin b && mkdir -p /out"),
        None
    );
    assert_eq!(
        selected_packages("cargo build -p x --workspace --bin a"),
        None
    );
    assert_eq!(
        selected_packages("cargo build -p x --package y --package=z -pw --bin a && mkdir -p o"),
        set(&["w", "x", "y", "z"])
    );
}
