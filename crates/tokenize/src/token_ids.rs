//! Lists of token ids read straight from JSON bytes: a completion's
//! `prompt` (`prompt::prompt_from_json`) and the ids vLLM streams back in
//! the router's migration relay. Depends on nothing else in the crate.

/// The JSON list of token ids `text` (`[id, id, …]`, each id a run of
/// ASCII digits that fits a u32, JSON whitespace around the brackets and
/// separators; `[]` is an empty list) appended to `out`. `None`, with
/// `out` as it was, for anything else (signs, fractions, exponents,
/// leading zeros, strings, nesting, an id past u32). The one reader of id
/// lists in raw JSON: a prompt's, and the ids vLLM streams back
/// (`token_ids`, `prompt_token_ids`) in the router's migration relay.
pub fn read_token_ids(text: &[u8], out: &mut Vec<u32>) -> Option<()> {
    let before = out.len();
    let end = read_token_ids_prefix(text, out)?;
    if text[end..].iter().all(|&b| is_ws(b)) {
        Some(())
    } else {
        out.truncate(before);
        None
    }
}

/// The JSON list of token ids at the start of `text` (after JSON
/// whitespace), as [`read_token_ids`] reads one, appended to `out`; what
/// follows its `]` is left unread. `Some` with the length of the text up to
/// and with the `]`; `None`, with `out` as it was, when the text does not
/// start with such a list. A request's scan reads its prompt so, typing
/// the ids while it finds where the entry ends.
pub fn read_token_ids_prefix(text: &[u8], out: &mut Vec<u32>) -> Option<usize> {
    let before = out.len();
    let read = read_into(text, out);
    if read.is_none() {
        out.truncate(before);
    }
    read
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

fn read_into(text: &[u8], out: &mut Vec<u32>) -> Option<usize> {
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < text.len() && is_ws(text[*i]) {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if text.get(i) != Some(&b'[') {
        return None;
    }
    i += 1;
    skip_ws(&mut i);
    if text.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    // Ids are at least two bytes each with their separator.
    out.reserve(text.len() / 2);
    loop {
        skip_ws(&mut i);
        let start = i;
        let mut id: u64 = 0;
        while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
            id = id * 10 + u64::from(b - b'0');
            i += 1;
            if i - start > 10 {
                return None;
            }
        }
        let digits = i - start;
        if digits == 0 || (digits > 1 && text[start] == b'0') {
            return None;
        }
        out.push(u32::try_from(id).ok()?);
        skip_ws(&mut i);
        match text.get(i) {
            Some(b',') => i += 1,
            Some(b']') => break,
            _ => return None,
        }
    }
    Some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_parse_as_u32_or_not_at_all() {
        let mut out = vec![9];
        assert_eq!(read_token_ids(b"[1, 2 ,3]", &mut out), Some(()));
        assert_eq!(read_token_ids(b"[ ]", &mut out), Some(()));
        assert_eq!(read_token_ids(b"[4294967295]", &mut out), Some(()));
        assert_eq!(out, vec![9, 1, 2, 3, u32::MAX]);
        for bad in [
            &b"[4294967296]"[..],
            b"[1,,2]",
            b"[,]",
            b"[1,]",
            b"[1 2]",
            b"1",
            b"[1",
        ] {
            assert_eq!(read_token_ids(bad, &mut out), None, "{bad:?}");
            assert_eq!(out.len(), 5, "left as it was");
        }
        assert_eq!(read_token_ids(b"[1] x", &mut out), None);
        assert_eq!(out.len(), 5, "left as it was");
    }

    #[test]
    fn a_prefix_list_ends_at_its_bracket() {
        let mut out = Vec::new();
        let text = b" [7, 8]  ,\"model\":\"m\"}";
        assert_eq!(read_token_ids_prefix(text, &mut out), Some(7));
        assert_eq!(out, vec![7, 8]);
        assert_eq!(read_token_ids_prefix(b"[]}", &mut out), Some(2));
        assert_eq!(read_token_ids_prefix(b"[1,2}", &mut out), None);
        assert_eq!(read_token_ids_prefix(b"\"a\"", &mut out), None);
        assert_eq!(out, vec![7, 8], "left as it was");
    }
}
