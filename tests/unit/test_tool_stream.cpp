// The incremental tool-call parser (api/tool_stream.h): fed whole, byte by byte or in random pieces it gives the
// same message (content, call names, ids where the syntax has its own, arguments), every delta is well formed (a
// call's first delta carries its id and name, later ones only fragments of the newest call, all whole UTF-8), content
// goes out as soon as it cannot be the start of a marker, and arguments come out while they are written. Kimi K3's
// tag syntax in detail, and malformed or cut output of every syntax: never a crash, never a call made up.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "api/tool_stream.h"

using namespace sluice::api;

namespace {

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = uint8_t(s[i]);
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

struct Parsed {
    std::string content;
    std::vector<ToolCall> calls;
    bool open = false;
    size_t arg_deltas = 0;  // deltas that carried a fragment of arguments
    bool operator==(const Parsed& o) const {
        if (content != o.content || open != o.open || calls.size() != o.calls.size()) return false;
        for (size_t i = 0; i < calls.size(); ++i)
            if (calls[i].name != o.calls[i].name || calls[i].arguments != o.calls[i].arguments ||
                (calls[i].id.rfind("call_", 0) != 0 && calls[i].id != o.calls[i].id))
                return false;
        return true;
    }
};

std::ostream& operator<<(std::ostream& os, const Parsed& p) {
    os << "content='" << p.content << "' open=" << p.open;
    for (const ToolCall& c : p.calls) os << " [" << c.id << " " << c.name << " " << c.arguments << "]";
    return os;
}

// Feeds `text` cut at `cuts` (positions), checking each delta as a client would see it.
Parsed run(ToolSyntax syntax, std::string_view text, const std::vector<size_t>& cuts, std::string_view tail = {}) {
    ToolCallStream s(syntax, tail);
    Parsed p;
    const auto take = [&](const ToolDelta& d) {
        EXPECT_TRUE(valid_utf8(d.content) || !valid_utf8(text)) << d.content;
        p.content += d.content;
        for (const CallDelta& c : d.calls) {
            if (c.first) {
                EXPECT_EQ(c.index, p.calls.size());
                EXPECT_FALSE(c.id.empty());
                EXPECT_FALSE(c.name.empty());
                p.calls.push_back({c.id, c.name, ""});
            } else {
                EXPECT_EQ(c.index + 1, p.calls.size()) << "a fragment of an older call";
                EXPECT_TRUE(c.id.empty() && c.name.empty());
                EXPECT_FALSE(c.arguments.empty());
            }
            EXPECT_TRUE(valid_utf8(c.arguments) || !valid_utf8(text)) << c.arguments;
            if (!c.arguments.empty()) ++p.arg_deltas;
            if (c.index < p.calls.size()) p.calls[c.index].arguments += c.arguments;
        }
    };
    size_t at = 0;
    for (size_t c : cuts) {
        c = std::min(c, text.size());
        if (c < at) continue;
        take(s.push(text.substr(at, c - at)));
        at = c;
    }
    take(s.push(text.substr(at)));
    take(s.finish());
    p.open = s.call_open();
    return p;
}

std::vector<size_t> every_byte(std::string_view t) {
    std::vector<size_t> c;
    for (size_t i = 1; i < t.size(); ++i) c.push_back(i);
    return c;
}

// Whole == byte by byte == random pieces; returns the whole parse.
Parsed same_any_way(ToolSyntax syntax, std::string_view text, std::string_view tail = {}) {
    const Parsed whole = run(syntax, text, {}, tail);
    EXPECT_EQ(run(syntax, text, every_byte(text), tail), whole) << text;
    std::mt19937 rng(uint32_t(text.size()));
    for (int k = 0; k < 8; ++k) {
        std::vector<size_t> cuts;
        for (size_t i = 0; i < text.size(); i += 1 + rng() % 7) cuts.push_back(i);
        EXPECT_EQ(run(syntax, text, cuts, tail), whole) << text;
    }
    return whole;
}

}  // namespace

