// OpenAI protocol: request validation into RequestParams (every bad-input class a 400 naming its field), context
// length handling, and the response/chunk shapes (a choice's text and the logprobs: test_choice_text.cpp).
// Uses the real qwen3_small tokenizer with Qwen3's chat template, and deepseek_v3_small (which adds BOS).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "api/openai_protocol.h"
#include "runtime/token_mask.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::api;
using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const fs::path k_data(SLUICE_TEST_DATA_DIR);

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const tok::Tokenizer& qwen() {
    static auto t = tok::load_tokenizer((k_data / "tokenizers" / "qwen3_small").string());
    return *t;
}
const tok::Tokenizer& deepseek() {
    static auto t = tok::load_tokenizer((k_data / "tokenizers" / "deepseek_v3_small").string());
    return *t;
}
const ChatTemplate& qwen_template() {
    static ChatTemplate t(read_file(k_data / "templates" / "Qwen-Qwen3-0.6B.jinja"));
    return t;
}

ModelContext chat_ctx() {
    ModelContext c;
    c.model_id = "qwen-test";
    c.tokenizer = &qwen();
    c.chat_template = &qwen_template();
    c.vocab_size = qwen().vocab_size();
    c.max_context_tokens = 4096;
    c.default_max_tokens = 256;
    return c;
}
ModelContext completions_ctx() {
    ModelContext c = chat_ctx();
    c.tokenizer = &deepseek();
    c.chat_template = nullptr;
    c.vocab_size = deepseek().vocab_size();
    return c;
}

ParsedRequest chat(const std::string& body, const ModelContext& ctx = chat_ctx()) {
    return parse_request(Endpoint::chat_completions, json::parse(body), ctx);
}
ParsedRequest completions(const std::string& body, const ModelContext& ctx = completions_ctx()) {
    return parse_request(Endpoint::completions, json::parse(body), ctx);
}

std::vector<int32_t> render_and_encode(const std::string& messages, const std::string& tools = "null") {
    ChatRequest r;
    r.messages = ordered_json::parse(messages);
    r.tools = ordered_json::parse(tools);
    r.add_generation_prompt = true;
    return qwen().encode(qwen_template().apply(r), false);
}

// The ApiError that parsing `body` throws (fails the test when it does not throw one).
ApiError error_of(Endpoint ep, const std::string& body, const ModelContext& ctx) {
    try {
        parse_request(ep, json::parse(body), ctx);
    } catch (const ApiError& e) {
        return e;
    }
    ADD_FAILURE() << "no ApiError for " << body;
    return ApiError(0, "", "");
}

const char* k_msgs = R"("messages": [{"role": "user", "content": "Hi there"}])";
std::string k_msgs_body() { return std::string("{") + k_msgs + "}"; }

}  // namespace

TEST(OpenAiRequest, ResponseFormatMakesAConstraint) {
    const std::string m = std::string(R"({"model": "m", )") + k_msgs;
    EXPECT_FALSE(chat(m + R"(, "response_format": {"type": "text"}})").params.constraint);
    EXPECT_TRUE(chat(m + R"(, "response_format": {"type": "json_object"}})").params.constraint);
    const ParsedRequest r = completions(R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema",
        "json_schema": {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type":
        "integer"}}, "required": ["a"], "additionalProperties": false}}}})");
    ASSERT_TRUE(r.params.constraint);
    auto c = r.params.constraint();
    EXPECT_FALSE(c->finished());
}

TEST(OpenAiRequest, ToolChoice) {
    const std::string m = std::string(R"({"model": "m", )") + k_msgs +
                          R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                              {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
    const ParsedRequest a = chat(m + "}");
    EXPECT_TRUE(a.parse_tools);  // auto by default
    EXPECT_EQ(a.tool_syntax, ToolSyntax::hermes);
    EXPECT_FALSE(a.params.constraint);
    EXPECT_FALSE(chat(m + R"(, "tool_choice": "none"})").parse_tools);
    for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "get_weather"}})"}) {
        const ParsedRequest r = chat(m + R"(, "tool_choice": )" + choice + "}");
        EXPECT_TRUE(r.parse_tools);
        ASSERT_TRUE(r.params.constraint) << choice;
        // the constraint writes one hermes call with the parameters' schema
        auto c = r.params.constraint();
        auto* jc = dynamic_cast<JsonConstraint*>(c.get());
        ASSERT_TRUE(jc);
        EXPECT_TRUE(jc->feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}"));
        EXPECT_FALSE(c->finished());
        EXPECT_TRUE(jc->feed("}\n</tool_call>"));
        EXPECT_TRUE(c->finished());
        auto c2 = r.params.constraint();
        EXPECT_FALSE(dynamic_cast<JsonConstraint*>(c2.get())->feed("<tool_call>\n{\"name\": \"get_weather\", "
                                                                  "\"arguments\": {}}"));  // city is required
    }
}

