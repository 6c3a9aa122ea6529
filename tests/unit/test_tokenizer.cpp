// Tokenizer tests: every golden (ids without and with special tokens, reference decode, raw-id decode cases)
// from tools/reference/make_tokenizer_goldens.py, streaming decode, UTF-8/NFC helpers and bad-input errors.
// The fixtures live in tests/data/tokenizers: small ones as tokenizer.json, the full-size DeepSeek-V3, Qwen3 and
// gpt-oss tokenizers as tokenizer.json.gz (see the README there).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <tuple>

#include "core/error.h"
#include "models/synth_tokenizer.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"
#include "../support/test_tokenizers.h"

namespace fs = std::filesystem;
using namespace sluice::tok;
using nlohmann::json;

namespace {

const fs::path k_data = fs::path(SLUICE_TEST_DATA_DIR) / "tokenizers";

using sluice::test::open_tokenizer;
using sluice::test::read_file;

std::string show(const std::string& s) { return json(s).dump(-1, ' ', true).substr(0, 200); }

class Goldens : public ::testing::TestWithParam<std::string> {};

TEST_P(Goldens, MatchReference) {
    const std::string name = GetParam();
    auto tok = open_tokenizer(name);
    const json goldens = json::parse(read_file(k_data / (name + "_goldens.json")));
    const json& cases = goldens.at("cases");
    ASSERT_GT(cases.size(), 100u);
    size_t failures = 0;
    for (const json& c : cases) {
        const std::string text = c.at("text");
        const auto want = c.at("ids").get<std::vector<int32_t>>();
        const auto want_special = c.at("ids_special").get<std::vector<int32_t>>();
        const std::string decoded = c.at("decoded");
        const auto got = tok->encode(text, false);
        const bool ok = got == want && tok->encode(text, true) == want_special && tok->decode(got) == decoded;
        EXPECT_TRUE(ok) << name << " text " << show(text) << "\n got " << json(got).dump().substr(0, 300)
                        << "\nwant " << json(want).dump().substr(0, 300);
        if (!ok && ++failures > 10) FAIL() << "too many failures";
        // Streaming decode produces the same text in pieces that are each valid UTF-8.
        StreamDecoder stream(*tok);
        std::string streamed;
        for (int32_t id : want) {
            const std::string part = stream.push(id);
            ASSERT_TRUE(utf8_valid(part));
            streamed += part;
        }
        streamed += stream.finish();
        EXPECT_EQ(streamed, decoded) << show(text);
    }
    for (const json& d : goldens.at("decode_cases")) {
        const auto ids = d.at("ids").get<std::vector<int32_t>>();
        EXPECT_EQ(tok->decode(ids), d.at("decoded").get<std::string>()) << json(ids).dump();
        StreamDecoder stream(*tok);
        std::string streamed;
        for (int32_t id : ids) streamed += stream.push(id);
        EXPECT_EQ(streamed + stream.finish(), d.at("decoded").get<std::string>()) << json(ids).dump();
    }
}

INSTANTIATE_TEST_SUITE_P(All, Goldens,
                         ::testing::Values("kimi_like", "qwen3_small", "deepseek_v3_small", "deepseek_v3", "qwen3",
                                           "gptoss"));

TEST(Tokenizer, RoundTripsWhenReferenceDoes) {
    auto tok = open_tokenizer("deepseek_v3_small");
    ASSERT_TRUE(tok);
    for (const std::string text : {"", "Hello, world!", "  \n\t x", "中文 😀 e\u0301", "<｜User｜>hi<｜Assistant｜>"})
        EXPECT_EQ(tok->decode(tok->encode(text, false)), text);
}

TEST(Tokenizer, SpecialTokensAndIds) {
    auto ds = open_tokenizer("deepseek_v3_small");
    ASSERT_TRUE(ds);
    ASSERT_TRUE(ds->bos_id() && ds->eos_id());
    EXPECT_EQ(*ds->bos_id(), 0);
    EXPECT_EQ(*ds->eos_id(), 1);
    EXPECT_TRUE(ds->is_special(0));
    EXPECT_EQ(ds->id_to_token(0).value(), "<｜begin▁of▁sentence｜>");
    EXPECT_EQ(ds->token_to_id("Ġt").value(), *ds->token_to_id("Ġt"));
    EXPECT_EQ(ds->encode("hi", true).front(), 0);
    EXPECT_EQ(ds->decode({0, *ds->token_to_id("hi")}, true), "hi");

    auto kimi = open_tokenizer("kimi_like");
    ASSERT_TRUE(kimi);
    EXPECT_EQ(kimi->vocab_size(), 65536 + 258);
    EXPECT_EQ(*kimi->bos_id(), 65536);
    EXPECT_EQ(*kimi->eos_id(), 65537);
    EXPECT_EQ(kimi->token_to_id("<|im_end|>").value(), 65538);
    EXPECT_EQ(kimi->token_to_id("<|reserved_token_65541|>").value(), 65541);
    EXPECT_EQ(kimi->encode("<|im_user|>", false), std::vector<int32_t>{65539});
}

TEST(Tokenizer, InvalidUtf8InputIsRepaired) {
    auto tok = open_tokenizer("qwen3_small");
    ASSERT_TRUE(tok);
    const std::string bad = "a\xff\xc3(b\xe4\xb8";
    EXPECT_EQ(tok->encode(bad, false), tok->encode(utf8_lossy(bad), false));
    EXPECT_EQ(tok->decode(tok->encode(bad, false)), "a\uFFFD\uFFFD(b\uFFFD");
}

TEST(Tokenizer, BadInputFailsClearly) {
    EXPECT_THROW(load_tokenizer((k_data / "no_such_model").string()), sluice::Error);
    EXPECT_THROW(load_hf_tokenizer("{not json", "", "corrupt.json"), sluice::Error);
    EXPECT_THROW(load_hf_tokenizer(R"({"model": {"type": "Unigram"}})", "", "unigram.json"), sluice::Error);
    EXPECT_THROW(load_hf_tokenizer(R"({"normalizer": {"type": "NFKC"}, "model": {}})", "", "nfkc.json"),
                 sluice::Error);
    EXPECT_THROW(load_tiktoken_tokenizer("!!!! 0\n", "{}", "bad.model"), sluice::Error);
    EXPECT_THROW(load_tiktoken_tokenizer("QQ== x\n", "{}", "bad.model"), sluice::Error);
    // One stray huge id is refused rather than sizing the id tables by it (found by fuzz_tokenizer_files).
    auto huge = nlohmann::json::parse(sluice::synth::synth_tokenizer_json());
    ASSERT_NO_THROW(load_hf_tokenizer(huge.dump(), "", "ok.json"));
    huge["model"]["vocab"]["zz"] = 16000000;
    try {
        load_hf_tokenizer(huge.dump(), "", "huge.json");
        FAIL();
    } catch (const sluice::Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.vocab[\"zz\"] = 16000000 is out of range"), std::string::npos)
            << e.what();
    }
    // A non-integer id (converting 1.6e92 to int was undefined behaviour) or a negative one.
    for (const char* id : {"1.6e92", "-3", "\"7\""}) {
        auto j = nlohmann::json::parse(sluice::synth::synth_tokenizer_json());
        j["added_tokens"][0]["id"] = nlohmann::json::parse(id);
        try {
            load_hf_tokenizer(j.dump(), "", "bad_id.json");
            ADD_FAILURE() << id;
        } catch (const sluice::Error& e) {
            EXPECT_NE(std::string(e.what()).find("added_tokens[\"<|bos|>\"].id"), std::string::npos) << e.what();
        }
    }
    auto tok = open_tokenizer("kimi_like");
    ASSERT_TRUE(tok);
    EXPECT_THROW(tok->decode({tok->vocab_size()}), sluice::Error);
    EXPECT_THROW(tok->decode({-1}), sluice::Error);
    try {
        tok->decode({999999});
        FAIL();
    } catch (const sluice::Error& e) {
        EXPECT_NE(std::string(e.what()).find("999999"), std::string::npos);
    }
}

