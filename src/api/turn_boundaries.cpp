#include "api/turn_boundaries.h"

#include <algorithm>
#include <exception>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

std::vector<int64_t> turn_boundaries(const ChatTemplate& chat_template, const ChatRequest& request,
                                     const tok::Tokenizer& tok, std::span<const int32_t> prompt) {
    std::vector<int64_t> out;
    const auto& messages = request.messages;
    if (!messages.is_array() || messages.empty()) return out;
    // the last assistant turn only: earlier ones were the last when their own turn's request came, and one render
    // per request keeps this off the time to first token
    for (size_t i = messages.size() - 1; i-- > 0;) {
        const auto& m = messages[i];
        if (!m.is_object() || !m.contains("role") || m["role"] != "assistant") continue;
        ChatRequest head = request;
        head.add_generation_prompt = false;
        head.messages = nlohmann::ordered_json::array();
        for (size_t j = 0; j <= i; ++j) head.messages.push_back(messages[j]);
        std::vector<int32_t> ids;
        try {
            ids = tok.encode(chat_template.apply(head), false);
        } catch (const std::exception&) {
            break;  // a template that refuses this conversation's head: no boundary
        }
        const size_t limit = std::min(ids.size(), prompt.size());
        const int64_t n = std::mismatch(ids.begin(), ids.begin() + std::ptrdiff_t(limit), prompt.begin()).first -
                          ids.begin();
        if (n > 0 && n < int64_t(prompt.size())) out.push_back(n);
        break;
    }
    return out;
}

}  // namespace sluice::api
