// Tool calls parsed while the model writes them: text (special-token markers kept as their text) goes in piece by
// piece, and out come the content that is certain not to belong to a call and each call's arguments as they are
// generated. Text is held back only while it could still be the start of a marker (or is whitespace next to a
// call, which the answer leaves out); a call's first delta carries its id and name, later ones fragments of its
// arguments. The result does not depend on how the text is cut into pieces: parse_tool_calls (tool_calls.h) is
// this parser fed the whole text at once, so what a stream sends adds up to the non-streamed message exactly.
//
// Arguments are written compact (JSON whitespace outside strings dropped) as they arrive; a call cut short (the
// output ended inside it) is reported by call_open() and keeps the arguments written so far.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/tool_calls.h"

namespace sluice::api {

struct CallDelta {
    size_t index = 0;        // which call of the choice (0, 1, ...)
    bool first = false;      // the call's first delta: id and name are set
    std::string id, name;
    std::string arguments;   // the next fragment of the call's arguments (whole UTF-8 characters)
};

struct ToolDelta {
    std::string content;           // more of the answer's text (whole UTF-8 characters)
    std::vector<CallDelta> calls;  // in order

    bool empty() const { return content.empty() && calls.empty(); }
    // Appends `more` (fragments of the same call join).
    void append(ToolDelta&& more);
};

class ToolCallStream {
public:
    // prompt_tail: the end of the rendered prompt (Kimi K3 opens its think or response element in the generation
    // prompt, so the output starts inside it); ignored by the other syntaxes.
    explicit ToolCallStream(ToolSyntax syntax, std::string_view prompt_tail = {});
    ~ToolCallStream();
    ToolCallStream(ToolCallStream&&) noexcept;
    ToolCallStream& operator=(ToolCallStream&&) noexcept;

    // More of the output. Never throws on any input.
    ToolDelta push(std::string_view text);
    // The output ended: what was held back, as content or as the open call's last fragment.
    ToolDelta finish();

    size_t calls() const;    // calls started so far
    bool call_open() const;  // the last call has not been closed (after finish(): it was cut short)

    class Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::api
