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
//!
//! The same walk reads the fields [`View`] holds (the top level's `error`,
//! `usage` and `choices`; each choice's `index`, `text`, `delta`,
//! `finish_reason`; a delta's `content` and parser fields) and checks the
//! rest as strictly as serde would read it (`walk`): when it vouches for
//! the chunk, [`Ids::view`] is what serde would have read of the chunk
//! without its id fields, and the relay reads no chunk with serde.

use std::ops::Range;

use bytes::BufMut;

use super::chunk::{ChoiceView, Choices, DeltaView, Shape, View};
use super::walk::Walk;

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
    /// What [`View`] reads of the chunk without its id fields, when the
    /// walk vouches for it (`walk`'s strict reading); else serde is asked.
    pub(super) view: Option<View>,
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
    pub(super) fn write_without(&self, json: &[u8], out: &mut impl BufMut) {
        let mut from = 0;
        for cut in self.cuts.iter() {
            out.put_slice(json.get(from..cut.start).unwrap_or_default());
            from = cut.end;
        }
        out.put_slice(json.get(from..).unwrap_or_default());
    }
}

/// Where the chunk's object is in the walk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    /// The n-th element of `choices`.
    Choice(usize),
    /// A choice's `delta`.
    Delta,
}

/// The id fields of the JSON object `json`, and what [`View`] reads of it
/// when the walk can tell; see the module docs.
pub(super) fn scan(json: &[u8]) -> Option<Ids> {
    let mut w = Scan {
        w: Walk::new(json),
        ids: Ids::default(),
        choice_prompt: None,
    };
    w.w.blank();
    let seen = w.object(Level::Top)?;
    w.w.blank();
    if w.w.i != json.len() {
        return None;
    }
    let mut ids = w.ids;
    if ids.prompt.is_none() {
        ids.prompt = w.choice_prompt;
    }
    if w.w.sure {
        ids.view = Some(View {
            error: seen.shapes[0],
            choices: seen.choices,
            usage: seen.shapes[1],
        });
    }
    Some(ids)
}

/// The walk over a chunk's structure.
struct Scan<'a> {
    w: Walk<'a>,
    ids: Ids,
    /// The first choice's `prompt_token_ids` (completions).
    choice_prompt: Option<Range<usize>>,
}

/// The fields [`View`] reads, as found in one object of the chunk.
#[derive(Default)]
struct Seen {
    /// The fields met (a repeated one: serde refuses the chunk).
    met: u8,
    /// Top: `error`, `usage`; a choice: `text`, `finish_reason`; a delta:
    /// `content`, `tool_calls`, `reasoning_content`, `reasoning`.
    shapes: [Shape; 4],
    choices: Choices,
    index: Option<u64>,
    delta: Option<DeltaView>,
}

/// A field [`View`] reads: its slot in [`Seen::shapes`], or what else.
#[derive(Clone, Copy)]
enum Known {
    Shape(usize),
    Choices,
    Index,
    Delta,
}

/// The field named `name` at `level`, if [`View`] reads it, and its bit
/// in [`Seen::met`].
fn known(level: Level, name: &[u8]) -> Option<(Known, u8)> {
    let k = match (level, name) {
        (Level::Top, b"error") => (Known::Shape(0), 0),
        (Level::Top, b"usage") => (Known::Shape(1), 1),
        (Level::Top, b"choices") => (Known::Choices, 2),
        (Level::Choice(_), b"text") => (Known::Shape(0), 0),
        (Level::Choice(_), b"finish_reason") => (Known::Shape(1), 1),
        (Level::Choice(_), b"index") => (Known::Index, 2),
        (Level::Choice(_), b"delta") => (Known::Delta, 3),
        (Level::Delta, b"content") => (Known::Shape(0), 0),
        (Level::Delta, b"tool_calls") => (Known::Shape(1), 1),
        (Level::Delta, b"reasoning_content") => (Known::Shape(2), 2),
        (Level::Delta, b"reasoning") => (Known::Shape(3), 3),
        _ => return None,
    };
    Some((k.0, 1 << k.1))
}

