// The OpenAI request and response shapes, shared by the HTTP server (api/server) and the batch runner
// (api/batch_job): a request body is validated completely into engine RequestParams before anything runs, every
// problem is an ApiError that names the field (the OpenAI error envelope, HTTP 400), and responses are built here.
// Nothing from a request body reaches the engine except through parse_request's checked fields.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/tool_calls.h"
#include "api/tool_stream.h"
#include "runtime/engine.h"
#include "runtime/token_constraint.h"

namespace sluice {
class ChatTemplate;
class TokenTrie;
namespace tok {
class Tokenizer;
class StreamDecoder;
}  // namespace tok
}  // namespace sluice

namespace sluice::api {

// {"error": {"message", "type", "param", "code"}} with the HTTP status to send it with.
struct ApiError : std::runtime_error {
    ApiError(int status, std::string type, std::string message, std::string param = {}, std::string code = {});
    int status;          // 400, 401, 404, 413, 429, 500, 503
    std::string type;    // invalid_request_error, authentication_error, not_found_error, server_error, ...
    std::string param;   // the offending field ("messages[2].content", "max_tokens"); empty -> null
    std::string code;    // e.g. context_length_exceeded; empty -> null
};
nlohmann::json error_json(const ApiError& e);
// Throws a 400 invalid_request_error naming the offending field (`param`).
[[noreturn]] void bad_request(const std::string& param, const std::string& message, const char* code = "invalid_value");
// A name OpenAI accepts for a schema or a function: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_openai_name(const std::string& name);

enum class Endpoint { chat_completions, completions };

constexpr int k_max_prompts = 1024;  // completions: prompts in one request, and choices (prompts x n) in all

// The vocabulary's token trie for structured output (runtime/token_mask.h), built on the first request that asks
// for one and then shared (thread-safe).
class LazyTokenTrie {
public:
    LazyTokenTrie() = default;
    // markers: special tokens kept in the trie (TokenTrie::from_tokenizer), for the tool-call syntaxes
    explicit LazyTokenTrie(std::vector<std::string> markers) : markers_(std::move(markers)) {}
    std::shared_ptr<const TokenTrie> get(const tok::Tokenizer& tok, int64_t vocab_size);

private:
    std::vector<std::string> markers_;
    std::mutex mu_;
    std::shared_ptr<const TokenTrie> trie_;
};

// What parsing needs from the loaded model.
struct ModelContext {
    std::string model_id;                    // the name /v1/models reports (any `model` string is accepted)
    const tok::Tokenizer* tokenizer = nullptr;  // required
    const ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions answers 400
    int64_t vocab_size = 0;                  // the model's logits width
    int64_t max_context_tokens = 0;          // one request's prompt + completion may not exceed this
    int64_t default_max_tokens = 0;          // when the request gives none: what is left of the context, capped here
    int64_t speculative_tokens = 0;          // > 0: greedy requests draft this many tokens per step (serve --speculative)
    std::function<Drafter()> make_drafter;   // set: drafts from a draft model, one drafter per choice; else prompt lookup
    bool draft_gate = true;                  // drafting requests get RequestParams::draft_gate
    double draft_bytes_per_token = 0;        // ... and this drafter cost
    std::shared_ptr<LazyTokenTrie> token_trie = std::make_shared<LazyTokenTrie>();  // copies share it
    std::shared_ptr<LazyTokenTrie> tool_token_trie = std::make_shared<LazyTokenTrie>(tool_call_markers());
    bool turn_cache_points = false;          // chat prompts carry their turn boundaries (api/turn_boundaries.h)
};

// response_format: empty for {"type": "text"}, else the constraint of "json_object" / "json_schema" (a 400 naming
// the field, or the schema keyword's path under response_format.json_schema.schema, when it is invalid).
ConstraintFactory parse_response_format(const nlohmann::ordered_json& v, const ModelContext& ctx);

struct ParsedRequest {
    Endpoint endpoint = Endpoint::chat_completions;
    std::string model;            // echoed in responses
    RequestParams params;         // prompt ids, limits, sampling, penalties, bias; one per choice (seed + index)
    std::function<Drafter()> make_drafter;  // set when params drafts from a model: a drafter (own state) per choice
    int n = 1;                    // choices; choice i runs with sampling.seed + i
    bool stream = false;
    bool include_usage = false;   // stream_options.include_usage
    std::vector<std::string> stop;  // text stop sequences (<= 4); the returned text excludes them
    bool logprobs = false;        // chat: logprobs; completions: logprobs != null
    int top_logprobs = 0;         // chat: 0..20; completions: the integer logprobs 0..5
    bool echo = false;            // completions only: each choice's text and logprobs start with its prompt's
    std::string prompt_text;      // the rendered chat prompt or the completions prompt string (empty for token ids)
    // Every prompt, in order (params.prompt is prompts[0]; chat has one). Choices are prompt-major: choice
    // k * n + i is prompt k's i-th; echo_texts[k] is what echo puts before prompt k's completion.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> echo_texts;
    int choices() const { return int(prompts.size()) * n; }
    std::vector<std::string> ignored_fields;  // accepted-and-ignored known fields, for a warning log line
    // chat with tools and tool_choice other than "none": the output's tool calls are parsed (tool_calls.h) into
    // message.tool_calls, finish_reason "tool_calls"
    bool parse_tools = false;
    ToolSyntax tool_syntax = ToolSyntax::hermes;
};

// tools, tool_choice and parallel_tool_calls of a chat body (after response_format): checks the tool definitions
// (each function's parameters compiled as a schema), sets r.parse_tools / r.tool_syntax, and for tool_choice
// "required" or a named function r.params.constraint (in the template's syntax). Returns the tools for the template (null
// when none).
nlohmann::ordered_json parse_tools(const nlohmann::ordered_json& body, const ModelContext& ctx, ParsedRequest& r);

// Validates `body` for `endpoint`. Throws ApiError (400 and the field) on: a body that is not an object, missing or
// mistyped required fields, values out of range (temperature 0..2, top_p 0..1, n 1..128, penalties -2..2,
// logit_bias ids outside the vocabulary or values outside -100..100, more than 4 stops, top_logprobs without
// logprobs), unknown fields (OpenAI's 400 "Unrecognized request argument supplied: X"), a prompt longer than the
// context (code context_length_exceeded), stream with n > 1 is allowed.
//
// Details (what a client sees):
// - null counts as absent for every optional field; required: `model` (any string) and `messages` / `prompt`.
// - Context: a prompt of max_context_tokens or more is a 400 context_length_exceeded ("This model's maximum context
//   length is N tokens. However, you requested M tokens (P in the messages, C in the completion). ..."). A prompt
//   that fits but leaves less room than max_tokens asks for is not an error: max_new_tokens is lowered to what is
//   left (a local server's behaviour; the choice then ends with finish_reason "length"). No max_tokens: what is
//   left, capped at default_max_tokens (<= 0: uncapped). max_completion_tokens wins over max_tokens.
// - Sampling defaults are OpenAI's: temperature 1 (0 = greedy), top_p 1; extensions top_k (>= 0), min_p (0..1),
//   ignore_eos. No seed: one is drawn from std::random_device and stored in params.sampling.seed.
// - Speculative decoding (extension): with ctx.speculative_tokens > 0 every request drafts that many tokens per
//   step unless it says "speculative": false. Greedy tokens are the same either way; sampled ones follow the same
//   distribution (exact rejection sampling), reproducibly for a seed, but are other draws than without drafts.
//   "speculative": true on a server started without --speculative is a 400 naming `speculative`.
// - stop: a string or an array of at most 4 non-empty strings of at most 1024 bytes each.
// - chat logprobs: top_logprobs > 0 needs logprobs: true (top_logprobs: 0 alone is accepted).
// - chat: messages[i].role in system/developer/user/assistant/tool; content a string, an array of
//   {"type":"text","text":...} parts (joined with "\n", as vLLM does; other part types are a 400), or null/absent
//   for an assistant turn (the template then sees "", as with vLLM). name, tool_calls, tool_call_id, reasoning_content/reasoning/thinking and refusal reach the
//   template; a tool call's `arguments` string that holds a JSON object is handed to the template as that object
//   (templates index into it). "developer" becomes "system" unless the template itself mentions "developer".
//   tools (array of {"type":"function","function":{"name",...}}) reach the template; chat_template_kwargs (object)
//   and reasoning_effort (string) become template variables. tool_choice: none, auto, required or a named
//   function (see parse_tools); user, metadata, store, service_tier, ... are accepted and ignored (listed in
//   ignored_fields).
//   The rendered conversation (add_generation_prompt) is encoded without added special tokens.
// - completions: prompt a string (encoded with the tokenizer's BOS/EOS), an array of token ids (each in
//   [0, vocab_size)), or an array of up to k_max_prompts strings or of token-id arrays (one kind; each element is one
//   prompt: n choices each, prompt-major, at most k_max_prompts choices in all). Each prompt must fit the context
//   (a 400 naming prompt[i]). max_tokens may be 0 (only the prompt runs: with echo, scoring). logprobs is an
//   integer 0..5 (top_logprobs = that). echo: true puts the prompt before the completion: the prompt string as sent,
//   or the ids decoded (special tokens skipped, as generated text is); with logprobs the prompt's tokens lead tokens,
//   token_logprobs (null for the first: nothing predicts it), top_logprobs (null for the first) and text_offset
//   (each token's bytes from 0, as the completion counts them), computed from the raw logits as `sluice logits`
//   gives them (no penalties or bias). A non-empty suffix is a 400 (not supported); best_of only 1.
// - response_format (both endpoints): text, json_object (any JSON object) or json_schema {name, schema, strict,
//   description}: the output is constrained to the schema by a token mask (see parse_response_format); strict is
//   accepted either way and the schema is always enforced. Nothing else is refused with it: speculation, n,
//   penalties, bias, logprobs and stop sequences all combine with the mask.
// - Values nested deeper than 64 levels (tools, tool call arguments, template kwargs) are a 400.
// Template or tokenizer failures are a 400 naming `messages` / `prompt`; a bug inside is a 500 server_error. No
// other exception leaves this function.
ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const ModelContext& ctx);
// The same for a body parsed as ordered_json: prefer this one, since it keeps the client's key order in what reaches
// the chat template (tool schemas render in the order the client wrote them; nlohmann::json sorts keys).
ParsedRequest parse_request(Endpoint endpoint, const nlohmann::ordered_json& body, const ModelContext& ctx);

