// tool_choice "required" / a named function on each family's real tokenizer and template (tests/data: Qwen3's small
// tokenizer and template, the Kimi-like tiktoken vocabulary with Kimi K2's template, the same vocabulary with Kimi
// K3's tag tokens added (kimi_k3_like below: we have no K3 tokenizer) and K3's template, gpt-oss's 200k vocabulary
// and template): the constraint lets through, token by token, the call that family's syntax writes -- special-token
// markers as their own tokens -- ends when the call closes, refuses arguments that break the parameters schema and
// a marker spelled in ordinary tokens, and what it lets through parses back into the call -- also when fed to the
// incremental parser token by token, as the server streams it.
#include <gtest/gtest.h>

#include <cmath>

#include "api/openai_protocol.h"
#include "runtime/token_mask.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "api/tool_stream.h"
#include "../support/scratch_dir.h"
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

// "kimi_k3_like": the Kimi-like vocabulary with K3's tag markers as special tokens at free ids past its ranks.
std::unique_ptr<tok::Tokenizer> open_tokenizer(const std::string& name) {
    if (name != "kimi_k3_like") return test::open_tokenizer(name);
    const std::filesystem::path dir = test::scratch_dir("k3_tokenizer");
    const std::string src = k_data + "/tokenizers/kimi_like/";
    std::filesystem::copy_file(src + "tiktoken.model", dir / "tiktoken.model");
    nlohmann::json cfg = nlohmann::json::parse(test::read_file(src + "tokenizer_config.json"));
    int32_t id = 65560;
    for (const char* m : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"})
        cfg["added_tokens_decoder"][std::to_string(id++)] = {{"content", m}, {"lstrip", false}, {"normalized", false},
                                                            {"rstrip", false}, {"single_word", false},
                                                            {"special", true}};
    std::ofstream(dir / "tokenizer_config.json") << cfg.dump(1);
    return tok::load_tokenizer(dir.string());
}

}  // namespace

class ToolChoice : public ::testing::TestWithParam<Family> {};

TEST_P(ToolChoice, ForcesTheFamilysCallSyntax) {
    const Family f = GetParam();
    const std::unique_ptr<tok::Tokenizer> tok = open_tokenizer(f.tokenizer);
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
            // nor as an ordinary 0x00 byte followed by its text (the trie spells a marker as 0x00 and its text)
            for (int32_t id : tok->encode(std::string(1, '\0'), false))
                EXPECT_FALSE(std::isfinite(logits[size_t(id)])) << "the 0x00 byte token " << id;
        }
        c->accept(ids[i]);
    }
    EXPECT_TRUE(c->finished());
    const ToolOutput out = parse_tool_calls(f.syntax, tok->decode(ids), r.prompt_text);
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(out.content, "");
    EXPECT_FALSE(out.cut);
    // token by token, as the server feeds it: the same call, its arguments in several fragments
    ToolCallStream stream(f.syntax, r.prompt_text);
    ToolDelta all;
    size_t fragments = 0;
    for (int32_t id : ids) {
        ToolDelta d = stream.push(tok->decode({id}));
        for (const CallDelta& cd : d.calls) fragments += !cd.arguments.empty();
        all.append(std::move(d));
    }
    all.append(stream.finish());
    ASSERT_EQ(all.calls.size(), 1u);
    EXPECT_EQ(all.calls[0].name, "get_weather");
    EXPECT_EQ(all.calls[0].arguments, out.calls[0].arguments);
    EXPECT_EQ(all.content, "");
    EXPECT_GT(fragments, 1u);
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
        Family{"kimi_k3_like", "moonshotai-Kimi-K3.jinja", ToolSyntax::kimi_k3,
               "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
               "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>"
               "{\"city\": \"Oslo\"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"},
        Family{"gptoss", "openai-gpt-oss-120b.jinja", ToolSyntax::harmony,
               " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>"}));
