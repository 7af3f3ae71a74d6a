//! Synthetic text workloads with Poisson arrivals: RAG over Zipf-popular
//! documents, multi-turn chat sessions, one global system prompt shared by
//! every request (the hotspot), and a no-reuse control.

use std::time::Duration;

use anyhow::bail;

use super::random::{Rng64, Zipf, exp_sample};
use super::text::Words;
use super::{Api, Message, Plan, Prompt, Session, Turn};

/// Which synthetic workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntheticKind {
    /// D documents with Zipf popularity, a new question each time.
    Rag,
    /// Multi-turn conversations: each turn resends the conversation so far,
    /// answers included, plus a new user message.
    Chat,
    /// One long system prompt shared by every request, then a short question.
    SystemPrompt,
    /// Every prompt is new from its first token: no reuse at all.
    NoReuse,
}

impl std::str::FromStr for SyntheticKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rag" => Ok(SyntheticKind::Rag),
            "chat" => Ok(SyntheticKind::Chat),
            "system-prompt" => Ok(SyntheticKind::SystemPrompt),
            "no-reuse" => Ok(SyntheticKind::NoReuse),
            _ => Err(format!(
                "unknown workload {s:?}: expected trace, rag, chat, system-prompt or no-reuse"
            )),
        }
    }
}

/// Sizes and rates of a synthetic workload.
#[derive(Debug, Clone)]
pub struct SyntheticOptions {
    /// Which workload.
    pub kind: SyntheticKind,
    /// Completions or chat (chat sessions are always chat).
    pub api: Api,
    /// Mean requests per second (Poisson arrivals).
    pub rate: f64,
    /// No arrivals after this.
    pub duration: Option<Duration>,
    /// At most this many requests.
    pub requests: Option<usize>,
    /// Seed of every random choice.
    pub seed: u64,
    /// `max_tokens` of every request.
    pub output_tokens: u32,
    /// RAG: how many documents.
    pub documents: usize,
    /// Words per document (RAG), per no-reuse prompt, per first chat turn.
    pub doc_words: usize,
    /// RAG: Zipf exponent of document popularity.
    pub zipf: f64,
    /// Words per question (RAG, system prompt) and per later chat turn.
    pub question_words: usize,
    /// Words of the global system prompt.
    pub system_words: usize,
    /// Chat: turns per session.
    pub turns: usize,
    /// Chat: mean pause between an answer and the next turn.
    pub think_time: Duration,
}

/// Builds the plan of `o`.
pub fn synthetic_plan(o: &SyntheticOptions) -> anyhow::Result<Plan> {
    if !(o.rate.is_finite() && o.rate > 0.0) {
        bail!("--rate must be a positive number");
    }
    if o.duration.is_none() && o.requests.is_none() {
        bail!("give --duration or --requests");
    }
    if o.output_tokens == 0 {
        bail!("--output-tokens must be positive");
    }
    if o.kind == SyntheticKind::Rag && o.documents == 0 {
        bail!("--documents must be positive");
    }
    if o.kind == SyntheticKind::Chat && o.turns == 0 {
        bail!("--turns must be positive");
    }
    let max_requests = o.requests.unwrap_or(usize::MAX);
    let horizon = o.duration.unwrap_or(Duration::MAX);
    let mut arrivals = Rng64::new(o.seed);
    let per_session = if o.kind == SyntheticKind::Chat {
        o.turns
    } else {
        1
    };
    let mean_gap = Duration::from_secs_f64(per_session as f64 / o.rate);
    let mut g = Generator::new(o);
    let mut sessions = Vec::new();
    let (mut t, mut count) = (Duration::ZERO, 0usize);
    while count < max_requests {
        t += exp_sample(&mut arrivals, mean_gap);
        if t > horizon {
            break;
        }
        let mut s = g.session(sessions.len(), t);
        s.turns.truncate(max_requests - count);
        count += s.turns.len();
        sessions.push(s);
    }
    Ok(Plan::new(g.describe(), sessions))
}

/// The random choices of one workload.
struct Generator<'a> {
    o: &'a SyntheticOptions,
    rng: Rng64,
    documents: Vec<String>,
    zipf: Zipf,
    system: String,
}

impl<'a> Generator<'a> {
    fn new(o: &'a SyntheticOptions) -> Self {
        let documents = match o.kind {
            SyntheticKind::Rag => (0..o.documents)
                .map(|d| Words::new(o.seed ^ 0xd0c0_0000 ^ d as u64).text(o.doc_words))
                .collect(),
            _ => Vec::new(),
        };
        Generator {
            o,
            rng: Rng64::new(o.seed.rotate_left(17) ^ 0x5e55_1011),
            zipf: Zipf::new(o.documents.max(1), o.zipf),
            documents,
            system: Words::new(o.seed ^ 0x5757_0000).text(o.system_words),
        }
    }

    fn words(&mut self, n: usize) -> String {
        Words::new(self.rng.next_u64()).text(n)
    }

    fn turn(&self, at: Duration, prompt: Prompt) -> Turn {
        Turn {
            at,
            prompt,
            max_tokens: self.o.output_tokens,
        }
    }

    /// A text prompt as the API wants it: completions text, or a system and
    /// a user message.
    fn prompt(&self, system: &str, user: &str) -> Prompt {
        match self.o.api {
            Api::Completions => Prompt::Text(format!("{system}\n\nUser: {user}\nAssistant:")),
            Api::Chat => Prompt::Messages(vec![
                Message::new("system", system),
                Message::new("user", user),
            ]),
        }
    }

