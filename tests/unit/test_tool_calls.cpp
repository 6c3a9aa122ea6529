// Tool-call parsing (api/tool_calls) against what each family's real chat template writes for an assistant turn with
// tool calls (tests/data/templates: Qwen3, Kimi K2, Kimi K3, gpt-oss): render the conversation, take the assistant
// turn's text, and parse it back into the same calls. Plus the forms models emit that templates do not (content
// before a call, a call cut short, a block that is not JSON). The incremental parser itself: test_tool_stream.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "api/tool_calls.h"
#include "tokenizer/chat_template.h"

using namespace sluice;
using namespace sluice::api;
using ojson = nlohmann::ordered_json;

namespace {

std::string read(const std::string& name) {
    std::ifstream in(std::string(SLUICE_TEST_DATA_DIR) + "/templates/" + name, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The assistant turn as the template writes it: the whole conversation minus its prefix up to the generation prompt
// (returned in `prompt`).
std::string assistant_turn(const std::string& source, const ojson& calls, std::string* prompt = nullptr) {
    ChatTemplate t(source);
    ChatRequest req;
    req.messages = ojson::array({{{"role", "user"}, {"content", "Weather in Paris and Oslo?"}}});
    req.add_generation_prompt = true;
    const std::string prefix = t.apply(req);
    req.messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
    req.add_generation_prompt = false;
    const std::string whole = t.apply(req);
    EXPECT_EQ(whole.substr(0, prefix.size()), prefix);
    if (prompt) *prompt = prefix;
    return whole.substr(prefix.size());
}

ojson call(const char* name, const char* args) {
    return {{"id", "x"}, {"type", "function"}, {"function", {{"name", name}, {"arguments", ojson::parse(args)}}}};
}

}  // namespace

struct Family {
    const char* file;
    ToolSyntax syntax;
    bool several;  // the template writes every call (gpt-oss's writes the first)
};

class ToolCallsFromTemplates : public ::testing::TestWithParam<Family> {};

TEST_P(ToolCallsFromTemplates, RoundTrip) {
    const Family f = GetParam();
    const std::string src = read(f.file);
    ASSERT_FALSE(src.empty()) << f.file;
    EXPECT_EQ(tool_syntax_of(src), f.syntax);
    ojson calls = ojson::array(
        {call("get_weather", R"({"city": "Paris \"Ville\" &amp; <b>", "days": [1, 2], "opts": {"x": null}})")});
    if (f.several) calls.push_back(call("get_time", R"({"zone": "Europe/Oslo", "n": 2.5, "dst": true})"));
    if (f.several) calls.push_back(call("ping", "{}"));
    std::string prompt;
    const std::string turn = assistant_turn(src, calls, &prompt);
    const ToolOutput out = parse_tool_calls(f.syntax, turn, prompt);
    EXPECT_FALSE(out.cut);
    ASSERT_EQ(out.calls.size(), calls.size()) << turn;
    for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(out.calls[i].name, calls[i]["function"]["name"]) << turn;
        EXPECT_EQ(ojson::parse(out.calls[i].arguments), calls[i]["function"]["arguments"]) << turn;
        EXPECT_FALSE(out.calls[i].id.empty());
    }
    if (f.syntax == ToolSyntax::kimi) EXPECT_EQ(out.calls[0].id, "functions.get_weather:0");
    for (const char* marker : {"<tool_call>", "<|tool_call", "<|call|>", "to=functions", "<|open|>", "<|sep|>"})
        EXPECT_EQ(out.content.find(marker), std::string::npos) << out.content;
}

INSTANTIATE_TEST_SUITE_P(Families, ToolCallsFromTemplates,
                         ::testing::Values(Family{"Qwen-Qwen3-0.6B.jinja", ToolSyntax::hermes, true},
                                           Family{"moonshotai-Kimi-K2.jinja", ToolSyntax::kimi, true},
                                           Family{"moonshotai-Kimi-K3.jinja", ToolSyntax::kimi_k3, true},
                                           Family{"openai-gpt-oss-120b.jinja", ToolSyntax::harmony, false}));

TEST(ToolCalls, ContentBesideCallsAndBrokenBlocks) {
    ToolOutput h = parse_tool_calls(ToolSyntax::hermes,
                                    "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"
                                    "<tool_call>not json</tool_call>");
    ASSERT_EQ(h.calls.size(), 1u);
    EXPECT_EQ(h.calls[0].arguments, R"({"a":1})");
    EXPECT_EQ(h.content, "Let me check.\n<tool_call>not json</tool_call>");
    EXPECT_EQ(h.calls[0].id.substr(0, 5), "call_");
    // cut short by max_tokens: the unfinished block stays text
    EXPECT_TRUE(parse_tool_calls(ToolSyntax::hermes, "<tool_call>\n{\"name\": \"f\", \"argu").calls.empty());
    EXPECT_EQ(parse_tool_calls(ToolSyntax::hermes, "plain answer").content, "plain answer");

    const ToolOutput k = parse_tool_calls(
        ToolSyntax::kimi, "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.search:3"
                          "<|tool_call_argument_begin|>{\"q\": \"x\"}<|tool_call_end|><|tool_calls_section_end|>");
    ASSERT_EQ(k.calls.size(), 1u);
    EXPECT_EQ(k.calls[0].name, "search");
    EXPECT_EQ(k.calls[0].id, "functions.search:3");
    EXPECT_EQ(k.calls[0].arguments, R"({"q":"x"})");
    EXPECT_EQ(k.content, "Sure.");

    const ToolOutput g = parse_tool_calls(
        ToolSyntax::harmony, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
                             "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}"
                             "<|call|>");
    ASSERT_EQ(g.calls.size(), 1u);
    EXPECT_EQ(g.calls[0].name, "get_weather");
    EXPECT_EQ(g.calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(g.content, "");
    EXPECT_EQ(parse_tool_calls(ToolSyntax::harmony,
                               "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>"
                               "Hello.<|return|>")
                  .content,
              "Hello.");
    const nlohmann::json j = tool_calls_json(k.calls);
    EXPECT_EQ(j[0]["type"], "function");
    EXPECT_EQ(j[0]["function"]["name"], "search");
}
