// libFuzzer target: the structured-output schema compiler and its automaton. The input is a schema (JSON text),
// optionally followed by a NUL byte and text to feed the automaton. A schema either compiles or is refused with a
// SchemaError (no other exception, no crash); a compiled one walks the text without crashing, and generation
// through the token mask over a small vocabulary (deterministic choices among the allowed tokens)
// either stops, runs out of steps, or finishes with text that parses as JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/json_automaton.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"

namespace {

using namespace sluice;

void check(bool ok) {
    if (!ok) std::abort();
}

std::shared_ptr<const TokenTrie> vocab() {
    static std::shared_ptr<const TokenTrie> t = [] {
        std::vector<std::string> v;
        // ASCII bytes but 'e' / 'E', so that an exponent comes only as "e-3" (a huge one would not parse as a
        // double); UTF-8 in whole characters and in pieces, and bytes no UTF-8 string holds: the mask must only
        // ever put whole, valid characters in strings (nlohmann refuses invalid UTF-8, so the check below sees it)
        for (int b = 0; b < 128; ++b)
            if (b != 'e' && b != 'E') v.push_back(std::string(1, char(b)));
        for (const char* s : {"\xc3", "\xa9", "\xe2\x82", "\xac", "\x80", "\xff", "\xc0\xaf", "\xed\xa0\x80",
                              "\xf0\x9f", "\x98\x80", "\xf4\x90\x80\x80"})
            v.push_back(s);
        for (const char* s : {"\xc3\xa9", "\"", "\":", "\",", "\"}", "{\"", "true", "false", "null", "12", "0.5", "e-3", "  ",
                              "\n", "\\u00e9", "\\n", "abc", "[]", "{}", "},", "],", "\"a\"", "\"name\"", ""})
            v.push_back(s);
        return std::make_shared<const TokenTrie>(v);
    }();
    return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    const std::string schema_text = in.substr(0, nul), feed = nul == std::string::npos ? "" : in.substr(nul + 1);
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
    if (schema.is_discarded()) return 0;
    schema::Grammar g;
    try {
        g = schema::compile_schema(schema);
    } catch (const schema::SchemaError& e) {
        check(std::string(e.what()).size() > 0);
        return 0;
    }
    auto a = std::make_shared<const schema::Automaton>(std::move(g));
    schema::State s = a->start();
    for (char c : feed)
        if (!a->step(s, uint8_t(c))) break;
    (void)a->can_end(s);

    JsonConstraint c(a, vocab());
    const int64_t V = vocab()->vocab_size();
    std::vector<float> logits;
    std::string out;
    uint64_t pick = size * 2654435761u + 1;
    for (int step = 0; step < 96 && !c.finished(); ++step) {
        logits.assign(size_t(V), 0.0f);
        if (!c.mask(logits, {})) break;  // a dead end (stack depth): allowed, never a hang
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < V; ++id)
            if (logits[size_t(id)] == 0.0f) allowed.push_back(id);
        check(!allowed.empty());
        pick = pick * 6364136223846793005ull + 1442695040888963407ull;
        const int32_t id = allowed[size_t((pick >> 33) % allowed.size())];
        c.accept(id);
        const auto b = vocab()->bytes_of(id);
        out.append(reinterpret_cast<const char*>(b.data()), b.size());
    }
    if (c.finished()) check(!nlohmann::json::parse(out, nullptr, false).is_discarded());
    return 0;
}
