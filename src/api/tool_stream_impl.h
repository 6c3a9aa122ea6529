// The machinery the syntax parsers of ToolCallStream share (internal to api/tool_stream*.cpp): the unconsumed text,
// "take until a marker" that holds back only a possible prefix of one, and the emitters of content and calls
// (whitespace next to calls left out, arguments compacted, fragments cut at whole UTF-8 characters).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "api/tool_stream.h"

namespace sluice::api {

std::string new_call_id();  // "call_" + 24 hex digits

class ToolCallStream::Impl {
public:
    virtual ~Impl() = default;

    ToolDelta feed(std::string_view text, bool eof);
    size_t calls() const { return calls_; }
    bool call_open() const { return open_; }

protected:
    // Consumes what it can of buf_; returns false when it needs more text (at eof: when nothing more can be done).
    virtual bool step(bool eof) = 0;
    // The output ended and step() has consumed what it could: send or drop what the parser still holds.
    virtual void at_end() = 0;

    // The earliest of `marks` in buf_: the text before it goes to `sink`, it and the marker are dropped, and its
    // index is returned. Without one: all of buf_ but a suffix that could begin a marker (all of it at eof) goes to
    // `sink`, and -1.
    template <class Sink>
    int take_until(std::initializer_list<std::string_view> marks, bool eof, Sink&& sink) {
        size_t best = std::string::npos;
        int which = -1, i = 0;
        for (std::string_view m : marks) {
            const size_t f = buf_.find(m);
            if (f < best) best = f, which = i;
            ++i;
        }
        if (which >= 0) {
            sink(std::string_view(buf_).substr(0, best));
            buf_.erase(0, best + (marks.begin() + which)->size());
            return which;
        }
        const size_t keep = eof ? 0 : held_suffix(marks);
        sink(std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return -1;
    }

    void content(std::string_view s);  // answer text: whitespace before the first call or at the end left out
    void start_call(std::string id, std::string name);
    void args(std::string_view s);       // argument bytes as they are
    void args_json(std::string_view s);  // JSON text: whitespace outside strings dropped
    void args_string(std::string_view s);  // the inside of a JSON string: escaped
    void end_call();
    // The JSON nesting of args_json's text so far (for syntaxes whose calls end where their JSON does).
    int json_depth() const { return depth_; }
    bool json_in_string() const { return in_string_; }

    std::string buf_;  // text not consumed yet

private:
    size_t held_suffix(std::initializer_list<std::string_view> marks) const;
    void flush_content(bool all);
    void flush_args(bool all);

    ToolDelta out_;
    std::string content_, args_;  // emitted, not yet sent (a partial UTF-8 character)
    std::string ws_;              // a whitespace run of the content, held
    bool said_ = false;           // some content (not whitespace) has been sent
    size_t calls_ = 0;
    bool open_ = false;
    bool in_string_ = false, escape_ = false;
    int depth_ = 0;
};

}  // namespace sluice::api