TEST(OpenAiRequest, ChatFieldsReachParams) {
    const std::string body = std::string(R"({"model": "anything", )") + k_msgs + R"(,
        "max_tokens": 50, "max_completion_tokens": 40, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "min_p": 0.05, "seed": -3, "n": 3, "stop": ["\n\n", "END"], "stream": true,
        "stream_options": {"include_usage": true}, "frequency_penalty": 0.5, "presence_penalty": -1,
        "logit_bias": {"17": -100, "42": 2.5}, "logprobs": true, "top_logprobs": 5, "ignore_eos": true,
        "user": "u1", "metadata": {"a": "b"}, "tool_choice": "auto", "response_format": {"type": "text"},
        "max_tokens": null})";
    const ParsedRequest r = chat(body);
    EXPECT_EQ(r.endpoint, Endpoint::chat_completions);
    EXPECT_EQ(r.model, "anything");
    EXPECT_EQ(r.params.prompt, render_and_encode(R"([{"role": "user", "content": "Hi there"}])"));
    EXPECT_EQ(r.params.max_new_tokens, 40);  // max_completion_tokens wins (max_tokens: null is absent)
    EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
    EXPECT_EQ(r.params.sampling.top_k, 40);
    EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.05f);
    EXPECT_EQ(r.params.sampling.seed, uint64_t(int64_t(-3)));
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_FLOAT_EQ(r.params.frequency_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.params.presence_penalty, -1.0f);
    EXPECT_EQ(r.params.logit_bias, (std::map<int32_t, float>{{17, -100.0f}, {42, 2.5f}}));
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 5);
    EXPECT_FALSE(r.params.stop_at_eos);
    for (const char* f : {"user", "metadata"})
        EXPECT_NE(std::find(r.ignored_fields.begin(), r.ignored_fields.end(), f), r.ignored_fields.end()) << f;
}

TEST(OpenAiRequest, ChatDefaults) {
    const ParsedRequest r = chat(std::string(R"({"model": "m", )") + k_msgs + "}");
    EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);  // OpenAI's default, not greedy
    EXPECT_FLOAT_EQ(r.params.sampling.top_p, 1.0f);
    EXPECT_EQ(r.params.sampling.top_k, 0);
    EXPECT_EQ(r.params.max_new_tokens, 256);
    EXPECT_EQ(r.n, 1);
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.logprobs);
    EXPECT_TRUE(r.params.stop_at_eos);
    EXPECT_TRUE(r.ignored_fields.empty());
    EXPECT_EQ(qwen().encode(r.prompt_text, false), r.params.prompt);
    // No seed: a random one is drawn and recorded (two draws agreeing four times is 2^-252).
    bool differs = false;
    for (int i = 0; i < 4 && !differs; ++i)
        differs = chat(std::string(R"({"model": "m", )") + k_msgs + "}").params.sampling.seed != r.params.sampling.seed;
    EXPECT_TRUE(differs);
    EXPECT_LE(r.params.sampling.seed, uint64_t(INT64_MAX));
    // No default cap: all that is left of the context.
    ModelContext c = chat_ctx();
    c.default_max_tokens = 0;
    EXPECT_EQ(chat(std::string(R"({"model": "m", )") + k_msgs + "}", c).params.max_new_tokens,
              4096 - int64_t(r.params.prompt.size()));
}