// Turns one choice's generated ids into text: incremental UTF-8 decoding, text stop sequences (held back while a
// suffix could still become one; the stop text itself is never returned), and logprob entries.
class ChoiceText {
public:
    ChoiceText(const tok::Tokenizer& tok, std::vector<std::string> stop);
    ChoiceText(ChoiceText&&) noexcept;
    ChoiceText& operator=(ChoiceText&&) noexcept;
    ~ChoiceText();
    // Feeds one generated id; returns the text that is now safe to send. Sets stopped() when a stop sequence
    // appeared (the text up to it has then been returned and later ids must not be pushed).
    std::string push(int32_t id);
    // Special tokens in `ids` come out as their text (tool-call markers, for the parser of tool_stream.h); other
    // special tokens are skipped as always.
    void keep_specials(std::vector<int32_t> ids) { kept_ = std::move(ids); }
    // The held-back text at the end, with a trailing partial UTF-8 sequence as U+FFFD. Stops there too (check
    // stopped() after it: a stop found only here still makes the finish reason "stop").
    std::string finish();
    bool stopped() const { return stopped_; }
    const std::string& text() const { return text_; }  // everything returned so far
    // The raw bytes of the tokens pushed so far: where the next token starts (completions text_offset), counted as
    // the whole answer counts it (each token's bytes), also while a partial UTF-8 character is still held back.
    size_t offset() const { return raw_bytes_; }

private:
    const tok::Tokenizer* tok_;
    std::unique_ptr<tok::StreamDecoder> dec_;
    std::vector<std::string> stop_;
    std::string held_, text_;
    std::vector<int32_t> kept_;
    size_t raw_bytes_ = 0;
    bool stopped_ = false;
};

