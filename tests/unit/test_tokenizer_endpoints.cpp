// The server's tokenizer routes (api/tokenizer_endpoints): llama.cpp's and vLLM's request shapes for /tokenize and
// /detokenize, /tokenizer_info as lm-evaluation-harness's remote tokenizer reads it, and bad bodies as 400s naming
// the field. Uses the deepseek_v3_small tokenizer (it adds BOS) with a template carrying special-token strings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "api/tokenizer_endpoints.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::api;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

const tok::Tokenizer& deepseek() {
    static auto t = tok::load_tokenizer(std::string(SLUICE_TEST_DATA_DIR) + "/tokenizers/deepseek_v3_small");
    return *t;
}

ModelContext ctx(const ChatTemplate* tmpl = nullptr) {
    ModelContext c;
    c.tokenizer = &deepseek();
    c.chat_template = tmpl;
    c.vocab_size = deepseek().vocab_size();
    c.max_context_tokens = 2048;
    return c;
}

std::string param_of(json (*fn)(const ordered_json&, const ModelContext&), const std::string& body) {
    try {
        fn(ordered_json::parse(body), ctx());
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400) << body;
        EXPECT_NE(std::string(e.what()), "") << body;
        return e.param.empty() ? "(none)" : e.param;
    }
    ADD_FAILURE() << "no error for " << body;
    return "";
}

TEST(TokenizerEndpoints, TokenizeShapes) {
    const tok::Tokenizer& t = deepseek();
    const auto plain = t.encode("Hello world", false), with_bos = t.encode("Hello world", true);
    ASSERT_NE(plain, with_bos);
    // llama.cpp: content, add_special off by default
    EXPECT_EQ(tokenize_json(ordered_json::parse(R"({"content": "Hello world"})"), ctx())["tokens"], plain);
    EXPECT_EQ(tokenize_json(ordered_json::parse(R"({"content": "Hello world", "add_special": true})"), ctx())["tokens"],
              with_bos);
    // vLLM (what lm-eval sends): prompt, add_special_tokens on by default
    const json v = tokenize_json(ordered_json::parse(R"({"prompt": "Hello world", "add_special_tokens": false,
        "model": "m"})"), ctx());
    EXPECT_EQ(v["tokens"], plain);
    EXPECT_EQ(v["count"], plain.size());
    EXPECT_EQ(v["max_model_len"], 2048);
    EXPECT_FALSE(v.contains("token_strs"));
    EXPECT_EQ(tokenize_json(ordered_json::parse(R"({"prompt": "Hello world"})"), ctx())["tokens"], with_bos);
    const json s = tokenize_json(ordered_json::parse(R"({"prompt": "Hi", "return_token_strs": true})"), ctx());
    ASSERT_EQ(s["token_strs"].size(), s["tokens"].size());
}

TEST(TokenizerEndpoints, Detokenize) {
    const tok::Tokenizer& t = deepseek();
    const auto ids = t.encode("Hello world", true);
    const json d = detokenize_json(ordered_json{{"tokens", ids}}, ctx());
    EXPECT_EQ(d["prompt"], t.decode(ids));
    EXPECT_EQ(d["content"], d["prompt"]);
}

TEST(TokenizerEndpoints, TokenizerInfo) {
    const tok::Tokenizer& t = deepseek();
    const json a = tokenizer_info_json(ctx());
    ASSERT_TRUE(a["bos_token"].is_string()) << a;
    EXPECT_EQ(a["bos_token_id"], *t.bos_id());
    EXPECT_TRUE(a.contains("eos_token"));  // lm-eval's check for remote tokenizer support
    EXPECT_TRUE(a["chat_template"].is_null());
    EXPECT_EQ(a["model_max_length"], 2048);
    EXPECT_EQ(a["vocab_size"], t.vocab_size());
    // the remote tokenizer takes eos_token_id as /tokenize of eos_token: it must be that one id
    ASSERT_TRUE(a["eos_token"].is_string()) << a;
    EXPECT_EQ(tokenize_json(ordered_json{{"prompt", a["eos_token"]}, {"add_special_tokens", false}}, ctx())["tokens"],
              json::array({a["eos_token_id"]}));
    // the template's special-token strings and its source win
    ChatTemplate tmpl("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
    tmpl.special_tokens["pad_token"] = t.decode({*t.bos_id()});
    const json b = tokenizer_info_json(ctx(&tmpl));
    EXPECT_EQ(b["chat_template"], tmpl.source());
    EXPECT_EQ(b["pad_token"], t.decode({*t.bos_id()}));
    EXPECT_EQ(b["pad_token_id"], *t.bos_id());
}

TEST(TokenizerEndpoints, BadBodiesName400Fields) {
    const std::string v = std::to_string(deepseek().vocab_size());
    EXPECT_EQ(param_of(tokenize_json, "{}"), "prompt");
    EXPECT_EQ(param_of(tokenize_json, R"({"prompt": 5})"), "prompt");
    EXPECT_EQ(param_of(tokenize_json, R"({"content": ["x"]})"), "content");
    EXPECT_EQ(param_of(tokenize_json, R"({"content": "x", "prompt": "x"})"), "content");
    EXPECT_EQ(param_of(tokenize_json, R"({"prompt": "x", "add_special_tokens": "no"})"), "add_special_tokens");
    EXPECT_EQ(param_of(tokenize_json, R"({"prompt": "x", "add_special": true, "add_special_tokens": false})"),
              "add_special_tokens");
    EXPECT_EQ(param_of(tokenize_json, R"({"prompt": "x", "bogus": 1})"), "bogus");
    EXPECT_EQ(param_of(tokenize_json, R"({"prompt": "x", "model": 3})"), "model");
    EXPECT_EQ(param_of(tokenize_json, "[1]"), "(none)");
    EXPECT_EQ(param_of(detokenize_json, "{}"), "tokens");
    EXPECT_EQ(param_of(detokenize_json, R"({"tokens": "1 2"})"), "tokens");
    EXPECT_EQ(param_of(detokenize_json, R"({"tokens": [1, -1]})"), "tokens[1]");
    EXPECT_EQ(param_of(detokenize_json, R"({"tokens": [1, 2.5]})"), "tokens[1]");
    EXPECT_EQ(param_of(detokenize_json, R"({"tokens": [)" + v + "]}"), "tokens[0]");
    EXPECT_EQ(param_of(detokenize_json, R"({"tokens": [18446744073709551615]})"), "tokens[0]");
}

}  // namespace
