//! Just enough of Jinja's syntax to read a template's tags: the tag
//! bodies, their tokens, and simple expressions (names, attributes,
//! subscripts, filters, tests). Used to detect the content format.

/// A parsed expression, reduced to what the rules look at.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A variable.
    Name(String),
    /// A string literal.
    Const(String),
    /// `node.attr`.
    Getattr(Box<Node>, String),
    /// `node['key']`: subscript by a string constant.
    Getitem(Box<Node>, String),
    /// `node[a:b]`.
    Slice(Box<Node>),
    /// `node | filter(...)`.
    Filter(Box<Node>),
    /// `node is test`.
    Test(Box<Node>),
    /// `namespace(key=value, ...)` (only as the right side of `set`).
    Namespace(Vec<(String, Node)>),
    /// Anything else (no rule looks inside).
    Other,
}

/// Arguments of the call whose `(` is at `open`: `(keyword, value)` pairs.
pub fn call_args(toks: &[Tok], open: usize) -> Vec<(Option<String>, Node)> {
    let mut args = Vec::new();
    let mut depth = 0i32;
    let mut start = open + 1;
    for k in open..toks.len() {
        match &toks[k] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    push_arg(&toks[start..k], &mut args);
                    break;
                }
            }
            Tok::Punct(',') if depth == 1 => {
                push_arg(&toks[start..k], &mut args);
                start = k + 1;
            }
            _ => {}
        }
    }
    args
}

fn push_arg(arg: &[Tok], out: &mut Vec<(Option<String>, Node)>) {
    match arg {
        [] => {}
        [Tok::Name(k), Tok::Punct('='), rest @ ..] => out.push((Some(k.clone()), parse_expr(rest))),
        _ => out.push((None, parse_expr(arg))),
    }
}

/// Parses `primary (postfix)* (| filter)* (is test)?`; anything more (binary
/// operators, conditionals) is `Other`, as none of the rules match it.
pub fn parse_expr(toks: &[Tok]) -> Node {
    let mut i = 0;
    let node = parse_tested(toks, &mut i);
    if i == toks.len() { node } else { Node::Other }
}

fn parse_tested(toks: &[Tok], i: &mut usize) -> Node {
    let mut node = parse_postfix(toks, i);
    while toks.get(*i) == Some(&Tok::Punct('|')) {
        *i += 1;
        if let Some(Tok::Name(_)) = toks.get(*i) {
            *i += 1;
        }
        if toks.get(*i) == Some(&Tok::Punct('(')) {
            *i = skip_group(toks, *i);
        }
        node = Node::Filter(Box::new(node));
    }
    if toks.get(*i) == Some(&Tok::Name("is".into())) {
        *i += 1;
        if toks.get(*i) == Some(&Tok::Name("not".into())) {
            *i += 1;
        }
        if let Some(Tok::Name(_)) = toks.get(*i) {
            *i += 1;
        }
        if toks.get(*i) == Some(&Tok::Punct('(')) {
            *i = skip_group(toks, *i);
        }
        node = Node::Test(Box::new(node));
    }
    node
}

fn parse_postfix(toks: &[Tok], i: &mut usize) -> Node {
    let mut node = match toks.get(*i) {
        Some(Tok::Name(n)) if !matches!(n.as_str(), "not" | "is" | "in") => {
            *i += 1;
            Node::Name(n.clone())
        }
        Some(Tok::Str(s)) => {
            *i += 1;
            Node::Const(s.clone())
        }
        Some(Tok::Punct('(')) => {
            *i += 1;
            let inner = parse_tested(toks, i);
            if toks.get(*i) != Some(&Tok::Punct(')')) {
                return Node::Other;
            }
            *i += 1;
            inner
        }
        _ => return Node::Other,
    };
    loop {
        match toks.get(*i) {
            Some(Tok::Punct('.')) => match toks.get(*i + 1) {
                Some(Tok::Name(a)) => {
                    node = Node::Getattr(Box::new(node), a.clone());
                    *i += 2;
                }
                _ => return Node::Other,
            },
            Some(Tok::Punct('[')) => {
                let close = skip_group(toks, *i);
                let inner = &toks[*i + 1..close.saturating_sub(1).max(*i + 1)];
                node = if inner.contains(&Tok::Punct(':')) {
                    Node::Slice(Box::new(node))
                } else if let [Tok::Str(s)] = inner {
                    Node::Getitem(Box::new(node), s.clone())
                } else {
                    Node::Other
                };
                *i = close;
            }
            Some(Tok::Punct('(')) => {
                *i = skip_group(toks, *i);
                node = Node::Other;
            }
            _ => return node,
        }
    }
}

/// Index just past the bracket group opening at `open`.
fn skip_group(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// A token of a tag body.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Identifier or keyword.
    Name(String),
    /// String literal, unescaped loosely.
    Str(String),
    /// One of `. [ ] ( ) { } | , = :`.
    Punct(char),
    /// Operators, numbers, anything else.
    Other,
}

/// Splits a tag body into tokens.
pub fn lex(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Name(chars[start..i].iter().collect()));
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if "=!<>".contains(c) && chars.get(i + 1) == Some(&'=') {
            out.push(Tok::Other);
            i += 2;
        } else if ".[](){}|,=:".contains(c) {
            out.push(Tok::Punct(c));
            i += 1;
        } else {
            out.push(Tok::Other);
            i += 1;
        }
    }
    out
}

/// The inner text of every `{% %}` (true) and `{{ }}` (false) tag, outside
/// comments and raw blocks.
pub fn scan_tags(src: &str) -> Vec<(bool, String)> {
    let mut tags = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find('{') {
        rest = &rest[at..];
        let (is_block, close) = if rest.starts_with("{%") {
            (true, "%}")
        } else if rest.starts_with("{{") {
            (false, "}}")
        } else if rest.starts_with("{#") {
            rest = rest.find("#}").map_or("", |e| &rest[e + 2..]);
            continue;
        } else {
            rest = &rest[1..];
            continue;
        };
        let body = &rest[2..];
        let end = find_close(body, close).unwrap_or(body.len());
        let inner = body[..end]
            .trim_start_matches(['-', '+', '~'])
            .trim_end_matches(['-', '+', '~']);
        rest = body.get(end + 2..).unwrap_or("");
        if is_block && inner.trim() == "raw" {
            rest = rest.find("endraw").map_or("", |e| &rest[e..]);
            continue;
        }
        tags.push((is_block, inner.trim().to_owned()));
    }
    tags
}

/// Position of `close` in `body`, skipping string literals.
fn find_close(body: &str, close: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if bytes[i..].starts_with(close.as_bytes()) => return Some(i),
            None => {}
        }
        i += 1;
    }
    None
}