TEST(OpenAiRequest, ChatMessagesReachTemplate) {
    // Text parts are joined with "\n", developer becomes system (Qwen3's template knows no developer role), tool
    // call arguments given as a JSON string reach the template as the object, and tools are rendered.
    const ParsedRequest r =
        parse_request(Endpoint::chat_completions, ordered_json::parse(R"({"model": "m", "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})"),
                      chat_ctx());
    const std::string expected_msgs = R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "part one\npart two"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])";
    const std::string tools =
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
    EXPECT_EQ(r.params.prompt, render_and_encode(expected_msgs, tools));
    EXPECT_NE(r.prompt_text.find("\"city\": \"Paris\""), std::string::npos) << r.prompt_text;
    EXPECT_NE(r.prompt_text.find("get_weather"), std::string::npos);
    // chat_template_kwargs become template variables (Qwen3: enable_thinking=false adds an empty think block).
    const ParsedRequest t =
        chat(std::string(R"({"model": "m", )") + k_msgs + R"(, "chat_template_kwargs": {"enable_thinking": false}})");
    EXPECT_NE(t.prompt_text.find("<think>\n\n</think>"), std::string::npos) << t.prompt_text;
    EXPECT_EQ(chat(std::string(R"({"model": "m", )") + k_msgs + "}").prompt_text.find("<think>"), std::string::npos);
}

TEST(OpenAiRequest, OrderedBodyKeepsKeyOrder) {
    const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}}}}]})";
    const ParsedRequest r = parse_request(Endpoint::chat_completions, ordered_json::parse(body), chat_ctx());
    EXPECT_LT(r.prompt_text.find("zeta"), r.prompt_text.find("alpha")) << r.prompt_text;
}

TEST(OpenAiRequest, CompletionsPromptForms) {
    const tok::Tokenizer& t = deepseek();
    const std::vector<int32_t> ids = t.encode("Once upon a time", true);
    ASSERT_EQ(ids.front(), *t.bos_id());  // the string prompt gets the tokenizer's BOS
    const ParsedRequest a = completions(R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 7})");
    EXPECT_EQ(a.endpoint, Endpoint::completions);
    EXPECT_EQ(a.params.prompt, ids);
    EXPECT_EQ(a.prompt_text, "Once upon a time");
    EXPECT_EQ(a.params.max_new_tokens, 7);
    EXPECT_FALSE(a.logprobs);
    EXPECT_EQ(completions(R"({"model": "m", "prompt": ["Once upon a time"]})").params.prompt, ids);
    EXPECT_EQ(completions(R"({"model": "m", "prompt": [5, 17, 3]})").params.prompt, (std::vector<int32_t>{5, 17, 3}));
    EXPECT_EQ(completions(R"({"model": "m", "prompt": [[5, 17]]})").params.prompt, (std::vector<int32_t>{5, 17}));
    const ParsedRequest l = completions(R"({"model": "m", "prompt": "x", "logprobs": 3, "echo": false,
        "suffix": null, "best_of": 1})");
    EXPECT_TRUE(l.logprobs);
    EXPECT_EQ(l.top_logprobs, 3);
    EXPECT_TRUE(completions(R"({"model": "m", "prompt": "x", "logprobs": 0})").logprobs);
    // "" is BOS alone with deepseek; with no BOS (qwen) it is no tokens at all.
    EXPECT_EQ(completions(R"({"model": "m", "prompt": ""})").params.prompt, std::vector<int32_t>{*t.bos_id()});
    const ApiError e = error_of(Endpoint::completions, R"({"model": "m", "prompt": ""})", chat_ctx());
    EXPECT_EQ(e.param, "prompt");
}

struct BadCase {
    Endpoint ep;
    std::string body;
    std::string param;
};

