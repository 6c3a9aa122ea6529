// tool_choice "required" / a named function on each family's real tokenizer and template (tests/data: Qwen3's small
// tokenizer and template, the Kimi-like tiktoken vocabulary with Kimi K2's template, gpt-oss's 200k vocabulary and
// template): the constraint lets through, token by token, the call that family's syntax writes -- special-token
// markers as their own tokens -- ends when the call closes, refuses arguments that break the parameters schema and
// a marker spelled in ordinary tokens, and what it lets through parses back into the call.
#include <gtest/gtest.h>

#include <cmath>

#include "api/openai_protocol.h"
#include "runtime/token_mask.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "../support/test_tokenizers.h"

using namespace sluice;
using namespace sluice::api;

namespace {

struct Family {
    const char* tokenizer;
    const char* tpl;
    ToolSyntax syntax;
    const char* call;  // what the model writes, special tokens as text
};

const std::string k_data = SLUICE_TEST_DATA_DIR;

}  // namespace

class ToolChoice : public ::testing::TestWithParam<Family> {};

TEST_P(ToolChoice, ForcesTheFamilysCallSyntax) {
    const Family f = GetParam();
    const std::unique_ptr<tok::Tokenizer> tok = test::open_tokenizer(f.tokenizer);
    ChatTemplate tpl(test::read_file(k_data + "/templates/" + f.tpl));
    ModelContext ctx;
    ctx.model_id = "m";
    ctx.tokenizer = tok.get();
    ctx.chat_template = &tpl;
    ctx.vocab_size = tok->vocab_size();
    ctx.max_context_tokens = 8192;
    const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
                  {"type": "function", "function": {"name": "get_time", "description": "Time"}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})";
    const ParsedRequest r = parse_request(Endpoint::chat_completions, nlohmann::ordered_json::parse(body), ctx);
    EXPECT_EQ(r.tool_syntax, f.syntax);
    ASSERT_TRUE(r.params.constraint);
    std::unique_ptr<TokenConstraint> c = r.params.constraint();
    const std::vector<int32_t> ids = tok->encode(f.call, false);
    std::vector<float> logits;
    for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_FALSE(c->finished()) << i;
        logits.assign(size_t(ctx.vocab_size), 0.0f);
        ASSERT_TRUE(c->mask(logits, {}));
        ASSERT_TRUE(std::isfinite(logits[size_t(ids[i])]))
            << "token " << i << " '" << tok->decode({ids[i]}) << "' of " << f.call;
        if (i == 0 && f.syntax != ToolSyntax::hermes) {
            // the first marker only as its special token, never spelled out
            const std::vector<int32_t> spelled = tok->encode("<|", false);
            for (int32_t id : spelled) EXPECT_FALSE(std::isfinite(logits[size_t(id)]));
        }
        c->accept(ids[i]);
    }
    EXPECT_TRUE(c->finished());
    const ToolOutput out = parse_tool_calls(f.syntax, tok->decode(ids));
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"Oslo"})");
    // arguments without the required city: the closing brace is refused
    std::unique_ptr<TokenConstraint> d = r.params.constraint();
    const std::string call = f.call;
    const std::string before_args = call.substr(0, call.find("{\"city\""));
    for (int32_t id : tok->encode(before_args + "{", false)) d->accept(id);
    logits.assign(size_t(ctx.vocab_size), 0.0f);
    ASSERT_TRUE(d->mask(logits, {}));
    for (int32_t id = 0; id < ctx.vocab_size; ++id)
        if (std::isfinite(logits[size_t(id)])) {
            const std::string t = tok->decode({id});
            EXPECT_EQ(t.find('}'), std::string::npos) << t;
        }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ToolChoice,
    ::testing::Values(
        Family{"qwen3_small", "Qwen-Qwen3-0.6B.jinja", ToolSyntax::hermes,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"},
        Family{"kimi_like", "moonshotai-Kimi-K2.jinja", ToolSyntax::kimi,
               "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
               "{\"city\": \"Oslo\"}<|tool_call_end|><|tool_calls_section_end|>"},
        Family{"gptoss", "openai-gpt-oss-120b.jinja", ToolSyntax::harmony,
               " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>"}));
