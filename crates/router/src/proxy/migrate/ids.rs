//! The token-id fields of a worker's chunk, found in its bytes without
//! parsing it ([`scan`]): where the prompt's ids and the first choice's
//! generated ids are, and the chunk without any id field
//! ([`Ids::write_without`]), every other byte as the worker sent it.
//!
//! vLLM (asked for `return_token_ids`) puts `prompt_token_ids` at the top
//! of a chat chunk or in a completion's choice, and `token_ids` in each
//! choice; the prompt's list is the one long thing in a stream (thousands
//! of ids in the first chunk). The scan walks the chunk's structure (keys,
//! strings with their escapes, nesting) and only checks that list's bytes
//! (digits, commas, blanks); it is parsed ([`tokenize::read_token_ids`]) only when the
//! answer moves. A chunk whose id fields are not lists of numbers (or
//! `null`), or that repeats one, or that is not an object, gives `None`:
//! the relay reads it the slow way and does not move the answer. The scan
//! never panics and never recurses (nesting depth costs nothing).

use std::ops::Range;

/// Where a chunk's id fields are; see the module docs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Ids {
    /// The prompt's ids, `[…]` (the top-level field, else the first
    /// choice's).
    pub(super) prompt: Option<Range<usize>>,
    /// The first choice's generated ids, `[…]`.
    pub(super) generated: Option<Range<usize>>,
    /// The byte ranges of every id field with its separator, in order.
    cuts: Cuts,
}

/// The byte ranges cut out of a chunk, in order: a chunk has one or two
/// (the generated ids, the prompt's), kept without an allocation; more
/// go to `more`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Cuts {
    first: [Range<usize>; 2],
    len: usize,
    more: Vec<Range<usize>>,
}

impl Cuts {
    fn push(&mut self, cut: Range<usize>) {
        match self.first.get_mut(self.len) {
            Some(slot) => *slot = cut,
            None => self.more.push(cut),
        }
        self.len += 1;
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl Iterator<Item = &Range<usize>> {
        self.first.iter().take(self.len).chain(&self.more)
    }
}

impl Ids {
    /// The chunk carries id fields (lists or `null`).
    pub(super) fn any(&self) -> bool {
        !self.cuts.is_empty()
    }

    /// The length of a chunk of `len` bytes without its id fields.
    pub(super) fn kept_len(&self, len: usize) -> usize {
        let cut: usize = self.cuts.iter().map(|c| c.end - c.start).sum();
        len.saturating_sub(cut)
    }

    /// Appends `json` (the chunk scanned) without its id fields to `out`.
    pub(super) fn write_without(&self, json: &[u8], out: &mut Vec<u8>) {
        let mut from = 0;
        for cut in self.cuts.iter() {
            out.extend_from_slice(json.get(from..cut.start).unwrap_or_default());
            from = cut.end;
        }
        out.extend_from_slice(json.get(from..).unwrap_or_default());
    }
}

/// Where the chunk's object is in the walk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    /// The n-th element of `choices`.
    Choice(usize),
}

/// The id fields of the JSON object `json`; see the module docs.
pub(super) fn scan(json: &[u8]) -> Option<Ids> {
    let mut w = Walk {
        b: json,
        i: 0,
        ids: Ids::default(),
        choice_prompt: None,
    };
    w.blank();
    w.object(Level::Top)?;
    w.blank();
    if w.i != json.len() {
        return None;
    }
    let mut ids = w.ids;
    if ids.prompt.is_none() {
        ids.prompt = w.choice_prompt;
    }
    Some(ids)
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The walk over a chunk's bytes.
struct Walk<'a> {
    b: &'a [u8],
    i: usize,
    ids: Ids,
    /// The first choice's `prompt_token_ids` (completions).
    choice_prompt: Option<Range<usize>>,
}

