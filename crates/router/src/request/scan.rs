//! The one scan of a request body: checks it is a JSON object and finds
//! where each top-level entry's value lies, without copying it. The
//! structure between the entries (braces, colons, commas, whitespace) is
//! walked here; each key and each value is read by `serde_json` (a value
//! as a borrowed `RawValue`, checked, nesting limited), except a `prompt`
//! that is a plain list of token ids: that one is typed as it is found
//! ([`tokenize::read_token_ids_prefix`]), so its ids are read once.

use std::ops::Range;

use serde_json::value::RawValue;
use tokenize::read_token_ids_prefix;

use super::InvalidBody;

/// What a scan found: each entry's key and value range, in order, and the
/// last `prompt`'s ids when it was a plain non-empty list of them.
pub(super) struct Scanned {
    pub entries: Vec<(String, Range<usize>)>,
    pub prompt_ids: Option<Vec<u32>>,
}

/// Scans `body`; [`InvalidBody`] when it is not one JSON object (with
/// nothing but whitespace after it).
pub(super) fn scan(body: &[u8]) -> Result<Scanned, InvalidBody> {
    let mut out = Scanned {
        entries: Vec::with_capacity(16),
        prompt_ids: None,
    };
    let mut i = skip_ws(body, 0);
    expect(body, i, b'{', "a JSON object")?;
    i = skip_ws(body, i + 1);
    if body.get(i) == Some(&b'}') {
        return end(body, i + 1, out);
    }
    loop {
        expect(body, i, b'"', "a key")?;
        let (key, len) = read_one::<String>(&body[i..], i)?;
        i = skip_ws(body, i + len);
        expect(body, i, b':', "':'")?;
        i = skip_ws(body, i + 1);
        let value = if key == "prompt" {
            out.prompt_ids = None;
            let mut ids = Vec::new();
            match read_token_ids_prefix(&body[i..], &mut ids) {
                Some(len) => {
                    out.prompt_ids = (!ids.is_empty()).then_some(ids);
                    i..i + len
                }
                None => raw_value(body, i)?,
            }
        } else {
            raw_value(body, i)?
        };
        i = skip_ws(body, value.end);
        out.entries.push((key, value));
        match body.get(i) {
            Some(b',') => i = skip_ws(body, i + 1),
            Some(b'}') => return end(body, i + 1, out),
            _ => return Err(unexpected(i, "',' or '}'")),
        }
    }
}

/// The value at `at`: where its text lies.
fn raw_value(body: &[u8], at: usize) -> Result<Range<usize>, InvalidBody> {
    let (raw, _) = read_one::<&RawValue>(&body[at..], at)?;
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    Ok(start..start + raw.get().len())
}

/// One JSON value of type `T` at the start of `text` (which lies at `at`
/// in the body), and how many bytes it took.
fn read_one<'de, T: serde::Deserialize<'de>>(
    text: &'de [u8],
    at: usize,
) -> Result<(T, usize), InvalidBody> {
    let mut values = serde_json::Deserializer::from_slice(text).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok((value, values.byte_offset())),
        Some(Err(e)) => Err(InvalidBody(format!("{e} (in the value at byte {at})"))),
        None => Err(unexpected(at, "a value")),
    }
}

fn skip_ws(body: &[u8], mut at: usize) -> usize {
    while body
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    {
        at += 1;
    }
    at
}

fn expect(body: &[u8], at: usize, byte: u8, what: &str) -> Result<(), InvalidBody> {
    if body.get(at) == Some(&byte) {
        Ok(())
    } else {
        Err(unexpected(at, what))
    }
}

fn unexpected(at: usize, what: &str) -> InvalidBody {
    InvalidBody(format!("expected {what} at byte {at}"))
}

/// Only whitespace may follow the object.
fn end(body: &[u8], at: usize, out: Scanned) -> Result<Scanned, InvalidBody> {
    let at = skip_ws(body, at);
    if at == body.len() {
        Ok(out)
    } else {
        Err(InvalidBody(format!("trailing characters at byte {at}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{MapAccess, Visitor};
    use std::fmt;

    /// What serde's own scan of the object finds: each key and its value's
    /// text.
    fn serde_entries(body: &[u8]) -> Option<Vec<(String, String)>> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Vec<(String, String)>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let v: &RawValue = map.next_value()?;
                    out.push((key, v.get().to_owned()));
                }
                Ok(out)
            }
        }
        let mut de = serde_json::Deserializer::from_slice(body);
        let out = serde::Deserializer::deserialize_map(&mut de, Entries).ok()?;
        de.end().ok()?;
        Some(out)
    }

    fn entries(body: &[u8]) -> Option<Vec<(String, String)>> {
        let s = scan(body).ok()?;
        Some(
            s.entries
                .into_iter()
                .map(|(k, r)| (k, String::from_utf8(body[r].to_vec()).unwrap()))
                .collect(),
        )
    }

    #[test]
    fn finds_what_serde_finds_and_refuses_what_it_refuses() {
        let bodies: &[&[u8]] = &[
            br#"{}"#,
            b" { } \n",
            br#"{"model":"m","prompt":[1, 2,3 ],"stream":true}"#,
            b"{ \"prompt\" :\n[ 5 ] , \"n\" : 1 }",
            br#"{"prompt":[],"x":null}"#,
            br#"{"prompt":"text","max_tokens":12,"stop":["a","}"]}"#,
            br#"{"prompt":[[1,2],[3]],"a":{"b":[1,{"c":"\"}"}]}}"#,
            br#"{"prompt":[1,2],"prompt":"later"}"#,
            br#"{"prompt":[01]}"#,
            br#"{"prompt":[1.5,2]}"#,
            br#"{"prompt":[4294967296]}"#,
            br#"{"prompt":[-1]}"#,
            br#"{"k\u0065y":1e5,"t":true,"f":false}"#,
            br#"{"prompt":[1,2]"#,
            br#"{"prompt":[1,2]x}"#,
            br#"{"prompt":[1,2],}"#,
            br#"{"a":1 "b":2}"#,
            br#"{"a":12x}"#,
            br#"{"a":}"#,
            br#"{a:1}"#,
            br#"{"a":1}x"#,
            br#"{"a":1}{}"#,
            br#"[1]"#,
            b"",
            b"{\"a\":\"\xff\"}",
            br#"{"a":"unterminated}"#,
        ];
        for body in bodies {
            assert_eq!(
                entries(body),
                serde_entries(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_last_prompt_of_plain_ids_is_typed() {
        let ids = |b: &[u8]| scan(b).unwrap().prompt_ids;
        assert_eq!(ids(br#"{"prompt":[3, 4],"n":1}"#), Some(vec![3, 4]));
        assert_eq!(ids(br#"{"prompt":"x","prompt":[7]}"#), Some(vec![7]));
        assert_eq!(ids(br#"{"prompt":[7],"prompt":"x"}"#), None);
        assert_eq!(ids(br#"{"prompt":[]}"#), None);
        assert_eq!(ids(br#"{"prompt":[[1]]}"#), None);
        assert_eq!(ids(br#"{"prompts":[1]}"#), None);
    }
}
