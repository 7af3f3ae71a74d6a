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
    let read = read_into(text, out);
    if read.is_none() {
        out.truncate(before);
    }
    read
}

fn read_into(text: &[u8], out: &mut Vec<u32>) -> Option<()> {
    let ws = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < text.len() && ws(text[*i]) {
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
        i += 1;
        skip_ws(&mut i);
        return (i == text.len()).then_some(());
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
    i += 1;
    skip_ws(&mut i);
    (i == text.len()).then_some(())
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
    }
}