TEST(OpenAiRequest, BadInputsNameTheField) {
    const Endpoint C = Endpoint::chat_completions, P = Endpoint::completions;
    const std::string m = std::string(R"("model": "m", )") + k_msgs;  // a valid chat base
    const std::string p = R"("model": "m", "prompt": "hi")";          // a valid completions base
    const std::string v = std::to_string(qwen().vocab_size());
    auto with = [](const std::string& base, const std::string& extra) { return "{" + base + ", " + extra + "}"; };
    const std::vector<BadCase> cases = {
        {C, "[1, 2]", ""},
        {C, "\"text\"", ""},
        {C, k_msgs_body(), "model"},
        {C, R"({"model": 5, "messages": [{"role": "user", "content": "x"}]})", "model"},
        {C, R"({"model": "m"})", "messages"},
        {C, R"({"model": "m", "messages": null})", "messages"},
        {C, R"({"model": "m", "messages": []})", "messages"},
        {C, R"({"model": "m", "messages": "hi"})", "messages"},
        {C, R"({"model": "m", "messages": [123]})", "messages[0]"},
        {C, R"({"model": "m", "messages": [{}]})", "messages[0].role"},
        {C, R"({"model": "m", "messages": [{"role": 123, "content": "x"}]})", "messages[0].role"},
        {C, R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
        {C, R"({"model": "m", "messages": [{"role": "user", "content": 123}]})", "messages[0].content"},
        {C, R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content"},
        {C, R"({"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [
             {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]})",
         "messages[1].content[1].type"},
        {C, R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})",
         "messages[0].content[0].text"},
        {C, R"({"model": "m", "messages": [{"role": "user", "content": "x", "n_keep": -5}]})", "messages[0].n_keep"},
        {C, R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": "x"}]})", "messages[0].tool_calls"},
        {C, with(m, R"("foo": 1)"), "foo"},
        {C, with(m, R"("n_discard": -1)"), "n_discard"},
        {C, with(m, R"("functions": [])"), "functions"},
        {C, with(m, R"("prompt": "x")"), "prompt"},
        {C, with(m, R"("max_tokens": 0)"), "max_tokens"},
        {C, with(m, R"("max_tokens": -1)"), "max_tokens"},
        {C, with(m, R"("max_tokens": 1.5)"), "max_tokens"},
        {C, with(m, R"("max_tokens": "10")"), "max_tokens"},
        {C, with(m, R"("max_tokens": 9223372036854775808)"), "max_tokens"},
        {C, with(m, R"("max_completion_tokens": 0)"), "max_completion_tokens"},
        {C, with(m, R"("temperature": -1)"), "temperature"},
        {C, with(m, R"("temperature": 2.5)"), "temperature"},
        {C, with(m, R"("temperature": 1e30)"), "temperature"},
        {C, with(m, R"("temperature": "hot")"), "temperature"},
        {C, with(m, R"("top_p": 0)"), "top_p"},
        {C, with(m, R"("top_p": 1.5)"), "top_p"},
        {C, with(m, R"("top_k": -1)"), "top_k"},
        {C, with(m, R"("min_p": 2)"), "min_p"},
        {C, with(m, R"("seed": 18446744073709551615)"), "seed"},
        {C, with(m, R"("seed": 1.5)"), "seed"},
        {C, with(m, R"("n": 0)"), "n"},
        {C, with(m, R"("n": 129)"), "n"},
        {C, with(m, R"("n": 1000000)"), "n"},
        {C, with(m, R"("stop": ["a", "b", "c", "d", "e"])"), "stop"},
        {C, with(m, R"("stop": "")"), "stop"},
        {C, with(m, R"("stop": ["a", ""])"), "stop[1]"},
        {C, with(m, R"("stop": [1])"), "stop[0]"},
        {C, with(m, R"("stop": 5)"), "stop"},
        {C, with(m, "\"stop\": \"" + std::string(2000, 'x') + "\""), "stop"},
        {C, with(m, R"("stream": "yes")"), "stream"},
        {C, with(m, R"("stream_options": {"include_usage": true})"), "stream_options"},
        {C, with(m, R"("stream": true, "stream_options": {"foo": true})"), "stream_options.foo"},
        {C, with(m, R"("stream": true, "stream_options": {"include_usage": 1})"), "stream_options.include_usage"},
        {C, with(m, R"("stream": true, "stream_options": [])"), "stream_options"},
        {C, with(m, R"("frequency_penalty": 3)"), "frequency_penalty"},
        {C, with(m, R"("presence_penalty": -2.5)"), "presence_penalty"},
        {C, with(m, R"("logit_bias": {"-1": 1})"), "logit_bias"},
        {C, with(m, R"("logit_bias": {")" + v + R"(": 1})"), "logit_bias"},
        {C, with(m, R"("logit_bias": {"1099511627776": 1})"), "logit_bias"},
        {C, with(m, R"("logit_bias": {"abc": 1})"), "logit_bias"},
        {C, with(m, R"("logit_bias": {"5": 101})"), "logit_bias.5"},
        {C, with(m, R"("logit_bias": {"5": "x"})"), "logit_bias.5"},
        {C, with(m, R"("logit_bias": [])"), "logit_bias"},
        {C, with(m, R"("logprobs": "yes")"), "logprobs"},
        {C, with(m, R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs"},
        {C, with(m, R"("logprobs": true, "top_logprobs": -1)"), "top_logprobs"},
        {C, with(m, R"("top_logprobs": 3)"), "top_logprobs"},
        {C, with(m, R"("response_format": {"type": "json_schema", "json_schema": {}})"), "response_format.json_schema.name"},
        {C, with(m, R"("response_format": {"type": "json_schema"})"), "response_format.json_schema"},
        {C, with(m, R"("response_format": {"type": "json_object", "json_schema": {}})"), "response_format.json_schema"},
        {C, with(m, R"("response_format": {"type": "json_schema", "json_schema": {"name": "a b"}})"),
         "response_format.json_schema.name"},
        {C, with(m, R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "extra": 1}})"),
         "response_format.json_schema.extra"},
        {C, with(m, R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
             {"properties": {"a": {"items": {"type": "strin"}}}}}})"),
         "response_format.json_schema.schema.properties.a.items.type"},
        {C, with(m, R"("response_format": {"type": "xml"})"), "response_format.type"},
        {C, with(m, R"("response_format": "text")"), "response_format"},
        {C, with(m, R"("tools": "x")"), "tools"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "a b"}}])"), "tools[0].function.name"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f"}, "extra": 1}])"), "tools[0].extra"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])"),
         "tools[0].function.parameters"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
             "properties": {"a": {"type": "strin"}}}}}])"),
         "tools[0].function.parameters.properties.a.type"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f"}},
             {"type": "function", "function": {"name": "f"}}])"),
         "tools[1].function.name"},
        {C, with(m, R"("tool_choice": "sometimes")"), "tool_choice"},
        {C, with(m, R"("tool_choice": "required")"), "tool_choice"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f"}}],
             "tool_choice": {"type": "function", "function": {"name": "g"}})"),
         "tool_choice.function.name"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
             "response_format": {"type": "json_object"})"),
         "tool_choice"},
        {C, with(m, R"("tools": [{"type": "function"}])"), "tools[0].function"},
        {C, with(m, R"("tools": [{"type": "function", "function": {"name": 1}}])"), "tools[0].function.name"},
        {C, with(m, R"("chat_template_kwargs": "x")"), "chat_template_kwargs"},
        {C, with(m, R"("ignore_eos": 1)"), "ignore_eos"},
        {C, with(m, R"("tools": )" + std::string(100, '[') + std::string(100, ']')), ""},
        {C,
         R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
             "arguments": "{\"a\": )" +
             std::string(70, '[') + std::string(70, ']') + R"(}"}}]}]})",
         "messages[0].tool_calls[0].function.arguments"},
        {P, R"({"model": "m"})", "prompt"},
        {P, with(p, R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
             {"type": "array", "minItems": 2, "maxItems": 1}}})"),
         "response_format.json_schema.schema.minItems"},
        {P, with(p, R"("messages": [])"), "messages"},
        {P, R"({"model": "m", "prompt": 5})", "prompt"},
        {P, R"({"model": "m", "prompt": []})", "prompt"},
        {P, R"({"model": "m", "prompt": ["a", [1]]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [[1], "a"]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [[1], 5]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [[1, 2], []]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [[1, 2], [3, 99999999]]})", "prompt[1][1]"},
        {P, R"({"model": "m", "prompt": [[1], [2], [3], [4], [5], [6], [7], [8], [9]], "n": 128})", "n"},
        {P, R"({"model": "m", "prompt": [[1]], "max_tokens": -1})", "max_tokens"},
        {P, R"({"model": "m", "prompt": [[1]], "echo": 1})", "echo"},
        {C, with(m, R"("echo": true)"), "echo"},
        {P, R"({"model": "m", "prompt": [1, -1]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [1, 2147483648]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [1, 2.0]})", "prompt[1]"},
        {P, R"({"model": "m", "prompt": [[1, "a"]]})", "prompt[0][1]"},
        {P, R"({"model": "m", "prompt": [null]})", "prompt[0]"},
        {P, with(p, R"("suffix": "x")"), "suffix"},
        {P, with(p, R"("best_of": 2)"), "best_of"},
        {P, with(p, R"("logprobs": 6)"), "logprobs"},
        {P, with(p, R"("logprobs": true)"), "logprobs"},
        {P, with(p, R"("top_logprobs": 2)"), "top_logprobs"},
        {P, with(p, R"("tools": [])"), "tools"},
    };
    for (const BadCase& c : cases) {
        const ModelContext ctx = c.ep == C ? chat_ctx() : completions_ctx();
        const ApiError e = error_of(c.ep, c.body, ctx);
        EXPECT_EQ(e.status, 400) << c.body << ": " << e.what();
        EXPECT_EQ(e.type, "invalid_request_error") << c.body;
        EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
        EXPECT_NE(std::string(e.what()), "") << c.body;
    }
    EXPECT_EQ(std::string(error_of(C, with(m, R"("foo": 1)"), chat_ctx()).what()),
              "Unrecognized request argument supplied: foo");
    // The type error names the field and both types.
    EXPECT_EQ(std::string(error_of(C, with(m, R"("temperature": "hot")"), chat_ctx()).what()),
              "Invalid type for 'temperature': expected a number, but got a string instead.");
}