TEST(ToolStream, HermesCallsStreamAndMatchTheWholeParse) {
    const std::string t =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris <b> }\", "
        "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n";
    const Parsed p = same_any_way(ToolSyntax::hermes, t);
    ASSERT_EQ(p.calls.size(), 2u) << p;
    EXPECT_EQ(p.content, "Let me check.");
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris <b> }","days":[1,2]})");
    EXPECT_EQ(p.calls[1].arguments, "{}");
    EXPECT_EQ(p.calls[0].id.substr(0, 5), "call_");
    EXPECT_FALSE(p.open);
    EXPECT_GT(run(ToolSyntax::hermes, t, every_byte(t)).arg_deltas, 10u) << "arguments must come as generated";
    // other key orders, strings for arguments and bad blocks are read whole
    const Parsed q = same_any_way(ToolSyntax::hermes, "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"late\"}"
                                                      "</tool_call> after <tool_call>not json</tool_call>");
    ASSERT_EQ(q.calls.size(), 1u) << q;
    EXPECT_EQ(q.calls[0].name, "late");
    EXPECT_EQ(q.calls[0].arguments, R"({"a":1})");
    EXPECT_EQ(q.content, "after <tool_call>not json</tool_call>");
}

TEST(ToolStream, ContentIsSentAsSoonAsItCannotBeAMarker) {
    ToolCallStream s(ToolSyntax::hermes);
    EXPECT_EQ(s.push("Hello wor").content, "Hello wor");
    EXPECT_EQ(s.push("ld <tool").content, "ld");  // " <tool" could still open a call
    EXPECT_EQ(s.push("ing>").content, " <tooling>");
    EXPECT_EQ(s.push(" a").content, " a");
    EXPECT_EQ(s.finish().content, "");

    ToolCallStream k(ToolSyntax::kimi);
    EXPECT_EQ(k.push("Sure.<|tool_calls").content, "Sure.");
    ToolDelta d = k.push("_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_TRUE(d.calls[0].first);
    EXPECT_EQ(d.calls[0].id, "functions.f:0");
    EXPECT_EQ(d.calls[0].name, "f");
    EXPECT_EQ(d.calls[0].arguments, "{\"a\":");
    d = k.push(" 1}<|tool_call_e");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_FALSE(d.calls[0].first);
    EXPECT_EQ(d.calls[0].arguments, "1}");
    EXPECT_TRUE(k.call_open());
    EXPECT_TRUE(k.push("nd|><|tool_calls_section_end|>").empty());
    EXPECT_FALSE(k.call_open());
    EXPECT_TRUE(k.finish().empty());
    EXPECT_EQ(k.calls(), 1u);
}

TEST(ToolStream, KimiK2AndHarmony) {
    const Parsed k = same_any_way(
        ToolSyntax::kimi, "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.search:3"
                          "<|tool_call_argument_begin|>{\"q\": \"x y\"}<|tool_call_end|><|tool_call_begin|>"
                          "functions.open:4<|tool_call_argument_begin|>{}<|tool_call_end|>"
                          "<|tool_calls_section_end|> ok");
    ASSERT_EQ(k.calls.size(), 2u) << k;
    EXPECT_EQ(k.calls[0].id, "functions.search:3");
    EXPECT_EQ(k.calls[0].arguments, R"({"q":"x y"})");
    EXPECT_EQ(k.calls[1].name, "open");
    EXPECT_EQ(k.content, "Sure. ok");
    const Parsed g = same_any_way(
        ToolSyntax::harmony, "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary "
                             "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>");
    ASSERT_EQ(g.calls.size(), 1u) << g;
    EXPECT_EQ(g.calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(g.content, "");
    EXPECT_EQ(same_any_way(ToolSyntax::harmony, "<|channel|>final<|message|>Hello. <|return|>").content, "Hello. ");
    EXPECT_EQ(same_any_way(ToolSyntax::harmony, "no framing at all ").content, "no framing at all ");
}

TEST(ToolStream, KimiK3Tags) {
    const std::string tail = "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
    const std::string t =
        "I should look it up.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
        "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
        "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris \"Ville\"\n\\ é<|close|>argument<|sep|>"
        "<|open|>argument key=\"k&quot;&amp;\" type=\"array\"<|sep|>[1, {\"a\": null}]<|close|>argument<|sep|>"
        "<|close|>call<|sep|><|open|>call tool=\"ping\" index=\"2\"<|sep|><|close|>call<|sep|>"
        "<|open|>call tool=\"raw\" index=\"3\"<|sep|><|open|>json type=\"object\"<|sep|>{\"x\": [true, 2.5]}"
        "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
    const Parsed p = same_any_way(ToolSyntax::kimi_k3, t, tail);
    ASSERT_EQ(p.calls.size(), 3u) << p;
    EXPECT_EQ(p.content, "Checking.");
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris \"Ville\"\n\\ é","k\"&":[1,{"a":null}]})");
    EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments)["city"], "Paris \"Ville\"\n\\ é");
    EXPECT_EQ(p.calls[1].arguments, "{}");
    EXPECT_EQ(p.calls[2].arguments, R"({"x":[true,2.5]})");
    EXPECT_FALSE(p.open);
    // without thinking the generation prompt opens the response
    const Parsed r = same_any_way(ToolSyntax::kimi_k3, "Hi there.<|close|>response<|sep|><|close|>message<|sep|>",
                                  "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
    EXPECT_EQ(r.content, "Hi there.");
    EXPECT_TRUE(r.calls.empty());
}

