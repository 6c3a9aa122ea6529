// The text of a choice as its tokens arrive (UTF-8 held back across token boundaries, stop sequences across tokens
// and characters, special and out-of-vocabulary ids) and the logprob math and shapes of both endpoints, on the real
// qwen3_small tokenizer. (Split from test_openai_protocol.cpp, which checks the requests and responses.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/openai_protocol.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::api;
using nlohmann::json;

namespace {
// Qwen3's byte-level BPE tokenizer (tests/data/tokenizers/qwen3_small), loaded once.
const tok::Tokenizer& qwen() {
    static const auto tokenizer = tok::load_tokenizer(std::string(SLUICE_TEST_DATA_DIR) + "/tokenizers/qwen3_small");
    return *tokenizer;
}
}  // namespace

// ---- ChoiceText ----

namespace {
// The id of one raw byte in a byte-level BPE vocabulary.
int32_t byte_id(unsigned char b) {
    // GPT-2's byte-to-unicode map: printable latin-1 bytes map to themselves, the rest to U+0100 + n.
    std::vector<int> bs;
    for (int c = '!'; c <= '~'; ++c) bs.push_back(c);
    for (int c = 0xA1; c <= 0xAC; ++c) bs.push_back(c);
    for (int c = 0xAE; c <= 0xFF; ++c) bs.push_back(c);
    int cp = -1, n = 0;
    for (int c = 0; c < 256; ++c) {
        const bool direct = std::find(bs.begin(), bs.end(), c) != bs.end();
        if (c == b) cp = direct ? c : 256 + n;
        if (!direct) ++n;
    }
    std::string s;
    if (cp < 0x80) {
        s += char(cp);
    } else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    }
    const auto id = qwen().token_to_id(s);
    EXPECT_TRUE(id.has_value()) << int(b);
    return id.value_or(0);
}

std::vector<int32_t> byte_ids(const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(byte_id(c));
    return ids;
}
}  // namespace

TEST(ChoiceText, HoldsBackPartialUtf8) {
    ChoiceText t(qwen(), {});
    const std::vector<int32_t> ids = byte_ids("a\xC3\xA9");  // "aé", é as two one-byte tokens
    EXPECT_EQ(t.push(ids[0]), "a");
    EXPECT_EQ(t.push(ids[1]), "");
    EXPECT_EQ(t.push(ids[2]), "\xC3\xA9");
    EXPECT_EQ(t.text(), "a\xC3\xA9");
    // A choice cut inside a character ends with U+FFFD.
    ChoiceText u(qwen(), {});
    EXPECT_EQ(u.push(ids[1]), "");
    EXPECT_EQ(u.finish(), "\xEF\xBF\xBD");
}

// Under tools the syntax's marker tokens come out as their text (for the tool-call parser); other special tokens
// are still skipped, and a marker ends a character cut short before it.
TEST(ChoiceText, KeepsTheMarkersItIsGiven) {
    const int32_t end = qwen().token_to_id("<|im_end|>").value(), start = qwen().token_to_id("<|im_start|>").value();
    ASSERT_TRUE(qwen().is_special(end) && qwen().is_special(start));
    ChoiceText t(qwen(), {});
    t.keep_specials({end});
    const std::vector<int32_t> ids = byte_ids("a\xC3" "b");
    EXPECT_EQ(t.push(ids[0]), "a");
    EXPECT_EQ(t.push(ids[1]), "");
    EXPECT_EQ(t.push(end), "\xEF\xBF\xBD<|im_end|>");
    EXPECT_EQ(t.push(start), "");
    EXPECT_EQ(t.push(ids[2]), "b");
    EXPECT_EQ(t.offset(), 3u + 10u + 12u);  // every token's bytes, as without markers kept
    ChoiceText plain(qwen(), {});
    EXPECT_EQ(plain.push(end), "");
}

TEST(ChoiceText, HoldsBackPartialStopAndReleasesIt) {
    ChoiceText t(qwen(), {"xyz"});
    const std::vector<int32_t> ids = byte_ids("axyqxy");
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(t.push(id));
    EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "xyq", "", ""}));
    EXPECT_EQ(t.offset(), 6u);
    EXPECT_FALSE(t.stopped());
    EXPECT_EQ(t.finish(), "xy");  // never became a stop
    EXPECT_EQ(t.text(), "axyqxy");
}

TEST(ChoiceText, StopsAcrossTokensAndCharacters) {
    ChoiceText t(qwen(), {"\xC3\xA9!"});  // "é!": the stop starts inside a two-token character
    std::string got;
    for (int32_t id : byte_ids("ab\xC3\xA9!cd")) {
        if (t.stopped()) break;
        got += t.push(id);
    }
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(got, "ab");
    EXPECT_EQ(t.text(), "ab");
    EXPECT_EQ(t.push(byte_id('c')), "");  // ignored once stopped
    EXPECT_EQ(t.finish(), "");

    // Real multi-character tokens: the stop spans a token boundary; the earliest of two stops wins.
    const std::string text = "Hello world, this is a test of stopping.";
    const std::vector<int32_t> ids = qwen().encode(text, false);
    ASSERT_GT(ids.size(), 5u);
    ChoiceText s(qwen(), {"test", "ld, th"});
    std::string sent;
    for (int32_t id : ids) {
        sent += s.push(id);
        EXPECT_EQ(text.rfind(sent, 0), 0u) << sent;  // always a prefix of the text, never past the stop
        if (s.stopped()) break;
    }
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(sent, "Hello wor");
}