TEST(OpenAiRequest, TemplateAndTokenizerFailuresAre400) {
    ChatTemplate raising("{{ raise_exception('roles must alternate') }}");
    ModelContext c = chat_ctx();
    c.chat_template = &raising;
    ApiError e = error_of(Endpoint::chat_completions, std::string(R"({"model": "m", )") + k_msgs + "}", c);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos) << e.what();
    c.chat_template = nullptr;
    e = error_of(Endpoint::chat_completions, std::string(R"({"model": "m", )") + k_msgs + "}", c);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
}

TEST(OpenAiRequest, ContextLengthExceededOrClamped) {
    const std::string body = std::string(R"({"model": "m", )") + k_msgs + R"(, "max_tokens": 100})";
    const int64_t n_prompt = int64_t(chat(body).params.prompt.size());
    ModelContext c = chat_ctx();
    c.max_context_tokens = n_prompt;  // the prompt alone fills the context
    ApiError e = error_of(Endpoint::chat_completions, body, c);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.param, "messages");
    EXPECT_EQ(std::string(e.what()),
              "This model's maximum context length is " + std::to_string(n_prompt) +
                  " tokens. However, you requested " + std::to_string(n_prompt + 100) + " tokens (" +
                  std::to_string(n_prompt) +
                  " in the messages, 100 in the completion). Please reduce the length of the messages or completion.");
    c.max_context_tokens = n_prompt + 1;  // room for one token: max_tokens is lowered, not refused
    EXPECT_EQ(chat(body, c).params.max_new_tokens, 1);
    c.max_context_tokens = n_prompt + 30;
    EXPECT_EQ(chat(body, c).params.max_new_tokens, 30);
    EXPECT_EQ(chat(std::string(R"({"model": "m", )") + k_msgs + "}", c).params.max_new_tokens, 30);  // default
    c.max_context_tokens = n_prompt + 100;
    EXPECT_EQ(chat(body, c).params.max_new_tokens, 100);

    ModelContext pc = completions_ctx();
    pc.max_context_tokens = 3;
    e = error_of(Endpoint::completions, R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 5})", pc);
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.param, "prompt");
    EXPECT_NE(std::string(e.what()).find("maximum context length is 3 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(3 in your prompt; 5 for the completion)"), std::string::npos);
}