TEST(ToolStream, MalformedAndCutOutputNeverMakesUpACall) {
    // cut inside the arguments: the call is reported open with what was written
    const Parsed h = same_any_way(ToolSyntax::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2");
    ASSERT_EQ(h.calls.size(), 1u);
    EXPECT_TRUE(h.open);
    EXPECT_EQ(h.calls[0].arguments, R"({"a":[1,2)");
    // cut before the arguments began: no call, the text stays
    const Parsed h2 = same_any_way(ToolSyntax::hermes, "<tool_call>\n{\"name\": \"f\", \"argu");
    EXPECT_TRUE(h2.calls.empty());
    EXPECT_EQ(h2.content, "<tool_call>\n{\"name\": \"f\", \"argu");
    // the block closed inside the arguments: the call ends there, what follows is content
    const Parsed h3 =
        same_any_way(ToolSyntax::hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>x");
    ASSERT_EQ(h3.calls.size(), 1u);
    EXPECT_FALSE(h3.open);
    EXPECT_EQ(h3.calls[0].arguments, R"({"a":1)");
    EXPECT_EQ(h3.content, "x");
    // Kimi K2: an id without arguments is no call
    EXPECT_TRUE(same_any_way(ToolSyntax::kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                                               "<|tool_call_end|><|tool_calls_section_end|>")
                    .calls.empty());
    const std::string k3 = "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>";
    // K3: a call without a tool name, a tag never closed by <|sep|>, an argument cut short
    EXPECT_TRUE(same_any_way(ToolSyntax::kimi_k3, "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call index=\"1\""
                                                  "<|sep|><|close|>call<|sep|>", k3)
                    .calls.empty());
    const Parsed c = same_any_way(ToolSyntax::kimi_k3,
                                  "a<|open|>bogus<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument "
                                  "key=\"s\" type=\"string\"<|sep|>abc",
                                  k3);
    ASSERT_EQ(c.calls.size(), 1u) << c;
    EXPECT_TRUE(c.open);
    EXPECT_EQ(c.calls[0].arguments, R"({"s":"abc)");
    EXPECT_EQ(c.content, "a");
}

// Random sequences of the syntaxes' pieces: whole, byte by byte and in pieces agree; no delta is ill-formed.
TEST(ToolStream, RandomPiecesAgreeHoweverCut) {
    const std::vector<std::string> pieces = {
        "<tool_call>", "</tool_call>", "{", "}", "[", "]", "\"name\"", ":", "\"f\"", ",", "\"arguments\"", " ", "\n",
        "a", "<", "|", "\\", "\"", "\xc3\xa9", "\xf0\x9f\x98\x80", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>",
        "call tool=\"t\"", "argument key=\"k\" type=\"string\"", "argument key=\"n\" type=\"number\"", "json", "tools",
        "think", "response", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "functions.f:0", "<|channel|>", "<|message|>",
        "<|end|>", "<|call|>", "<|start|>", "to=functions.x ", "final", "<|return|>"};
    std::mt19937 rng(7);
    for (ToolSyntax syntax : {ToolSyntax::hermes, ToolSyntax::kimi, ToolSyntax::kimi_k3, ToolSyntax::harmony})
        for (int i = 0; i < 400; ++i) {
            std::string t;
            for (size_t n = rng() % 40; n > 0; --n) t += pieces[rng() % pieces.size()];
            same_any_way(syntax, t, i % 2 ? "<|open|>think<|sep|>" : "");
        }
}