impl Scan<'_> {
    /// The object at `i`, at `level`.
    fn object(&mut self, level: Level) -> Option<Seen> {
        let mut seen = Seen::default();
        self.w.expect(b'{')?;
        // A member is kept before this one (else a cut takes the comma
        // after it, not the one before).
        let mut kept = false;
        let mut comma: Option<usize> = None;
        loop {
            self.w.blank();
            if self.w.peek()? == b'}' && comma.is_none() {
                self.w.i += 1;
                return Some(seen);
            }
            let start = self.w.i;
            let key = self.w.string()?;
            self.w.blank();
            self.w.expect(b':')?;
            self.w.blank();
            let name = self.w.b.get(key)?;
            if name.contains(&b'\\') {
                // serde reads the key unescaped.
                self.w.sure = false;
            }
            let field = match (level, name) {
                (Level::Top, b"prompt_token_ids") => Some(Field::Prompt),
                (Level::Choice(n), b"prompt_token_ids") => Some(Field::ChoicePrompt(n)),
                (Level::Choice(n), b"token_ids") => Some(Field::Generated(n)),
                _ => None,
            };
            let cut_first = match field {
                Some(field) => {
                    let list = self.w.id_list()?;
                    self.record(field, list)?;
                    match (kept, comma) {
                        (true, Some(c)) => {
                            self.ids.cuts.push(c..self.w.i);
                            None
                        }
                        _ => Some(start),
                    }
                }
                None => {
                    match known(level, name) {
                        Some((k, bit)) => {
                            if seen.met & bit != 0 {
                                self.w.sure = false;
                            }
                            seen.met |= bit;
                            self.read(k, &mut seen)?;
                        }
                        None => {
                            self.w.shape()?;
                        }
                    }
                    kept = true;
                    None
                }
            };
            let end = self.w.i;
            self.w.blank();
            match self.w.peek()? {
                b',' => {
                    comma = Some(self.w.i);
                    self.w.i += 1;
                    self.w.blank();
                    if let Some(s) = cut_first {
                        self.ids.cuts.push(s..self.w.i);
                    }
                }
                b'}' => {
                    if let Some(s) = cut_first {
                        self.ids.cuts.push(s..end);
                    }
                    self.w.i += 1;
                    return Some(seen);
                }
                _ => return None,
            }
        }
    }

    /// The value of the field `k` at `i`, into `seen`.
    fn read(&mut self, k: Known, seen: &mut Seen) -> Option<()> {
        let w = &mut self.w;
        match k {
            Known::Shape(slot) => {
                let shape = w.shape()?;
                if let Some(s) = seen.shapes.get_mut(slot) {
                    *s = shape;
                }
            }
            Known::Choices if w.peek() == Some(b'[') => seen.choices = self.choices()?,
            Known::Index => {
                let start = w.i;
                if !w.literal(b"null") {
                    seen.index = w
                        .number()
                        .flatten()
                        .filter(|d| d.len() <= 19)
                        .and_then(|d| std::str::from_utf8(w.b.get(d)?).ok()?.parse().ok());
                    if seen.index.is_none() {
                        // Not a `u64` as serde reads one.
                        w.sure = false;
                        w.i = start;
                        w.skip_value()?;
                    }
                }
            }
            Known::Delta if w.peek() == Some(b'{') => {
                let d = self.object(Level::Delta)?;
                let [content, tool_calls, reasoning_content, reasoning] = d.shapes;
                seen.delta = Some(DeltaView {
                    content,
                    tool_calls,
                    reasoning_content,
                    reasoning,
                });
            }
            Known::Delta if w.literal(b"null") => {}
            // A `choices` that is no list, a `delta` that is no object:
            // serde refuses them.
            Known::Choices | Known::Delta => {
                w.sure = false;
                w.skip_value()?;
            }
        }
        Some(())
    }

    /// The `choices` list at `i`.
    fn choices(&mut self) -> Option<Choices> {
        let mut choices = Choices::default();
        self.w.expect(b'[')?;
        let mut n = 0;
        loop {
            self.w.blank();
            match self.w.peek()? {
                b']' if n == 0 => {
                    self.w.i += 1;
                    return Some(choices);
                }
                b'{' => {
                    let c = self.object(Level::Choice(n))?;
                    let [text, finish_reason, ..] = c.shapes;
                    if n == 0 {
                        choices.several = c.index.unwrap_or(0) != 0;
                        choices.first = Some(ChoiceView {
                            index: c.index,
                            text,
                            delta: c.delta,
                            finish_reason,
                        });
                    } else {
                        choices.several = true;
                    }
                }
                _ => {
                    // A choice that is no object: serde refuses it.
                    self.w.sure = false;
                    self.w.skip_value()?;
                }
            }
            n += 1;
            self.w.blank();
            match self.w.peek()? {
                b',' => self.w.i += 1,
                b']' => {
                    self.w.i += 1;
                    return Some(choices);
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
