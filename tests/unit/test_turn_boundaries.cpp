// Chat requests' cache points (api/turn_boundaries): where the rendered conversation closes its last assistant turn,
// with real templates (Kimi K2, K3, Qwen3), and what the request parser hands the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "api/openai_protocol.h"
#include "api/turn_boundaries.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::api;
using ordered_json = nlohmann::ordered_json;

namespace {

const std::filesystem::path k_data(SLUICE_TEST_DATA_DIR);

ChatTemplate load_template(const std::string& name) {
    std::ifstream in(k_data / "templates" / name, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ChatTemplate(ss.str());
}

const tok::Tokenizer& qwen() {
    static auto t = tok::load_tokenizer((k_data / "tokenizers" / "qwen3_small").string());
    return *t;
}

const char* k_chat = R"([{"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a river."}, {"role": "assistant", "content": "The Nile."},
    {"role": "user", "content": "And a mountain?"}, {"role": "assistant", "content": "Everest."},
    {"role": "user", "content": "A lake?"}])";

std::vector<int32_t> encode(const ChatTemplate& t, const ordered_json& messages, bool generation_prompt) {
    ChatRequest r;
    r.messages = messages;
    r.add_generation_prompt = generation_prompt;
    return qwen().encode(t.apply(r), false);
}

TEST(TurnBoundaries, TheLastClosedAssistantTurn) {
    for (const char* name : {"moonshotai-Kimi-K2.jinja", "moonshotai-Kimi-K3.jinja", "Qwen-Qwen3-0.6B.jinja"}) {
        SCOPED_TRACE(name);
        const ChatTemplate t = load_template(name);
        ChatRequest r;
        r.messages = ordered_json::parse(k_chat);
        r.add_generation_prompt = true;
        const auto prompt = qwen().encode(t.apply(r), false);
        const auto b = turn_boundaries(t, r, qwen(), prompt);
        ASSERT_EQ(b.size(), 1u);
        // the history through "Everest." rendered alone: the boundary is where it parts from the prompt (its end, for
        // templates that render history alike whatever follows; Qwen3 renders the last assistant turn with reasoning
        // tags, so it parts earlier), and that is past the question it answers
        ordered_json head = ordered_json::array(), before = ordered_json::array();
        for (size_t i = 0; i < 5; ++i) head.push_back(r.messages[i]);
        for (size_t i = 0; i < 4; ++i) before.push_back(r.messages[i]);
        const auto h = encode(t, head, false);
        const auto h_end = h.begin() + std::ptrdiff_t(std::min(h.size(), prompt.size()));
        const size_t common = size_t(std::mismatch(h.begin(), h_end, prompt.begin()).first - h.begin());
        EXPECT_EQ(b[0], int64_t(common));
        EXPECT_GE(b[0], int64_t(encode(t, before, false).size()));
        EXPECT_LT(b[0], int64_t(prompt.size()));
        // a conversation with no closed assistant turn has none
        ChatRequest first;
        first.messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
        first.add_generation_prompt = true;
        EXPECT_TRUE(turn_boundaries(t, first, qwen(), qwen().encode(t.apply(first), false)).empty());
    }
}

TEST(TurnBoundaries, ParsedChatRequestsCarryThemWhenAsked) {
    const ChatTemplate t = load_template("moonshotai-Kimi-K2.jinja");
    ModelContext c;
    c.model_id = "m";
    c.tokenizer = &qwen();
    c.chat_template = &t;
    c.vocab_size = qwen().vocab_size();
    c.max_context_tokens = 4096;
    c.default_max_tokens = 16;
    const auto body = nlohmann::json::parse(std::string(R"({"model": "m", "messages": )") + k_chat + "}");
    EXPECT_TRUE(parse_request(Endpoint::chat_completions, body, c).params.cache_points.empty());
    c.turn_cache_points = true;  // a recurrent model with a prefix cache
    const ParsedRequest q = parse_request(Endpoint::chat_completions, body, c);
    ASSERT_EQ(q.params.cache_points.size(), 1u);
    EXPECT_GT(q.params.cache_points[0], 0);
    EXPECT_LT(q.params.cache_points[0], int64_t(q.params.prompt.size()));
}

}  // namespace