TEST(ChoiceText, SkipsSpecialAndOutOfVocabularyIds) {
    ChoiceText t(qwen(), {});
    EXPECT_EQ(t.push(*qwen().token_to_id("<|im_end|>")), "");
    EXPECT_EQ(t.push(qwen().vocab_size() + 5), "");
    EXPECT_EQ(t.push(-1), "");
    EXPECT_EQ(t.push(byte_id('k')), "k");
    EXPECT_EQ(t.finish(), "");
    // Movable, so one per choice can live in a vector.
    std::vector<ChoiceText> v;
    v.emplace_back(qwen(), std::vector<std::string>{"z"});
    v.emplace_back(std::move(t));
    EXPECT_EQ(v[0].push(byte_id('q')), "q");
    EXPECT_EQ(v[1].text(), "k");
}

// ---- logprobs ----

TEST(Logprobs, SoftmaxTopAndBytes) {
    std::vector<float> logits(300);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i) * 1.7) * 6.0);
    logits[200] = logits[100] = 9.0f;  // a tie at the top: the lower id comes first
    double total = 0;
    for (int32_t id = 0; id < int32_t(logits.size()); ++id) {
        const json e = chat_logprob_entry(qwen(), id, logits, 0);
        total += std::exp(e["logprob"].get<double>());
    }
    EXPECT_NEAR(total, 1.0, 1e-9);

    const int32_t id = 37;
    const json e = chat_logprob_entry(qwen(), id, logits, 3);
    double z = 0;
    for (float l : logits) z += std::exp(double(l));
    EXPECT_NEAR(e["logprob"].get<double>(), double(logits[id]) - std::log(z), 1e-12);
    EXPECT_EQ(e["token"], qwen().decode({id}));
    std::vector<int> bytes;
    for (unsigned char c : qwen().decode_bytes({id})) bytes.push_back(c);
    EXPECT_EQ(e["bytes"].get<std::vector<int>>(), bytes);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], qwen().decode({100}));
    EXPECT_EQ(e["top_logprobs"][1]["token"], qwen().decode({200}));
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["top_logprobs"][1]["logprob"]);
    EXPECT_GE(e["top_logprobs"][1]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
    EXPECT_EQ(chat_logprob_entry(qwen(), 100, logits, 1)["top_logprobs"][0]["logprob"],
              chat_logprob_entry(qwen(), 100, logits, 0)["logprob"]);
    // A token that is half a character: token is U+FFFD, bytes keeps the raw byte.
    const int32_t half = byte_id(0xC3);
    std::vector<float> wide(size_t(half) + 1, 0.0f);
    const json h = chat_logprob_entry(qwen(), half, wide, 0);
    EXPECT_EQ(h["token"], "\xEF\xBF\xBD");
    EXPECT_EQ(h["bytes"], json::array({0xC3}));
    EXPECT_NEAR(h["logprob"].get<double>(), -std::log(double(wide.size())), 1e-12);
}

TEST(Logprobs, EndpointShapes) {
    std::vector<float> logits(64);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 7);
    const json entries =
        json::array({chat_logprob_entry(qwen(), 13, logits, 2), chat_logprob_entry(qwen(), 6, logits, 2)});
    ParsedRequest chat_req;
    chat_req.endpoint = Endpoint::chat_completions;
    const json c = logprobs_object(chat_req, entries, 0);
    EXPECT_EQ(c["content"], entries);
    EXPECT_TRUE(c["refusal"].is_null());

    ParsedRequest cmpl;
    cmpl.endpoint = Endpoint::completions;
    const json p = logprobs_object(cmpl, entries, 10);
    EXPECT_EQ(p["tokens"], json::array({qwen().decode({13}), qwen().decode({6})}));
    EXPECT_EQ(p["token_logprobs"][0], entries[0]["logprob"]);
    EXPECT_EQ(p["text_offset"], json::array({10, 10 + entries[0]["bytes"].size()}));
    ASSERT_EQ(p["top_logprobs"].size(), 2u);
    const json& top0 = p["top_logprobs"][0];  // the two best (ids 6 and 13, logit 6) and the chosen one (13)
    EXPECT_EQ(top0.size(), 2u) << top0;
    EXPECT_EQ(top0[qwen().decode({6})], entries[0]["top_logprobs"][0]["logprob"]);
    EXPECT_TRUE(top0.contains(qwen().decode({13})));
    // an echoed prompt's first token: null logprob and top_logprobs, its bytes still counted
    json echoed = json::array({first_prompt_entry(qwen(), 13), entries[1]});
    const json q = logprobs_object(cmpl, echoed, 0);
    EXPECT_TRUE(q["token_logprobs"][0].is_null());
    EXPECT_TRUE(q["top_logprobs"][0].is_null());
    EXPECT_EQ(q["token_logprobs"][1], entries[1]["logprob"]);
    EXPECT_EQ(q["text_offset"], json::array({0, entries[0]["bytes"].size()}));
    EXPECT_EQ(q["tokens"][0], qwen().decode({13}));
}