TEST(OpenAiRequest, CompletionsSeveralPromptsAndEcho) {
    const tok::Tokenizer& t = deepseek();
    // a list of token-id lists: one prompt each, in order; echo texts are the ids decoded
    const ParsedRequest a = completions(R"({"model": "m", "prompt": [[5, 17, 3], [9]], "echo": true,
        "logprobs": 1, "max_tokens": 0})");
    ASSERT_EQ(a.prompts.size(), 2u);
    EXPECT_EQ(a.prompts[0], (std::vector<int32_t>{5, 17, 3}));
    EXPECT_EQ(a.prompts[1], std::vector<int32_t>{9});
    EXPECT_EQ(a.params.prompt, a.prompts[0]);
    EXPECT_EQ(a.choices(), 2);
    EXPECT_TRUE(a.echo);
    EXPECT_TRUE(a.params.prompt_logits);  // echo + logprobs scores the prompt
    EXPECT_EQ(a.params.max_new_tokens, 0);
    ASSERT_EQ(a.echo_texts.size(), 2u);
    EXPECT_EQ(a.echo_texts[0], t.decode({5, 17, 3}, true));
    // strings: each encoded with BOS, echoed as sent; n choices per prompt
    const ParsedRequest b = completions(R"({"model": "m", "prompt": ["Once upon", "a time"], "n": 3, "echo": true})");
    EXPECT_EQ(b.prompts[1], t.encode("a time", true));
    EXPECT_EQ(b.echo_texts[1], "a time");
    EXPECT_EQ(b.choices(), 6);
    EXPECT_FALSE(b.params.prompt_logits);  // echo alone needs no logits
    EXPECT_FALSE(completions(R"({"model": "m", "prompt": "x", "logprobs": 2})").params.prompt_logits);
    // the second prompt too long: its index is named
    ModelContext c = completions_ctx();
    c.max_context_tokens = 4;
    const ApiError e = error_of(Endpoint::completions, R"({"model": "m", "prompt": [[1, 2], [1, 2, 3, 4]]})", c);
    EXPECT_EQ(e.param, "prompt[1]");
    EXPECT_EQ(e.code, "context_length_exceeded");
    // max_tokens is what the shortest prompt leaves; the engine lowers it for longer ones
    EXPECT_EQ(completions(R"({"model": "m", "prompt": [[1, 2], [1]], "max_tokens": 100})", c).params.max_new_tokens,
              3);
    // chat has one prompt; max_tokens 0 stays a 400 there
    const ParsedRequest ch = chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
    ASSERT_EQ(ch.prompts.size(), 1u);
    EXPECT_EQ(ch.prompts[0], ch.params.prompt);
}

