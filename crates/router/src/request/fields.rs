//! The one definition of each set of body fields the router reads: the
//! fields only the router sets ([`ROUTER_FIELDS`]), and the typed
//! [`Fields`] routing, admission, the response cache and migration read
//! (with [`Present`], those read by presence alone).

use serde_json::Value;

/// The body fields only the router sets, taken out of a client's request
/// before any worker sees it.
///
/// `kv_transfer_params` is the prefill/decode handshake (vLLM's NIXL
/// connector, `protocol::kv_transfer`): a decode worker given
/// `do_remote_prefill` with a `remote_host` and `remote_port` connects
/// there to pull KV blocks. Only the router, which chose and asked the
/// prefill worker, may name one; a client's would make the decode worker
/// connect to a host of the client's choosing. Removed from every request
/// (completions, chat, every other forwarded route; disaggregated or
/// colocated; `serve` and the endpoint picker).
pub const ROUTER_FIELDS: [&str; 1] = ["kv_transfer_params"];

/// The small fields the router reads, typed once when the body is read;
/// an absent field is `Null`. The prompt (`prompt`, or a chat's
/// `messages` and the renderer's fields) stays in the body's entries and
/// is read once, by the prompt pipeline.
#[derive(Debug, Default)]
pub struct Fields {
    /// Routing: the model named (an adapter's name or a base model).
    pub model: Value,
    /// Routing, migration, the response cache: a streamed answer.
    pub stream: Value,
    /// Routing (the first block's salt), migration.
    pub cache_salt: Value,
    /// Admission: a possible tenant source.
    pub user: Value,
    /// Admission (the tokens limit), migration.
    pub max_tokens: Value,
    /// Admission, migration (a chat's `max_tokens` first).
    pub max_completion_tokens: Value,
    /// The response cache: deterministic when 0.
    pub temperature: Value,
    /// The response cache: deterministic when an integer.
    pub seed: Value,
    /// The response cache and migration: one answer only.
    pub n: Value,
    /// Migration: several answers.
    pub best_of: Value,
    /// Migration: several answers.
    pub use_beam_search: Value,
    /// Migration: constrained decoding unless `{"type": "text"}`.
    pub response_format: Value,
    /// Migration.
    pub logprobs: Value,
    /// Migration.
    pub prompt_logprobs: Value,
    /// Migration: stop strings.
    pub stop: Value,
    /// Migration.
    pub echo: Value,
    /// Migration: the client asked for token ids itself.
    pub return_token_ids: Value,
    /// Migration: output-token penalties (inexact across workers).
    pub presence_penalty: Value,
    /// Migration: output-token penalties.
    pub frequency_penalty: Value,
    /// Fields whose presence alone decides (any value but `null`): they
    /// are not parsed.
    pub present: Present,
}

/// Which of the fields migration reads by presence were sent (with a
/// value other than `null`).
#[derive(Debug, Default)]
pub struct Present {
    /// Constrained decoding.
    pub guided_json: bool,
    pub guided_regex: bool,
    pub guided_choice: bool,
    pub guided_grammar: bool,
    pub structured_outputs: bool,
    /// Tools.
    pub tools: bool,
    pub functions: bool,
    /// A completion's suffix.
    pub suffix: bool,
    /// `stream_options` (vLLM refuses it without `stream`).
    pub stream_options: bool,
}

impl Fields {
    /// Reads the entry `key` whose value is the JSON `text`, if it is one of
    /// these fields.
    pub(super) fn read(&mut self, key: &str, text: &str) -> Result<(), serde_json::Error> {
        if let Some(slot) = self.slot(key) {
            *slot = serde_json::from_str(text)?;
        } else if let Some(flag) = self.present.flag(key) {
            *flag = text != "null";
        }
        Ok(())
    }

    /// The slot of `key`, when it is one of the typed fields.
    fn slot(&mut self, key: &str) -> Option<&mut Value> {
        Some(match key {
            "model" => &mut self.model,
            "stream" => &mut self.stream,
            "cache_salt" => &mut self.cache_salt,
            "user" => &mut self.user,
            "max_tokens" => &mut self.max_tokens,
            "max_completion_tokens" => &mut self.max_completion_tokens,
            "temperature" => &mut self.temperature,
            "seed" => &mut self.seed,
            "n" => &mut self.n,
            "best_of" => &mut self.best_of,
            "use_beam_search" => &mut self.use_beam_search,
            "response_format" => &mut self.response_format,
            "logprobs" => &mut self.logprobs,
            "prompt_logprobs" => &mut self.prompt_logprobs,
            "stop" => &mut self.stop,
            "echo" => &mut self.echo,
            "return_token_ids" => &mut self.return_token_ids,
            "presence_penalty" => &mut self.presence_penalty,
            "frequency_penalty" => &mut self.frequency_penalty,
            _ => return None,
        })
    }

    /// Whether the answer is streamed (`stream` is `true`).
    pub fn streamed(&self) -> bool {
        self.stream == true
    }

    /// `max_tokens`, else `max_completion_tokens`, when a number.
    pub fn max_tokens(&self) -> Option<u64> {
        self.max_tokens
            .as_u64()
            .or(self.max_completion_tokens.as_u64())
    }
}

impl Present {
    fn flag(&mut self, key: &str) -> Option<&mut bool> {
        Some(match key {
            "guided_json" => &mut self.guided_json,
            "guided_regex" => &mut self.guided_regex,
            "guided_choice" => &mut self.guided_choice,
            "guided_grammar" => &mut self.guided_grammar,
            "structured_outputs" => &mut self.structured_outputs,
            "tools" => &mut self.tools,
            "functions" => &mut self.functions,
            "suffix" => &mut self.suffix,
            "stream_options" => &mut self.stream_options,
            _ => return None,
        })
    }

    /// Whether any constrained decoding field was sent.
    pub fn constrained(&self) -> bool {
        self.guided_json
            || self.guided_regex
            || self.guided_choice
            || self.guided_grammar
            || self.structured_outputs
    }
}