// The entry of a prompt's first token under echo: {token, logprob: null, bytes, top_logprobs: null}.
nlohmann::json first_prompt_entry(const tok::Tokenizer& tok, int32_t id);
// One choice's logprob entry for a token: chat {token, logprob, bytes, top_logprobs[]}. logprob is
// log_softmax(logits)[id] in double (-9999 when not finite); token is the id's text (special tokens included;
// U+FFFD for a partial UTF-8 sequence) and bytes its raw bytes; top_logprobs holds the top_n (0..20) ids by logit,
// lower id first on ties, each {token, logprob, bytes}. Ids past the tokenizer's vocabulary have token "".
nlohmann::json chat_logprob_entry(const tok::Tokenizer& tok, int32_t id, std::span<const float> logits, int top_n);
// A choice's (or one chunk's) logprobs object in the endpoint's shape, from chat_logprob_entry() entries made with
// top_n = req.top_logprobs. Chat: {"content": entries, "refusal": null}. Completions: {tokens, token_logprobs,
// top_logprobs, text_offset}, where top_logprobs[i] is {token text: logprob} for the top ids plus the chosen one
// (as OpenAI: up to logprobs + 1 keys; null for a first_prompt_entry) and text_offset[i] = text_offset + the bytes of the tokens before i (pass
// the bytes of text already sent for this choice: ChoiceText::offset() before the chunk's first token).
nlohmann::json logprobs_object(const ParsedRequest& req, const nlohmann::json& entries, size_t text_offset);