TEST(OpenAiRequest, NoExceptionButApiErrorLeaves) {
    // Odd but valid JSON everywhere a field is read: only ApiError (400) may come out.
    const std::vector<std::string> fields = {"model",
                                             "messages",
                                             "prompt",
                                             "max_tokens",
                                             "temperature",
                                             "stop",
                                             "logit_bias",
                                             "tools",
                                             "stream_options",
                                             "response_format",
                                             "seed",
                                             "n",
                                             "chat_template_kwargs",
                                             "logprobs",
                                             "top_logprobs",
                                             "best_of",
                                             "echo"};
    const std::vector<std::string> values = {"null", "true", "-0.0",   "1e308", "-9223372036854775808", "\"\"",
                                             "[]",   "{}",   "[null]", "[[]]",  "{\"\": null}",         "\"\\u0000\""};
    for (Endpoint ep : {Endpoint::chat_completions, Endpoint::completions})
        for (const auto& f : fields)
            for (const auto& v : values) {
                const std::string base = ep == Endpoint::chat_completions
                                             ? R"("messages": [{"role": "user", "content": "x"}])"
                                             : R"("prompt": "x")";
                const std::string body = R"({"model": "m", )" + base + ", \"" + f + "\": " + v + "}";
                try {
                    parse_request(ep, json::parse(body),
                                  ep == Endpoint::chat_completions ? chat_ctx() : completions_ctx());
                } catch (const ApiError& e) {
                    EXPECT_EQ(e.status, 400) << body << ": " << e.what();
                }
            }
}


// ---- response bodies ----