    fn session(&mut self, index: usize, start: Duration) -> Session {
        let o = self.o;
        let turns = match o.kind {
            SyntheticKind::Rag => {
                let d = self.zipf.sample(&mut self.rng);
                let q = self.words(o.question_words);
                let user = format!("Document:\n{}\n\nQuestion: {q}", self.documents[d]);
                vec![self.turn(start, self.prompt("Answer from the document.", &user))]
            }
            SyntheticKind::SystemPrompt => {
                let q = self.words(o.question_words);
                vec![self.turn(start, self.prompt(&self.system.clone(), &q))]
            }
            SyntheticKind::NoReuse => {
                // A unique first line: distinct from the very first block.
                let body = self.words(o.doc_words);
                let text = format!("Request {index} {:016x}. {body}", self.rng.next_u64());
                vec![self.turn(start, self.prompt("Summarize the text.", &text))]
            }
            SyntheticKind::Chat => {
                let first = self.words(o.doc_words);
                let mut at = start;
                let mut turns = vec![self.turn(
                    at,
                    Prompt::Messages(vec![
                        Message::new("system", "You are a helpful assistant."),
                        Message::new("user", format!("Conversation {index}. {first}")),
                    ]),
                )];
                for _ in 1..o.turns {
                    at += exp_sample(&mut self.rng, o.think_time);
                    let next = self.words(o.question_words);
                    turns.push(self.turn(at, Prompt::FollowUp(next)));
                }
                turns
            }
        };
        Session { turns }
    }

    fn describe(&self) -> String {
        let o = self.o;
        let api = match o.api {
            Api::Completions => "completions",
            Api::Chat => "chat",
        };
        let what = match o.kind {
            SyntheticKind::Rag => format!(
                "RAG: {} documents of {} words, Zipf s = {}, questions of {} words ({api})",
                o.documents, o.doc_words, o.zipf, o.question_words
            ),
            SyntheticKind::Chat => format!(
                "chat sessions: {} turns, first message {} words, then {} words, think time {:?} (chat)",
                o.turns, o.doc_words, o.question_words, o.think_time
            ),
            SyntheticKind::SystemPrompt => format!(
                "one system prompt of {} words shared by all, questions of {} words ({api})",
                o.system_words, o.question_words
            ),
            SyntheticKind::NoReuse => {
                format!("no reuse: unique prompts of {} words ({api})", o.doc_words)
            }
        };
        format!(
            "{what}; Poisson arrivals at {} req/s, max_tokens {}, seed {}",
            o.rate, o.output_tokens, o.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kind: SyntheticKind) -> SyntheticOptions {
        SyntheticOptions {
            kind,
            api: Api::Completions,
            rate: 50.0,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            seed: 1,
            output_tokens: 8,
            documents: 5,
            doc_words: 40,
            zipf: 1.1,
            question_words: 6,
            system_words: 30,
            turns: 3,
            think_time: Duration::from_millis(500),
        }
    }

    fn text(p: &Prompt) -> &str {
        match p {
            Prompt::Text(t) => t,
            _ => panic!("not text"),
        }
    }

    #[test]
    fn poisson_rate_and_limits() {
        let p = synthetic_plan(&opts(SyntheticKind::NoReuse)).unwrap();
        // 500 expected; a wide margin keeps the test deterministic-safe.
        assert!((400..600).contains(&p.requests()), "{}", p.requests());
        assert!(p.span() <= Duration::from_secs(10));
        let o = SyntheticOptions {
            requests: Some(7),
            ..opts(SyntheticKind::Chat)
        };
        assert_eq!(synthetic_plan(&o).unwrap().requests(), 7);
        let same = synthetic_plan(&opts(SyntheticKind::Rag)).unwrap();
        let again = synthetic_plan(&opts(SyntheticKind::Rag)).unwrap();
        assert_eq!(
            text(&same.sessions[3].turns[0].prompt),
            text(&again.sessions[3].turns[0].prompt)
        );
        assert!(
            synthetic_plan(&SyntheticOptions {
                rate: 0.0,
                ..opts(SyntheticKind::Rag)
            })
            .is_err()
        );
    }

    #[test]
    fn reuse_shapes() {
        let sys = synthetic_plan(&opts(SyntheticKind::SystemPrompt)).unwrap();
        let (a, b) = (
            text(&sys.sessions[0].turns[0].prompt),
            text(&sys.sessions[1].turns[0].prompt),
        );
        let shared = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        assert!(shared > 100, "{shared}");
        let nr = synthetic_plan(&opts(SyntheticKind::NoReuse)).unwrap();
        let (a, b) = (
            text(&nr.sessions[0].turns[0].prompt),
            text(&nr.sessions[1].turns[0].prompt),
        );
        let shared = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        assert!(shared < 60, "{shared}");
        let rag = synthetic_plan(&opts(SyntheticKind::Rag)).unwrap();
        let docs: std::collections::HashSet<&str> = rag
            .sessions
            .iter()
            .map(|s| &text(&s.turns[0].prompt)[..120])
            .collect();
        assert!(docs.len() <= 5);
    }

    #[test]
    fn chat_sessions_follow_up() {
        let p = synthetic_plan(&opts(SyntheticKind::Chat)).unwrap();
        let s = &p.sessions[0];
        assert_eq!(s.turns.len(), 3);
        assert!(matches!(s.turns[0].prompt, Prompt::Messages(_)));
        assert!(matches!(s.turns[1].prompt, Prompt::FollowUp(_)));
        assert!(s.turns[1].at >= s.turns[0].at);
        let chat = SyntheticOptions {
            api: Api::Chat,
            ..opts(SyntheticKind::Rag)
        };
        let p = synthetic_plan(&chat).unwrap();
        assert_eq!(p.sessions[0].turns[0].prompt.api(), Api::Chat);
    }
}