struct Usage {
    int64_t prompt_tokens = 0, completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache (prompt_tokens_details.cached_tokens)
};
nlohmann::json usage_json(const Usage& u);

struct ChoiceResult {
    std::string text;
    std::string finish_reason;            // "stop" or "length"
    nlohmann::json logprobs;              // null, or the endpoint's logprobs object (chat_logprobs_json /
                                          // completion_logprobs_json)
    std::vector<ToolCall> tool_calls;     // chat: message.tool_calls (content null when text is empty)
    void add(const std::vector<CallDelta>& deltas);  // the calls' deltas of a stream, joined
};

// Non-streaming bodies: chat.completion / text_completion.
nlohmann::json completion_json(const ParsedRequest& req, const std::string& id, int64_t created,
                               const std::vector<ChoiceResult>& choices, const Usage& usage);
// One streaming chunk (chat.completion.chunk / text_completion): a delta for choice `index`; role_first puts
// {"role":"assistant","content":""} in a chat delta (content = delta_text); finish_reason empty -> null. A chat
// chunk that finishes without text has delta {} (the spec's last chunk). With include_usage every chunk carries
// "usage": null. logprobs: the chunk's logprobs object (chat_logprobs_json / completion_logprobs_json) or null.
nlohmann::json chunk_json(const ParsedRequest& req, const std::string& id, int64_t created, int index,
                          const std::string& delta_text, const std::string& finish_reason, bool role_first,
                          const nlohmann::json& logprobs = nullptr);
// Tool-call deltas (ToolCallStream's) as stream chunks, in OpenAI's shape: a call's first delta as one with its
// index, id, type and function name (arguments ""), each fragment of arguments as one with the index and the
// fragment only; the finish_reason goes in a chunk after these.
std::vector<nlohmann::json> tool_call_chunks(const ParsedRequest& req, const std::string& id, int64_t created,
                                             int index, const std::vector<CallDelta>& calls);
// The final usage chunk (choices: []) sent when include_usage is set.
nlohmann::json usage_chunk_json(const ParsedRequest& req, const std::string& id, int64_t created, const Usage& u);

// "chatcmpl-" / "cmpl-" + 24 random hex digits.
std::string new_completion_id(Endpoint endpoint);

}  // namespace sluice::api
