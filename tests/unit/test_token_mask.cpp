// The structured-output token mask over real vocabularies (tests/data/tokenizers: Qwen3's 151k tokens): the trie walk
// allows exactly the tokens whose bytes the schema automaton accepts (checked against feeding every token's bytes),
// leaves the allowed logits' bits alone, and random generation through it always ends in an instance of the schema.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "runtime/sampler.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "../support/json_instance.h"
#include "../support/test_tokenizers.h"

using namespace sluice;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const tok::Tokenizer& qwen3() {
    static const std::unique_ptr<tok::Tokenizer> t = test::open_tokenizer("qwen3");
    return *t;
}

const std::shared_ptr<const TokenTrie>& qwen3_trie() {
    static std::shared_ptr<const TokenTrie> t = TokenTrie::from_tokenizer(qwen3(), qwen3().vocab_size());
    return t;
}

const char* k_schema = R"({"type":"object","additionalProperties":false,"required":["name","age","pets"],
  "properties":{"name":{"type":"string","maxLength":8},"nick":{"type":"string"},"age":{"type":"integer","minimum":-3,"exclusiveMaximum":120},"alive":{"type":"boolean"},
  "pets":{"type":"array","maxItems":3,"items":{"type":"object","required":["kind"],"additionalProperties":false,
     "properties":{"kind":{"enum":["cat","dog"]},"weight":{"type":["number","null"]}}}}}})";

std::shared_ptr<const schema::Automaton> automaton(const char* schema) {
    return std::make_shared<const schema::Automaton>(schema::compile_schema(ojson::parse(schema)));
}

}  // namespace

// The trie walk against the definition: token t is allowed iff the automaton accepts all of t's bytes.
TEST(TokenMask, AllowsExactlyTheTokensTheAutomatonAccepts) {
    const auto& trie = qwen3_trie();
    const auto a = automaton(k_schema);
    const int64_t V = trie->vocab_size();
    ASSERT_GT(V, 150000);
    // states along one text: object start, a key, a string value (also inside characters of two, three and four
    // bytes, after E0, ED, F0 and F4 leads), a number, an enum, inside an array
    const std::string text = R"({"name": "Jo \"x\" y", "nick": "a\u00e9 \"b)"
                             "\xc3\xa9\xe0\xa4\x95\xed\x9f\xbf\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\xf3\xa0\x80\x81"
                             R"(", "age": 41, "pets": [{"kind": "dog", "weight": 2.5e1}, {"kind":)";
    JsonConstraint c(a, trie);
    schema::State s = a->start(), t;
    int checked = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
        const bool in_char = i > 0 && (uint8_t(text[i - 1]) >= 0x80);
        if (i % 3 == 0 || i == text.size() || in_char) {
            std::vector<float> logits(size_t(V), 0.0f);
            ASSERT_TRUE(c.mask(logits, {}));
            for (int32_t id = 0; id < V; ++id) {
                t.copy_from(s);
                bool ok = !trie->bytes_of(id).empty();
                for (uint8_t b : trie->bytes_of(id))
                    if (ok) ok = a->step(t, b);
                ASSERT_EQ(std::isfinite(logits[size_t(id)]), ok)
                    << "after " << text.substr(0, i) << ": token " << id << " '"
                    << std::string(reinterpret_cast<const char*>(trie->bytes_of(id).data()), trie->bytes_of(id).size())
                    << "'";
            }
            ++checked;
        }
        if (i < text.size()) {
            ASSERT_TRUE(c.feed(text.substr(i, 1))) << i;
            ASSERT_TRUE(a->step(s, uint8_t(text[i])));
        }
    }
    EXPECT_GE(checked, 30);
}

