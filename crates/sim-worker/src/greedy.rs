//! [`Vocabulary`]: the sim's answers as greedy decoding gives them. Output
//! token `i` is a function of the prompt's tokens and the `i` tokens
//! before it (a rolling hash of the whole sequence picks one of the
//! vocabulary's tokens), so an answer continued from its prompt plus the
//! tokens already generated equals the uninterrupted one token for token,
//! as a real engine's greedy answer does. Pure: no I/O, no clock.

use std::sync::Arc;

/// The tokens answers are made of: ids and the text of each.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    tokens: Arc<[(u32, Arc<str>)]>,
}

/// Why a vocabulary cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the answer vocabulary is empty")]
pub struct EmptyVocabulary;

/// The state of a sequence: a hash of every token so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence(u64);

impl Sequence {
    /// The state after `tokens`.
    pub fn of(tokens: &[u32]) -> Self {
        tokens
            .iter()
            .fold(Sequence(0xcbf2_9ce4_8422_2325), |s, &t| s.push(t))
    }

    /// The state after one more token.
    pub fn push(self, token: u32) -> Self {
        Sequence(mix(self.0 ^ u64::from(token)).wrapping_add(0x9e37_79b9_7f4a_7c15))
    }
}

/// SplitMix64's finalizer: every input bit reaches every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Vocabulary {
    /// A vocabulary of `(id, text)` pairs; repeated ids count once.
    pub fn new(tokens: Vec<(u32, String)>) -> Result<Self, EmptyVocabulary> {
        let mut out: Vec<(u32, Arc<str>)> = Vec::with_capacity(tokens.len());
        for (id, text) in tokens {
            if !out.iter().any(|(seen, _)| *seen == id) {
                out.push((id, Arc::from(text)));
            }
        }
        if out.is_empty() {
            return Err(EmptyVocabulary);
        }
        Ok(Vocabulary {
            tokens: Arc::from(out),
        })
    }

    /// The next token after a sequence in state `s`: its index here.
    pub fn next(&self, s: Sequence) -> usize {
        // The length is at least 1 and fits u64.
        (mix(s.0) % self.tokens.len() as u64) as usize
    }

    /// The `n` tokens generated after `prompt`, as indices here.
    pub fn answer(&self, prompt: &[u32], n: usize) -> Vec<usize> {
        let mut s = Sequence::of(prompt);
        (0..n)
            .map(|_| {
                let i = self.next(s);
                s = s.push(self.id(i));
                i
            })
            .collect()
    }

    /// The token id of index `i` (an index from [`next`](Self::next)).
    pub fn id(&self, i: usize) -> u32 {
        self.tokens.get(i).map_or(0, |t| t.0)
    }

    /// The text of index `i`.
    pub fn text(&self, i: usize) -> &str {
        self.tokens.get(i).map_or("", |t| &t.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocabulary {
        Vocabulary::new((0..7).map(|i| (100 + i, format!(" w{i}"))).collect()).unwrap()
    }

    #[test]
    fn an_answer_continued_from_its_prefix_equals_the_whole() {
        let v = vocab();
        let prompt = [1, 2, 3, 4, 5];
        let whole = v.answer(&prompt, 20);
        for cut in 0..20 {
            let mut longer = prompt.to_vec();
            longer.extend(whole[..cut].iter().map(|&i| v.id(i)));
            assert_eq!(v.answer(&longer, 20 - cut), whole[cut..], "cut at {cut}");
        }
    }

    #[test]
    fn answers_depend_on_the_prompt() {
        let v = vocab();
        assert_ne!(v.answer(&[1, 2, 3], 12), v.answer(&[1, 2, 4], 12));
        assert!(Vocabulary::new(Vec::new()).is_err());
    }
}
