//! Pseudo-random English-like text for the synthetic workloads: common
//! words (about one Qwen3 token each) drawn with a seeded generator, so that
//! equal seeds give equal prompts and different seeds different ones.

use super::random::Rng64;

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "time",
    "people",
    "year",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "good",
    "new",
    "first",
    "last",
    "long",
    "great",
    "little",
    "own",
    "other",
    "old",
    "big",
    "high",
    "different",
    "small",
    "large",
    "next",
    "early",
    "young",
    "important",
    "few",
    "public",
    "bad",
    "same",
    "able",
    "make",
    "know",
    "take",
    "see",
    "come",
    "think",
    "look",
    "want",
    "give",
    "use",
    "find",
    "tell",
    "ask",
    "seem",
    "feel",
    "try",
    "leave",
    "call",
    "keep",
    "let",
    "begin",
    "help",
    "talk",
    "turn",
    "start",
    "show",
    "hear",
    "play",
    "run",
    "move",
    "like",
    "live",
    "believe",
    "hold",
    "bring",
    "happen",
    "write",
    "provide",
    "sit",
    "stand",
    "lose",
    "pay",
    "meet",
    "include",
    "continue",
    "set",
    "learn",
    "lead",
    "understand",
    "watch",
    "follow",
    "stop",
    "create",
    "speak",
    "read",
    "allow",
    "add",
    "spend",
    "grow",
    "open",
    "walk",
    "win",
    "offer",
    "remember",
    "love",
    "consider",
    "appear",
    "buy",
    "wait",
    "serve",
    "die",
    "send",
    "expect",
    "build",
    "stay",
    "fall",
    "cut",
    "reach",
    "kill",
    "remain",
    "river",
    "mountain",
    "garden",
    "engine",
    "market",
    "signal",
    "theory",
    "matrix",
    "harbor",
    "planet",
    "letter",
    "window",
    "silver",
    "forest",
];

/// A seeded word generator.
#[derive(Debug, Clone)]
pub struct Words {
    rng: Rng64,
}

impl Words {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Words {
            rng: Rng64::new(seed),
        }
    }

    /// `n` words, separated by spaces, in sentences of 8–20 words that
    /// start with a capital and end with a period.
    pub fn text(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n * 7);
        let mut left_in_sentence = 0;
        for i in 0..n {
            let w = WORDS[self.rng.below(WORDS.len() as u64) as usize];
            if left_in_sentence == 0 {
                if i > 0 {
                    out.push_str(". ");
                }
                left_in_sentence = 8 + self.rng.below(13) as usize;
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(w);
            }
            left_in_sentence -= 1;
        }
        if n > 0 {
            out.push('.');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_seeded_and_sized() {
        let a = Words::new(1).text(50);
        assert_eq!(a, Words::new(1).text(50));
        assert_ne!(a, Words::new(2).text(50));
        assert_eq!(a.split_whitespace().count(), 50);
        assert!(a.ends_with('.'));
        assert!(a.chars().next().unwrap().is_uppercase());
        assert_eq!(Words::new(1).text(0), "");
    }
}
