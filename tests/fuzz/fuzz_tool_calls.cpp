// libFuzzer target: the incremental tool-call parser (api/tool_stream) of every syntax. The first byte picks the
// syntax (and, for Kimi K3, whether the prompt left a think element open), the second how the rest is cut into
// pieces; the rest is model output. Fed whole and fed in pieces, the parser must give the same message (content,
// call names, arguments, ids where the syntax writes its own, whether the last call is open), every delta must be
// well formed (a call's first delta has an id and a name, fragments belong to the newest call), and it never
// throws or crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/tool_stream.h"

namespace {

using namespace sluice::api;

void check(bool ok) {
    if (!ok) std::abort();
}

struct Message {
    std::string content;
    std::vector<ToolCall> calls;
    bool open = false;
};

Message run(ToolSyntax syntax, const std::string& text, std::string_view tail, uint8_t cut) {
    ToolCallStream s(syntax, tail);
    Message m;
    const auto take = [&](const ToolDelta& d) {
        m.content += d.content;
        for (const CallDelta& c : d.calls) {
            if (c.first) {
                check(c.index == m.calls.size() && !c.id.empty() && !c.name.empty());
                m.calls.push_back({c.id, c.name, ""});
            } else {
                check(c.index + 1 == m.calls.size() && c.id.empty() && c.name.empty());
            }
            m.calls[c.index].arguments += c.arguments;
        }
    };
    uint32_t x = cut | 1u;
    for (size_t at = 0; at < text.size();) {
        const size_t n = cut == 0 ? text.size() : 1 + (x % (1u + cut % 16));
        x = x * 1103515245u + 12345u;
        take(s.push(std::string_view(text).substr(at, n)));
        at += n;
    }
    take(s.finish());
    m.open = s.call_open();
    check(s.calls() == m.calls.size());
    return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    static const ToolSyntax syntaxes[] = {ToolSyntax::hermes, ToolSyntax::kimi, ToolSyntax::kimi_k3,
                                          ToolSyntax::harmony};
    const ToolSyntax syntax = syntaxes[data[0] % 4];
    const std::string_view tail = (data[0] & 4) ? "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>" : "";
    const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
    const Message whole = run(syntax, text, tail, 0);
    const Message pieces = run(syntax, text, tail, uint8_t(data[1] | 1));
    check(whole.content == pieces.content && whole.open == pieces.open && whole.calls.size() == pieces.calls.size());
    for (size_t i = 0; i < whole.calls.size(); ++i) {
        check(whole.calls[i].name == pieces.calls[i].name && whole.calls[i].arguments == pieces.calls[i].arguments);
        check(whole.calls[i].id.rfind("call_", 0) == 0 || whole.calls[i].id == pieces.calls[i].id);
    }
    return 0;
}
