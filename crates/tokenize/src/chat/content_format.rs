//! Which content format a chat template expects, decided as vLLM's
//! `renderers/hf.py::_detect_content_format` decides it: the template is
//! "openai" (content as a list of parts) when it loops over a message's
//! `content`, otherwise "string".
//!
//! vLLM walks Jinja2's AST; here the `{% ... %}` tags are scanned and their
//! expressions parsed just enough to follow the same rules: aliases of
//! `messages` (`set`, namespaces), loops over them, loops over
//! `<message>.content` or `<message>['content']` (through filters, tests
//! and slices), over a bare `content` outside macros, and over macro
//! parameters that receive a message's content.

use std::collections::HashSet;

use super::jinja_scan::{Node, Tok, call_args, lex, parse_expr, scan_tags};
use super::messages::ContentFormat;

/// Detects the content format of `template` (`String` when unsure, as vLLM).
pub fn detect(template: &str) -> ContentFormat {
    let tags = scan_tags(template);
    let mut loops = Vec::new();
    let mut assigns: Vec<(String, Node)> = Vec::new();
    let mut macros: Vec<(String, Vec<String>, usize)> = Vec::new();
    let mut macro_stack: Vec<usize> = Vec::new();
    let mut all_tokens = Vec::new();
    for (is_block, text) in &tags {
        let toks = lex(text);
        if *is_block {
            match toks.first() {
                Some(Tok::Name(k)) if k == "for" => {
                    if let Some(l) = parse_for(&toks[1..], macro_stack.last().copied()) {
                        loops.push(l);
                    }
                }
                Some(Tok::Name(k)) if k == "set" => assigns.extend(parse_set(&toks[1..])),
                Some(Tok::Name(k)) if k == "macro" => {
                    if let (Some(Tok::Name(name)), Some(Tok::Punct('('))) =
                        (toks.get(1), toks.get(2))
                    {
                        let params = call_args(&toks, 2).into_iter().filter_map(|(kw, node)| {
                            kw.or(match node {
                                Node::Name(n) => Some(n),
                                _ => None,
                            })
                        });
                        macros.push((name.clone(), params.collect(), macros.len()));
                        macro_stack.push(macros.len() - 1);
                    }
                }
                Some(Tok::Name(k)) if k == "endmacro" => {
                    macro_stack.pop();
                }
                _ => {}
            }
        }
        all_tokens.push(toks);
    }

    // Names bound to `messages` or parts of it (vLLM's BFS over assignments).
    let mut message_lists = vec!["messages".to_owned()];
    let mut seen: HashSet<String> = message_lists.iter().cloned().collect();
    let mut queue = message_lists.clone();
    while let Some(var) = queue.pop() {
        for (lhs, rhs) in &assigns {
            let hit = match rhs {
                Node::Namespace(kwargs) => kwargs
                    .iter()
                    .filter(|(_, v)| is_var_or_elems(v, &var, None))
                    .map(|(k, _)| format!("{lhs}.{k}"))
                    .collect(),
                rhs if is_var_or_elems(rhs, &var, None) => vec![lhs.clone()],
                _ => Vec::new(),
            };
            for name in hit {
                message_lists.push(name.clone());
                if seen.insert(name.clone()) {
                    queue.push(name);
                }
            }
        }
    }
    let mut message_vars = Vec::new();
    for l in &loops {
        if message_lists
            .iter()
            .any(|v| is_var_or_elems(&l.iter, v, None))
        {
            match &l.target {
                Some(t) => message_vars.push(t.clone()),
                None => return ContentFormat::String, // vLLM's assertion fails → default
            }
        }
    }

    // Macro parameters that receive `<message>.content`.
    let mut content_params: Vec<(usize, String)> = Vec::new();
    for (name, params, id) in &macros {
        for toks in &all_tokens {
            for (k, tok) in toks.iter().enumerate() {
                let is_call = matches!(tok, Tok::Name(n) if n == name)
                    && toks.get(k + 1) == Some(&Tok::Punct('('))
                    && (k == 0 || toks[k - 1] != Tok::Punct('.'));
                if !is_call {
                    continue;
                }
                for (pos, (kw, arg)) in call_args(toks, k + 1).into_iter().enumerate() {
                    if !message_vars
                        .iter()
                        .any(|m| is_var_or_elems(&arg, m, Some("content")))
                    {
                        continue;
                    }
                    match kw {
                        Some(kw) if params.contains(&kw) => content_params.push((*id, kw)),
                        None if pos < params.len() => {
                            content_params.push((*id, params[pos].clone()))
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    for l in &loops {
        let over_content = message_vars
            .iter()
            .any(|m| is_var_or_elems(&l.iter, m, Some("content")))
            || match (&l.iter, l.in_macro) {
                (Node::Name(n), Some(id)) => content_params.iter().any(|(m, p)| *m == id && p == n),
                (Node::Name(n), None) => n == "content",
                _ => false,
            };
        if over_content {
            // vLLM asserts a single loop target; a failed assertion → default.
            return if l.target.is_some() {
                ContentFormat::OpenAi
            } else {
                ContentFormat::String
            };
        }
    }
    ContentFormat::String
}

struct Loop {
    target: Option<String>,
    iter: Node,
    in_macro: Option<usize>,
}

fn is_var(node: &Node, var: &str) -> bool {
    match node {
        Node::Name(n) => n == var,
        Node::Getattr(base, attr) => match var.rsplit_once('.') {
            Some((b, a)) => a == attr && is_var(base, b),
            None => false,
        },
        _ => false,
    }
}

fn is_var_or_elems(node: &Node, var: &str, key: Option<&str>) -> bool {
    match node {
        Node::Filter(inner) | Node::Test(inner) | Node::Slice(inner) => {
            is_var_or_elems(inner, var, key)
        }
        _ => match key {
            None => is_var(node, var),
            Some(key) => match node {
                Node::Getattr(base, attr) | Node::Getitem(base, attr) => {
                    attr == key && is_var(base, var)
                }
                _ => false,
            },
        },
    }
}

fn parse_for(toks: &[Tok], in_macro: Option<usize>) -> Option<Loop> {
    let in_at = toks.iter().position(|t| *t == Tok::Name("in".into()))?;
    let target = match &toks[..in_at] {
        [Tok::Name(n)] => Some(n.clone()),
        _ => None,
    };
    let mut end = toks.len();
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(in_at + 1) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => depth -= 1,
            Tok::Name(n) if depth == 0 && (n == "if" || n == "recursive") => {
                end = k;
                break;
            }
            _ => {}
        }
    }
    Some(Loop {
        target,
        iter: parse_expr(&toks[in_at + 1..end]),
        in_macro,
    })
}

fn parse_set(toks: &[Tok]) -> Option<(String, Node)> {
    let eq = toks.iter().position(|t| *t == Tok::Punct('='))?;
    let lhs = match &toks[..eq] {
        [Tok::Name(n)] => n.clone(),
        [Tok::Name(a), Tok::Punct('.'), Tok::Name(b)] => format!("{a}.{b}"),
        _ => return None,
    };
    let rhs = &toks[eq + 1..];
    if let (Some(Tok::Name(f)), Some(Tok::Punct('('))) = (rhs.first(), rhs.get(1))
        && f == "namespace"
    {
        let kwargs = call_args(rhs, 1)
            .into_iter()
            .filter_map(|(k, v)| Some((k?, v)))
            .collect();
        return Some((lhs, Node::Namespace(kwargs)));
    }
    Some((lhs, parse_expr(rhs)))
}

#[cfg(test)]
#[path = "content_format_tests.rs"]
mod tests;
