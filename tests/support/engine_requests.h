// What the engine tests share: a fixture's reference ids to cut prompts from, a collector of a request's events,
// the request run alone by the plain decode loop, and greedy request parameters.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/engine.h"
#include "reference_decode.h"

namespace sluice::test {

inline std::string fixture_dir(const std::string& name) {
    return std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/" + name;
}

// The fixture's two reference prompts, one after the other: ids to cut prompts of any length from.
inline std::vector<int32_t> fixture_ids(const std::string& name) {
    std::ifstream in(fixture_dir(name) + "/ref.json");
    auto j = nlohmann::json::parse(in);
    auto ids = j["ids"].get<std::vector<int32_t>>();
    auto b = j["ids_b"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), b.begin(), b.end());
    return ids;
}

inline std::vector<int32_t> cut(const std::vector<int32_t>& ids, size_t from, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(ids[(from + i) % ids.size()]);
    return out;
}

// What one request received.
struct Got {
    std::vector<int32_t> ids;
    std::vector<TokenEvent> finals;  // events with finish != none (copied without logits)
    int64_t events = 0;
    std::string error;
    FinishReason finish() const { return finals.empty() ? FinishReason::none : finals.back().finish; }
};

inline TokenCallback collect(Got& g, std::function<bool(const TokenEvent&)> also = nullptr) {
    return [&g, also](const TokenEvent& ev) {
        ++g.events;
        if (ev.id >= 0) g.ids.push_back(ev.id);
        if (ev.finish != FinishReason::none) {
            TokenEvent copy = ev;
            copy.logits = {};
            g.finals.push_back(copy);
            g.error = ev.error;
        }
        return also ? also(ev) : true;
    };
}

// The request run alone by the plain decode loop (tests/support/reference_decode.h), not by the engine.
inline ReferenceResult alone(Model& m, const RequestParams& p, int64_t max_new_tokens = -1) {
    return reference_generate(m, p.prompt, max_new_tokens > 0 ? max_new_tokens : p.max_new_tokens, p.stop_at_eos,
                              p.sampling);
}

inline RequestParams greedy(std::vector<int32_t> prompt, int64_t max_new_tokens, bool stop_at_eos = false) {
    RequestParams p;
    p.prompt = std::move(prompt);
    p.max_new_tokens = max_new_tokens;
    p.stop_at_eos = stop_at_eos;
    return p;
}

}  // namespace sluice::test
