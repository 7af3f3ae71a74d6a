//! Unit tests of `scripts`.

use super::*;
use std::path::Path;

/// Every `.rs` file under `dir`, as text.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// One name per concept: each script is named after the store method
/// that runs it (`probe.lua` is run by `StateStore::probe`), and its
/// header opens with its own file name.
#[test]
fn each_script_is_named_after_the_store_method_that_runs_it() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = Vec::new();
    sources(&crate_dir.join("src"), &mut code);
    for name in ScriptName::ALL {
        let method = format!("async fn {}(", name.stem());
        let runs = format!("ScriptName::{name:?}");
        let named = code.iter().any(|file| {
            // The method, and the script it runs, in one file.
            file.contains(&method) && file.contains(&runs)
        });
        assert!(
            named,
            "{} has no store method `{}` (in the file that runs {runs})",
            name.file(),
            name.stem()
        );
        assert!(
            name.body().starts_with(&format!("-- {}:", name.file())),
            "{}'s header does not open with its name",
            name.file()
        );
    }
}

/// The script list is the directory: every script of `lua/` (the
/// `lib*.lua` helpers aside) is in [`ScriptName::ALL`], once.
#[test]
fn the_script_list_is_the_lua_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".lua") && !f.starts_with("lib"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = ScriptName::ALL
        .iter()
        .map(|n| n.file().to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, on_disk);
}

/// The helpers are the rest of the directory: every `lib*.lua` of `lua/`
/// is in the library's prelude, once, and its header opens with its own
/// file name (a helper file left out would fail only when a script first
/// calls into it).
#[test]
fn every_lua_helper_file_is_in_the_library() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut helpers: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".lua") && f.starts_with("lib"))
        .collect();
    helpers.sort();
    assert!(helpers.len() > 1, "{helpers:?}");
    for file in helpers {
        let text = std::fs::read_to_string(dir.join(&file)).unwrap();
        assert!(
            text.starts_with(&format!("-- {file}:")),
            "{file}'s header does not open with its name"
        );
        assert_eq!(
            PRELUDE.matches(text.as_str()).count(),
            1,
            "{file} is not in the library's prelude once"
        );
    }
}
