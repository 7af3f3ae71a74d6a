//! Rewrites the template's dict literals `{k: v, ...}` into calls
//! `__pydict(k, v, ...)` before compiling.
//!
//! Python dicts keep the order their keys were written in, minijinja's
//! maps sort them; iterating, printing or `tojson` of a literal would
//! differ. The call builds an insertion-ordered dict instead.
//!
//! Only expression tags (`{{ }}`, `{% %}`) are touched, outside string
//! literals; comments and `raw` blocks are copied as they are.

/// The name of the global that builds ordered dicts.
pub const PYDICT_FN: &str = "__pydict";

/// `src` with every dict literal turned into a `__pydict(...)` call.
pub fn rewrite_dict_literals(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 32);
    let mut rest = src;
    let mut in_raw = false;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let close = match rest.get(..2) {
            Some("{{") if !in_raw => "}}",
            Some("{%") => "%}",
            Some("{#") if !in_raw => {
                let end = rest.find("#}").map_or(rest.len(), |e| e + 2);
                out.push_str(&rest[..end]);
                rest = &rest[end..];
                continue;
            }
            _ => {
                out.push('{');
                rest = &rest[1..];
                continue;
            }
        };
        let body = &rest[2..];
        let word = body.trim_start_matches(['-', '+', '~', ' ', '\t', '\n', '\r']);
        let keyword: String = word
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if in_raw && keyword != "endraw" {
            out.push('{');
            rest = &rest[1..];
            continue;
        }
        if close == "%}" && (keyword == "raw" || keyword == "endraw") {
            in_raw = keyword == "raw";
            let end = body.find("%}").map_or(body.len(), |e| e + 2);
            out.push_str(&rest[..2 + end]);
            rest = &body[end..];
            continue;
        }
        out.push_str(&rest[..2]);
        let consumed = rewrite_tag(body, close, &mut out);
        rest = &body[consumed..];
    }
    out.push_str(rest);
    out
}

/// Copies one tag body up to and including `close` (found with brackets
/// balanced and outside strings), rewriting dict literals. Returns the
/// bytes of `body` consumed.
fn rewrite_tag(body: &str, close: &str, out: &mut String) -> usize {
    let mut stack: Vec<char> = Vec::new();
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if stack.is_empty() && body[i..].starts_with(close) {
            out.push_str(close);
            return i + close.len();
        }
        match c {
            '\'' | '"' => {
                out.push(c);
                while let Some((_, s)) = chars.next() {
                    out.push(s);
                    if s == '\\' {
                        if let Some((_, e)) = chars.next() {
                            out.push(e);
                        }
                    } else if s == c {
                        break;
                    }
                }
            }
            '{' => {
                stack.push('{');
                out.push_str(PYDICT_FN);
                out.push('(');
            }
            '}' if stack.last() == Some(&'{') => {
                stack.pop();
                out.push(')');
            }
            ':' if stack.last() == Some(&'{') => out.push(','),
            '(' | '[' => {
                stack.push(c);
                out.push(c);
            }
            ')' | ']' => {
                if matches!((stack.last(), c), (Some('('), ')') | (Some('['), ']')) {
                    stack.pop();
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    body.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_dict_literals_in_tags() {
        let src = "{ text } {{ {'b': 1, 'a': x[1:2]} | tojson }}{% set m = {} %}";
        assert_eq!(
            rewrite_dict_literals(src),
            "{ text } {{ __pydict('b', 1, 'a', x[1:2]) | tojson }}{% set m = __pydict() %}"
        );
    }

    #[test]
    fn nested_and_strings_and_comments() {
        let src = "{{- {'a': {'b': '}:{'}} -}}{# {'x': 1} #}{% raw %}{{ {'y': 2} }}{% endraw %}";
        assert_eq!(
            rewrite_dict_literals(src),
            "{{- __pydict('a', __pydict('b', '}:{')) -}}{# {'x': 1} #}{% raw %}{{ {'y': 2} }}{% endraw %}"
        );
    }

    #[test]
    fn templates_without_literals_are_unchanged() {
        let src = "{%- for m in messages[::-1] %}{{ m.content.split('</think>')[-1] }}{% endfor %}";
        assert_eq!(rewrite_dict_literals(src), src);
    }
}
