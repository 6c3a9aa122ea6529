// libFuzzer target: parse and render arbitrary chat-template text over a fixed conversation with tight limits.
// Any input must either render or throw sluice::Error; crashes, sanitizer reports and hangs are bugs.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const sluice::ChatRequest request = [] {
        sluice::ChatRequest r;
        r.messages = nlohmann::ordered_json::parse(R"([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "héllo {{ x }}"},
            {"role": "assistant", "content": "ok", "reasoning_content": "think",
             "tool_calls": [{"id": "c0", "type": "function",
                             "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "done"}])");
        r.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
            "parameters": {"type": "object", "properties": {"a": {"type": "array"}}}}}])");
        r.add_generation_prompt = true;
        r.kwargs = nlohmann::ordered_json::parse(R"({"thinking": true})");
        return r;
    }();
    sluice::jinja::Limits limits;
    limits.max_output_bytes = 1 << 16;
    limits.max_loop_iterations = 20000;
    limits.max_call_depth = 32;
    try {
        sluice::ChatTemplate tpl(std::string(reinterpret_cast<const char*>(data), size), limits);
        tpl.special_tokens["bos_token"] = "<s>";
        tpl.clock = [] { return std::tm{}; };
        (void)tpl.apply(request);
    } catch (const sluice::Error&) {
    }
    return 0;
}