// tokenizer.json's model.vocab is parsed outside the DOM (tokenizer_json.h): its entries in file order, an empty
// object left in the DOM, nothing else touched; a nested value is kept as null, so the loader names the entry.
TEST(Tokenizer, VocabularyParsedOutsideTheDom) {
    const auto t = parse_tokenizer_json(
        R"({"vocab": {"a": 1}, "model": {"inner": {"vocab": {"b": 2}}, "list": [{"vocab": {"x": 0}}],
            "vocab": {"c": 3, "d": [1, {"e": 2}], "f": 4, "g": {"h": 5}, "i": -1}, "type": "BPE"}})",
        "t.json");
    EXPECT_TRUE(t.vocab_split);
    ASSERT_EQ(t.vocab.size(), 5u);
    EXPECT_EQ(t.vocab[0].first, "c");
    EXPECT_EQ(t.vocab[0].second, 3);
    EXPECT_EQ(t.vocab[1].first, "d");
    EXPECT_TRUE(t.vocab[1].second.is_null());
    EXPECT_EQ(t.vocab[2].first, "f");
    EXPECT_EQ(t.vocab[2].second, 4);
    EXPECT_TRUE(t.vocab[3].second.is_null());
    EXPECT_EQ(t.vocab[4].second, -1);
    EXPECT_EQ(t.root["vocab"]["a"], 1);
    EXPECT_EQ(t.root["model"]["inner"]["vocab"]["b"], 2);
    EXPECT_EQ(t.root["model"]["list"][0]["vocab"]["x"], 0);
    EXPECT_EQ(t.root["model"]["vocab"], nlohmann::json::object());
    EXPECT_EQ(t.root["model"]["type"], "BPE");
    // the last "vocab" wins, as in a DOM
    const auto twice = parse_tokenizer_json(R"({"model": {"vocab": {"a": 1}, "vocab": {"b": 2}}})", "t.json");
    ASSERT_EQ(twice.vocab.size(), 1u);
    EXPECT_EQ(twice.vocab[0].first, "b");
    EXPECT_FALSE(parse_tokenizer_json(R"({"model": {"vocab": [1]}})", "t.json").vocab_split);
    auto error = [](auto f) {
        try {
            f();
        } catch (const sluice::Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(error([] { parse_tokenizer_json(R"({"model": {"vocab": {"a": 1,}}})", "t.json"); })
                  .find("tokenizer: t.json is not valid JSON: "),
              std::string::npos);
    EXPECT_NE(error([] { parse_tokenizer_json("[1]", "t.json"); }).find("t.json is not a JSON object"),
              std::string::npos);
    // through the loader: a nested id names its entry, a token listed twice is refused
    auto j = nlohmann::json::parse(sluice::synth::synth_tokenizer_json());
    j["model"]["vocab"]["zz"] = nlohmann::json::object();
    EXPECT_NE(error([&] { load_hf_tokenizer(j.dump(), "", "nested.json"); })
                  .find("model.vocab[\"zz\"] is not an integer"),
              std::string::npos);
    std::string dup = sluice::synth::synth_tokenizer_json();
    const size_t at = dup.find("\"vocab\":");
    ASSERT_NE(at, std::string::npos);
    const size_t brace = dup.find('{', at);
    dup.insert(brace + 1, "\"dd\": 1, \"dd\": 2, ");
    EXPECT_NE(error([&] { load_hf_tokenizer(dup, "", "dup.json"); }).find("model.vocab has \"dd\" twice"),
              std::string::npos)
        << error([&] { load_hf_tokenizer(dup, "", "dup.json"); });
}

// Runs `sluice <args>` with stdin from a file; returns exit status and stdout.
std::pair<int, std::string> run_cli(const std::string& args, const std::string& input) {
    const fs::path in = fs::temp_directory_path() / ("sluice_tok_in_" + std::to_string(::getpid()));
    std::ofstream(in, std::ios::binary) << input;
    const std::string cmd = std::string(SLUICE_BINARY) + " " + args + " < " + in.string() + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    fs::remove(in);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Cli, TokenizeAndDetokenize) {
    if (!fs::exists(SLUICE_BINARY)) GTEST_SKIP() << "sluice binary not built";
    const std::string dir = (k_data / "deepseek_v3_small").string();
    auto [rc, out] = run_cli("tokenize -m " + dir, "Hello, world!");
    ASSERT_EQ(rc, 0);
    auto tok = open_tokenizer("deepseek_v3_small");
    EXPECT_EQ(json::parse(out).get<std::vector<int32_t>>(), tok->encode("Hello, world!", false));
    std::tie(rc, out) = run_cli("tokenize --special -m " + dir, "Hello");
    EXPECT_EQ(json::parse(out).get<std::vector<int32_t>>(), tok->encode("Hello", true));
    std::tie(rc, out) = run_cli("detokenize -m " + dir, json(tok->encode("中文 ok", false)).dump());
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(out, "中文 ok");
    EXPECT_EQ(run_cli("detokenize -m " + dir, "[99999999]").first, 1);
    EXPECT_EQ(run_cli("detokenize -m " + dir, "[1,").first, 1);
    EXPECT_EQ(run_cli("tokenize -m " + (k_data / "missing").string(), "x").first, 1);
}

TEST(Unicode, LossyReplacesMaximalSubparts) {
    EXPECT_EQ(utf8_lossy("ok"), "ok");
    EXPECT_EQ(utf8_lossy("\xe4\xb8"), "\uFFFD");
    EXPECT_EQ(utf8_lossy("\xc0\x80"), "\uFFFD\uFFFD");
    EXPECT_EQ(utf8_lossy("\xed\xa0\x80"), "\uFFFD\uFFFD\uFFFD");
    EXPECT_EQ(utf8_lossy("\xf0\x9f\x98" "a"), "\uFFFD" "a");
    EXPECT_EQ(utf8_stable_prefix("ab\xe4\xb8"), 2u);
    EXPECT_EQ(utf8_stable_prefix("ab\xff"), 3u);
    EXPECT_EQ(utf8_stable_prefix("ab\xe4\x41"), 4u);
}

TEST(Unicode, Nfc) {
    EXPECT_EQ(nfc("e\u0301"), "\u00e9");
    EXPECT_EQ(nfc("\u212b"), "\u00c5");                     // singleton
    EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");       // reorder, no composite
    EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");         // Hangul LVT
    EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");               // composition exclusion
    EXPECT_EQ(nfc("plain ascii"), "plain ascii");
}

TEST(Regex, TranslationMatchesReferenceDialect) {
    EXPECT_EQ(translate_pattern(R"([\p{Han}]+)"), R"([\p{sc:Han}]+)");
    EXPECT_EQ(translate_pattern(R"([\p{L}&&[^\p{Han}]]+)"), R"((?:(?![\p{sc:Han}])[\p{L}])+)");
    EXPECT_NE(translate_pattern(R"(\s+(?!\S))").find("\\x{85}"), std::string::npos);
    EXPECT_THROW(translate_pattern(R"([a&&b])"), sluice::Error);
    // U+0085 is white space for the references, and U+3001 is not Han (Script, not Script_Extensions).
    RegexSplitter ws(R"(\s+|[\p{Han}]+)", false, SplitBehavior::Isolated);
    const std::string text = "a\u0085b中文\u3001日";
    std::vector<Span> out;
    ws.split(text, {0, text.size()}, out);
    std::vector<std::string> pieces;
    for (const Span& s : out) pieces.push_back(text.substr(s.begin, s.end - s.begin));
    EXPECT_EQ(pieces, (std::vector<std::string>{"a", "\u0085", "b", "中文", "\u3001", "日"}));
}

}  // namespace
