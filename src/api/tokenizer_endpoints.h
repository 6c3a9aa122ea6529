// The tokenizer routes of the server: POST /tokenize, POST /detokenize and GET /tokenizer_info, in the shapes both
// llama.cpp's server and vLLM's use, so evaluation harnesses that tokenize through the server (lm-evaluation-
// harness's remote tokenizer: tokenizer_info, then /tokenize {"prompt", "add_special_tokens"} and /detokenize
// {"tokens"} -> {"prompt"}) count tokens exactly as the model reads them. Bodies are validated here like completion
// requests: a problem is an ApiError 400 naming the field; nothing else leaves these functions.
#pragma once

#include <nlohmann/json.hpp>

#include "api/openai_protocol.h"

namespace sluice::api {

// {"content": text} (llama.cpp; add_special defaults to false) or {"prompt": text} (vLLM; add_special_tokens
// defaults to true), with optional "add_special" / "add_special_tokens" (booleans: BOS/EOS as the tokenizer's
// post-processor adds them; special-token strings in the text are always recognised), "model" (any string) and
// "return_token_strs" (boolean). Answers {"tokens", "count", "max_model_len"} and "token_strs" when asked.
nlohmann::json tokenize_json(const nlohmann::ordered_json& body, const ModelContext& ctx);
// {"tokens": [ids]} (each in [0, the tokenizer's vocabulary)), optional "model". Answers the decoded text (special
// tokens kept) as both "content" (llama.cpp) and "prompt" (vLLM).
nlohmann::json detokenize_json(const nlohmann::ordered_json& body, const ModelContext& ctx);
// The tokenizer's facts: bos/eos/pad token strings (tokenizer_config.json's, else the tokenizer's own BOS/EOS ids
// decoded; null when unknown) and their ids, the chat template source (null without one), model_max_length (the
// context one request may use), vocab_size.
nlohmann::json tokenizer_info_json(const ModelContext& ctx);

}  // namespace sluice::api