impl Walk<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn blank(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.i += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// The string at `i` (its opening quote); returns its raw content.
    fn string(&mut self) -> Option<Range<usize>> {
        self.expect(b'"')?;
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(start..self.i - 1);
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
    }

    /// Skips any value (nested ones by counting, not recursing).
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.i += 1;
                }
                b',' | b':' if depth > 0 => self.i += 1,
                b if is_blank(b) => self.i += 1,
                // A number or a literal.
                _ => {
                    let rest = self.b.get(self.i..)?;
                    let len = rest
                        .iter()
                        .position(|&b| matches!(b, b',' | b'}' | b']' | b':') || is_blank(b))
                        .unwrap_or(rest.len());
                    if len == 0 {
                        return None;
                    }
                    self.i += len;
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }

    /// An id field's value at `i`: a list of digits, commas and blanks, or
    /// `null`. Returns the list's range (`None` for `null`).
    fn id_list(&mut self) -> Option<Option<Range<usize>>> {
        let start = self.i;
        if self.b.get(start..)?.starts_with(b"null") {
            self.i += 4;
            return Some(None);
        }
        self.expect(b'[')?;
        let rest = self.b.get(self.i..)?;
        let len = rest
            .iter()
            .position(|&b| !(b.is_ascii_digit() || b == b',' || is_blank(b)))?;
        self.i += len;
        self.expect(b']')?;
        Some(Some(start..self.i))
    }

    /// The object at `i`, at `level`.
    fn object(&mut self, level: Level) -> Option<()> {
        self.expect(b'{')?;
        // A member is kept before this one (else a cut takes the comma
        // after it, not the one before).
        let mut kept = false;
        let mut comma: Option<usize> = None;
        loop {
            self.blank();
            if self.peek()? == b'}' && comma.is_none() {
                self.i += 1;
                return Some(());
            }
            let start = self.i;
            let key = self.string()?;
            self.blank();
            self.expect(b':')?;
            self.blank();
            let name = self.b.get(key)?;
            let field = match (level, name) {
                (Level::Top, b"prompt_token_ids") => Some(Field::Prompt),
                (Level::Choice(n), b"prompt_token_ids") => Some(Field::ChoicePrompt(n)),
                (Level::Choice(n), b"token_ids") => Some(Field::Generated(n)),
                _ => None,
            };
            let cut_first = match field {
                Some(field) => {
                    let list = self.id_list()?;
                    self.record(field, list)?;
                    match (kept, comma) {
                        (true, Some(c)) => {
                            self.ids.cuts.push(c..self.i);
                            None
                        }
                        _ => Some(start),
                    }
                }
                None => {
                    match (level, name) {
                        (Level::Top, b"choices") if self.peek() == Some(b'[') => self.choices()?,
                        _ => self.skip_value()?,
                    }
                    kept = true;
                    None
                }
            };
            let end = self.i;
            self.blank();
            match self.peek()? {
                b',' => {
                    comma = Some(self.i);
                    self.i += 1;
                    self.blank();
                    if let Some(s) = cut_first {
                        self.ids.cuts.push(s..self.i);
                    }
                }
                b'}' => {
                    if let Some(s) = cut_first {
                        self.ids.cuts.push(s..end);
                    }
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The `choices` list at `i`.
    fn choices(&mut self) -> Option<()> {
        self.expect(b'[')?;
        let mut n = 0;
        loop {
            self.blank();
            match self.peek()? {
                b']' if n == 0 => {
                    self.i += 1;
                    return Some(());
                }
                b'{' => self.object(Level::Choice(n))?,
                _ => self.skip_value()?,
            }
            n += 1;
            self.blank();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Notes an id field's list; a repeated field is refused.
    fn record(&mut self, field: Field, list: Option<Range<usize>>) -> Option<()> {
        let slot = match field {
            Field::Prompt => &mut self.ids.prompt,
            Field::ChoicePrompt(0) => &mut self.choice_prompt,
            Field::Generated(0) => &mut self.ids.generated,
            // Another choice's: cut, not kept (several choices do not move).
            Field::ChoicePrompt(_) | Field::Generated(_) => return Some(()),
        };
        if slot.is_some() {
            return None;
        }
        *slot = list;
        Some(())
    }
}

#[derive(Clone, Copy)]
enum Field {
    Prompt,
    ChoicePrompt(usize),
    Generated(usize),
}

#[cfg(test)]
#[path = "ids_tests.rs"]
mod tests;