TEST(OpenAiResponse, CompletionBodies) {
    ParsedRequest r = chat(std::string(R"({"model": "my-model", )") + k_msgs + "}");
    const std::vector<ChoiceResult> choices = {{"Hello!", "stop", nullptr}, {"Hi", "length", nullptr}};
    const json b = completion_json(r, "chatcmpl-abc", 1700000000, choices, Usage{12, 5});
    EXPECT_EQ(b, json::parse(R"({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000,
        "model": "my-model", "choices": [
          {"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "logprobs": null, "finish_reason": "stop"},
          {"index": 1, "message": {"role": "assistant", "content": "Hi"}, "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "prompt_tokens_details": {"cached_tokens": 0}}})"));
    ParsedRequest p = completions(R"({"model": "m2", "prompt": "x"})");
    const json t = completion_json(p, "cmpl-1", 5, {{"text", "stop", nullptr}}, Usage{1, 2});
    EXPECT_EQ(t, json::parse(R"({"id": "cmpl-1", "object": "text_completion", "created": 5, "model": "m2",
        "choices": [{"index": 0, "text": "text", "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}})"));
}

TEST(OpenAiResponse, StreamChunks) {
    ParsedRequest r = chat(std::string(R"({"model": "mm", "stream": true, )") + k_msgs + "}");
    const json first = chunk_json(r, "chatcmpl-x", 7, 0, "", "", true);
    EXPECT_EQ(first, json::parse(R"({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 7,
        "model": "mm", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
        "finish_reason": null}]})"));
    EXPECT_EQ(chunk_json(r, "chatcmpl-x", 7, 1, "Hel", "", false)["choices"][0]["delta"], json({{"content", "Hel"}}));
    EXPECT_EQ(chunk_json(r, "chatcmpl-x", 7, 1, "Hel", "", false)["choices"][0]["index"], 1);
    const json last = chunk_json(r, "chatcmpl-x", 7, 0, "", "stop", false);
    EXPECT_EQ(last["choices"][0]["delta"], json::object());
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
    EXPECT_FALSE(last.contains("usage"));
    EXPECT_EQ(chunk_json(r, "chatcmpl-x", 7, 0, "end.", "length", false)["choices"][0]["delta"],
              json({{"content", "end."}}));

    ParsedRequest u = chat(std::string(R"({"model": "mm", "stream": true, "stream_options": {"include_usage": true},
        )") + k_msgs + "}");
    const json mid = chunk_json(u, "chatcmpl-y", 8, 0, "a", "", false, json{{"content", json::array()}});
    EXPECT_TRUE(mid.contains("usage"));
    EXPECT_TRUE(mid["usage"].is_null());
    EXPECT_EQ(mid["choices"][0]["logprobs"], json({{"content", json::array()}}));
    EXPECT_EQ(usage_chunk_json(u, "chatcmpl-y", 8, Usage{3, 4}),
              json::parse(R"({"id": "chatcmpl-y", "object": "chat.completion.chunk", "created": 8, "model": "mm",
                  "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}})"));

    ParsedRequest p = completions(R"({"model": "m2", "prompt": "x", "stream": true})");
    EXPECT_EQ(chunk_json(p, "cmpl-z", 9, 0, "tok", "", false),
              json::parse(R"({"id": "cmpl-z", "object": "text_completion", "created": 9, "model": "m2",
                  "choices": [{"index": 0, "text": "tok", "logprobs": null, "finish_reason": null}]})"));
}

TEST(OpenAiResponse, ErrorEnvelopeAndIds) {
    EXPECT_EQ(error_json(ApiError(400, "invalid_request_error", "bad n", "n")),
              json::parse(R"({"error": {"message": "bad n", "type": "invalid_request_error", "param": "n",
                  "code": null}})"));
    EXPECT_EQ(error_json(ApiError(500, "server_error", "x"))["error"]["param"], nullptr);
    const std::string a = new_completion_id(Endpoint::chat_completions), b = new_completion_id(Endpoint::completions);
    EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(a.size(), 9u + 24u);
    EXPECT_EQ(b.rfind("cmpl-", 0), 0u);
    EXPECT_EQ(b.size(), 5u + 24u);
    EXPECT_EQ(b.find_first_not_of("0123456789abcdef", 5), std::string::npos);
    EXPECT_NE(a.substr(9), new_completion_id(Endpoint::chat_completions).substr(9));
}

TEST(OpenAiRequest, SpeculativeExtension) {
    ModelContext ctx = chat_ctx();
    const std::string m = std::string(R"({"model": "m", )") + k_msgs;
    EXPECT_EQ(chat(m + "}", ctx).params.draft_tokens, 0);  // a server without --speculative
    ApiError e = error_of(Endpoint::chat_completions, m + R"(, "speculative": true})", ctx);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "speculative");
    ctx.speculative_tokens = 3;
    EXPECT_EQ(chat(m + "}", ctx).params.draft_tokens, 3);
    EXPECT_EQ(chat(m + R"(, "temperature": 0.8})", ctx).params.draft_tokens, 3);
    EXPECT_EQ(chat(m + R"(, "speculative": false})", ctx).params.draft_tokens, 0);
    EXPECT_EQ(chat(m + R"(, "speculative": null})", ctx).params.draft_tokens, 3);
    e = error_of(Endpoint::chat_completions, m + R"(, "speculative": "yes"})", ctx);
    EXPECT_EQ(e.param, "speculative");
}