TEST(TokenMask, AllowedLogitsKeepTheirBitsAndEndIdsOnlyWhereTheOutputMayEnd) {
    const auto& trie = qwen3_trie();
    const int64_t V = trie->vocab_size();
    const int32_t eos = *qwen3().eos_id();
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0, 3);
    std::vector<float> raw(static_cast<size_t>(V));
    for (auto& x : raw) x = nd(rng);
    JsonConstraint c(automaton(R"({"type":"integer"})"), trie);
    std::vector<float> m = raw;
    ASSERT_TRUE(c.mask(m, std::vector<int32_t>{eos}));
    EXPECT_FALSE(std::isfinite(m[size_t(eos)]));  // nothing yet: eos may not come
    size_t allowed = 0;
    for (size_t i = 0; i < m.size(); ++i)
        if (std::isfinite(m[i])) {
            ++allowed;
            EXPECT_EQ(std::memcmp(&m[i], &raw[i], sizeof(float)), 0);
        }
    EXPECT_GT(allowed, 10u);
    EXPECT_TRUE(c.feed("12"));
    m = raw;
    ASSERT_TRUE(c.mask(m, std::vector<int32_t>{eos}));
    EXPECT_EQ(m[size_t(eos)], raw[size_t(eos)]);  // "12" is complete: eos may end it
    EXPECT_FALSE(c.finished());
}

// Random logits, sampled through the mask (top-k 64, so that each step stays cheap): the output always parses and
// matches the schema.
TEST(TokenMask, RandomGenerationAlwaysYieldsAnInstance) {
    const auto& trie = qwen3_trie();
    const int64_t V = trie->vocab_size();
    const int32_t eos = *qwen3().eos_id();
    const auto a = automaton(k_schema);
    const nlohmann::json schema = nlohmann::json::parse(k_schema);
    std::mt19937 rng(11);
    std::vector<float> logits(static_cast<size_t>(V));
    int complete = 0;
    for (int run = 0; run < 5; ++run) {
        JsonConstraint c(a, trie);
        Sampler sampler(SamplingParams{.temperature = 1.0f, .top_k = 64, .seed = uint64_t(run)});
        std::vector<int32_t> ids;
        for (int step = 0; step < 300 && !c.finished(); ++step) {
            for (auto& x : logits) x = float(rng() >> 8) * (8.0f / float(1 << 24));
            // lean towards closing tokens so that strings end (a model would)
            for (int32_t id : qwen3().encode("\",}]", false)) logits[size_t(id)] += 6;
            ASSERT_TRUE(c.mask(logits, std::vector<int32_t>{eos}));
            const int32_t id = sampler.sample(logits);
            ASSERT_TRUE(std::isfinite(logits[size_t(id)]));
            if (id == eos) break;
            c.accept(id);
            ids.push_back(id);
        }
        if (!c.finished()) continue;
        ++complete;
        const std::string out = qwen3().decode(ids);  // as the server decodes (invalid UTF-8 repaired)
        const nlohmann::json v = nlohmann::json::parse(out, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << out;
        EXPECT_TRUE(test::is_instance(v, schema)) << out;
    }
    EXPECT_GE(complete, 3);
}

// A vocabulary that cannot close the object: the mask says so instead of allowing nothing silently.
TEST(TokenMask, AVocabularyThatCannotFinishIsReported) {
    auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"{", "\"a\"", ":", "1", "", "<eos>"});
    JsonConstraint c(automaton(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"), trie);
    std::vector<float> logits(6, 0.0f);
    for (const char* t : {"{", "\"a\"", ":", "1"}) {
        logits.assign(6, 0.0f);
        ASSERT_TRUE(c.mask(logits, std::vector<int32_t>{5})) << t;
        EXPECT_TRUE(std::isfinite(logits[0]) == (std::string(t) == "{"));
        ASSERT_TRUE(c.feed(t));
    }
    logits.assign(6, 0.0f);
    EXPECT_TRUE(c.mask(logits, std::vector<int32_t>{5}));  // more digits
    EXPECT_TRUE(std::isfinite(logits[3]));
    EXPECT_FALSE(std::isfinite(logits[5]));  // no '}' token: the end is not allowed
    c.feed("1,");
    logits.assign(6, 0.0f);
    EXPECT_FALSE(c.mask(logits, std::vector<int32_t>{5}));  // after ',' only a new key: "a" is taken
}
