// ToolCallStream (tool_stream.h): the shared emitters, and the parsers of the hermes (Qwen3), Kimi K2 and harmony
// (gpt-oss) syntaxes as state machines over the unconsumed text; Kimi K3's is in tool_stream_k3.cpp.
#include "api/tool_stream.h"

#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "api/tool_stream_impl.h"
#include "tokenizer/unicode.h"

namespace sluice::api {

std::unique_ptr<ToolCallStream::Impl> make_kimi_k3_parser(std::string_view prompt_tail);  // tool_stream_k3.cpp

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
    return s;
}

// How much of s ends in whole UTF-8 characters (a truncated last sequence is held back; invalid bytes are not).
size_t whole_utf8(std::string_view s) {
    size_t i = s.size(), cont = 0;
    while (i > 0 && cont < 3 && (uint8_t(s[i - 1]) & 0xC0) == 0x80) --i, ++cont;
    if (i == 0) return s.size();
    const uint8_t lead = uint8_t(s[i - 1]);
    const size_t need = lead >= 0xF0 && lead < 0xF8   ? 4
                        : lead >= 0xE0 && lead < 0xF0 ? 3
                        : lead >= 0xC0 && lead < 0xE0 ? 2
                                                      : 1;
    return need > cont + 1 ? i - 1 : s.size();
}

// hermes: <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>. A block that starts with the name and
// then the arguments object streams its arguments; any other block is read whole when it closes and becomes a call
// if it is a JSON object with a string "name" (else it stays in the content, tags and all).
class Hermes final : public ToolCallStream::Impl {
    static constexpr std::string_view k_open = "<tool_call>", k_close = "</tool_call>";
    enum class S { text, head, args, tail, whole } s_ = S::text;
    std::string block_;

    enum class Match { partial, yes, no };
    // {"name": "NAME", "arguments": { with any JSON whitespace; used: the bytes up to and with that last brace
    static Match head(std::string_view b, std::string& name, size_t& used) {
        size_t p = 0;
        const auto ws = [&] {
            while (p < b.size() && is_ws(b[p])) ++p;
        };
        const auto lit = [&](std::string_view l) {
            const size_t n = std::min(l.size(), b.size() - p);
            if (b.substr(p, n) != l.substr(0, n)) return Match::no;
            p += n;
            return n < l.size() ? Match::partial : Match::yes;
        };
        for (std::string_view l : {"{", "\"name\"", ":", "\""}) {
            ws();
            if (const Match m = lit(l); m != Match::yes) return m;
        }
        const size_t n0 = p;
        while (p < b.size() && b[p] != '"')
            if (b[p++] == '\\') return Match::no;  // an escaped name: read the block whole
        if (p == b.size()) return Match::partial;
        if (p == n0) return Match::no;
        name = std::string(b.substr(n0, p - n0));
        ++p;
        for (std::string_view l : {",", "\"arguments\"", ":", "{"}) {
            ws();
            if (const Match m = lit(l); m != Match::yes) return m;
        }
        used = p;
        return Match::yes;
    }

    // After the arguments: "}" and whitespace are the block's own; anything else the model wrote is content.
    void end_tail() {
        std::string_view t = trim(block_);
        if (!t.empty() && t.front() == '}') t = trim(t.substr(1));
        if (!t.empty()) content(t);
        block_.clear();
    }

    void whole_block(bool closed) {
        using ojson = nlohmann::ordered_json;
        const ojson j = ojson::parse(block_, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) {
            content(std::string(k_open) + block_ + (closed ? std::string(k_close) : std::string()));
        } else {
            start_call(new_call_id(), j["name"].get<std::string>());
            const auto a = j.find("arguments");
            if (a == j.end() || a->is_null())
                args("{}");
            else if (a->is_string())
                args(a->get<std::string>());
            else
                args(a->dump(-1, ' ', false, ojson::error_handler_t::replace));
            end_call();
        }
        block_.clear();
    }

    bool step(bool eof) override {
        const auto keep = [&](std::string_view t) { block_ += t; };
        switch (s_) {
            case S::text:
                if (take_until({k_open}, eof, [&](std::string_view t) { content(t); }) < 0) return false;
                s_ = S::head;
                return true;
            case S::head: {
                block_ += buf_;
                buf_.clear();
                std::string name;
                size_t used = 0;
                const Match m = head(block_, name, used);
                if (m == Match::partial) return false;
                if (m == Match::no) {
                    buf_ = std::move(block_);
                    block_.clear();
                    s_ = S::whole;
                    return true;
                }
                start_call(new_call_id(), std::move(name));
                args_json("{");
                buf_ = block_.substr(used);
                block_.clear();
                s_ = S::args;
                return true;
            }
            case S::args: {
                size_t i = 0;
                bool done = false;
                for (; i < buf_.size() && !done; ++i) {
                    // no JSON value holds '<' outside a string: the arguments were cut short by the block's end
                    if (!json_in_string() && buf_[i] == '<') {
                        done = true;
                        break;
                    }
                    args_json(std::string_view(buf_).substr(i, 1));
                    done = json_depth() == 0;
                }
                buf_.erase(0, i);
                if (!done) return false;
                end_call();
                s_ = S::tail;
                return true;
            }
            case S::tail: {
                const int m = take_until({k_close, k_open}, eof, keep);
                if (m < 0) return false;
                end_tail();
                s_ = m == 0 ? S::text : S::head;
                return true;
            }
            case S::whole:
                if (take_until({k_close}, eof, keep) < 0) return false;
                whole_block(true);
                s_ = S::text;
                return true;
        }
        return false;
    }

    void at_end() override {
        if (s_ == S::head) content(std::string(k_open) + block_);  // a head cut short is not a call
        if (s_ == S::tail) end_tail();
        if (s_ == S::whole) whole_block(false);
    }
};

// Kimi K2: <|tool_calls_section_begin|>(<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>)*
// <|tool_calls_section_end|>, ID "functions.NAME:IDX" (kept as the call's id). Text inside the section between
// calls is not content; text after it is.
class KimiK2 final : public ToolCallStream::Impl {
    static constexpr std::string_view k_sec = "<|tool_calls_section_begin|>", k_sec_end = "<|tool_calls_section_end|>",
                                      k_begin = "<|tool_call_begin|>", k_arg = "<|tool_call_argument_begin|>",
                                      k_end = "<|tool_call_end|>";
    enum class S { text, section, id, args } s_ = S::text;
    std::string id_;

    bool step(bool eof) override {
        const auto drop = [](std::string_view) {};
        switch (s_) {
            case S::text:
                if (take_until({k_sec}, eof, [&](std::string_view t) { content(t); }) < 0) return false;
                s_ = S::section;
                return true;
            case S::section: {
                const int m = take_until({k_begin, k_sec_end}, eof, drop);
                if (m < 0) return false;
                id_.clear();
                s_ = m == 0 ? S::id : S::text;
                return true;
            }
            case S::id: {
                const int m = take_until({k_arg, k_end, k_sec_end}, eof, [&](std::string_view t) { id_ += t; });
                if (m < 0) return false;
                if (m == 0) {
                    const std::string id(trim(id_));
                    std::string name = id;
                    if (name.rfind("functions.", 0) == 0) name = name.substr(10);
                    if (const size_t colon = name.rfind(':'); colon != std::string::npos) name.resize(colon);
                    start_call(id, std::move(name));
                }
                s_ = m == 0 ? S::args : m == 1 ? S::section : S::text;  // an id without arguments is no call
                return true;
            }
            case S::args: {
                const int m = take_until({k_end, k_sec_end, k_begin}, eof, [&](std::string_view t) { args_json(t); });
                if (m < 0) return false;
                end_call();
                id_.clear();
                s_ = m == 0 ? S::section : m == 1 ? S::text : S::id;
                return true;
            }
        }
        return false;
    }
    void at_end() override {}
};

// harmony: messages HEADER<|message|>BODY ended by <|end|>, <|call|>, <|return|> or the next <|start|>. A header
// with "to=functions.NAME" makes the body a call's arguments, one with the final channel makes it content, others
// (analysis: reasoning) are left out. Output without any <|message|> is all content.
class Harmony final : public ToolCallStream::Impl {
    enum class S { header, body } s_ = S::header;
    enum class Kind { other, final_text, call } kind_ = Kind::other;
    std::string header_;
    bool seen_ = false;  // a <|message|> has been read

    void classify() {
        std::string_view h = header_;
        if (const size_t st = h.rfind("<|start|>"); st != std::string_view::npos) h = h.substr(st);
        kind_ = Kind::other;
        if (const size_t to = h.find("to=functions."); to != std::string_view::npos) {
            size_t n = to + 13, k = n;
            while (k < h.size() && h[k] != ' ' && h[k] != '<' && h[k] != '\n') ++k;
            if (k > n) {
                start_call(new_call_id(), std::string(h.substr(n, k - n)));
                kind_ = Kind::call;
            }
        } else if (h.find("final") != std::string_view::npos) {
            kind_ = Kind::final_text;
        }
        header_.clear();
    }

    bool step(bool eof) override {
        if (s_ == S::header) {
            if (take_until({"<|message|>"}, eof, [&](std::string_view t) { header_ += t; }) < 0) return false;
            seen_ = true;
            classify();
            s_ = S::body;
            return true;
        }
        const int m = take_until({"<|end|>", "<|call|>", "<|return|>", "<|start|>"}, eof, [&](std::string_view t) {
            if (kind_ == Kind::call) args_json(t);
            if (kind_ == Kind::final_text) content(t);
        });
        if (m < 0) return false;
        if (kind_ == Kind::call) end_call();
        s_ = S::header;
        return true;
    }
    void at_end() override {
        if (s_ == S::header && !seen_) content(header_);
    }
};

}  // namespace

std::string new_call_id() {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    static const char* hex = "0123456789abcdef";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
    return id;
}

void ToolDelta::append(ToolDelta&& more) {
    content += more.content;
    for (CallDelta& c : more.calls) {
        if (!calls.empty() && calls.back().index == c.index && !c.first)
            calls.back().arguments += c.arguments;
        else
            calls.push_back(std::move(c));
    }
}

ToolDelta ToolCallStream::Impl::feed(std::string_view text, bool eof) {
    buf_.append(text);
    while (step(eof)) {
    }
    if (eof) {
        at_end();
        buf_.clear();
        if (calls_ == 0) content_ += ws_;  // no call: the answer keeps its trailing whitespace
        ws_.clear();
        flush_content(true);
        flush_args(true);
    }
    return std::exchange(out_, ToolDelta{});
}

size_t ToolCallStream::Impl::held_suffix(std::initializer_list<std::string_view> marks) const {
    size_t keep = 0;
    for (std::string_view m : marks)
        for (size_t k = std::min(m.size() - 1, buf_.size()); k > keep; --k)
            if (std::string_view(buf_).substr(buf_.size() - k) == m.substr(0, k)) {
                keep = k;
                break;
            }
    return keep;
}

void ToolCallStream::Impl::content(std::string_view s) {
    for (char c : s) {
        if (is_ws(c)) {
            ws_ += c;
            continue;
        }
        // whitespace before the first call's content and around calls is not part of the answer
        if (said_ || calls_ == 0) content_ += ws_;
        ws_.clear();
        content_ += c;
        said_ = true;
    }
    flush_content(false);
}

void ToolCallStream::Impl::flush_content(bool all) {
    const size_t n = all ? content_.size() : whole_utf8(content_);
    out_.content.append(content_, 0, n);
    content_.erase(0, n);
}

void ToolCallStream::Impl::start_call(std::string id, std::string name) {
    flush_content(true);
    if (open_) end_call();
    out_.calls.push_back({calls_, true, std::move(id), std::move(name), ""});
    ++calls_;
    open_ = true;
    in_string_ = escape_ = false;
    depth_ = 0;
}

void ToolCallStream::Impl::args(std::string_view s) {
    args_ += s;
    flush_args(false);
}

void ToolCallStream::Impl::flush_args(bool all) {
    const size_t n = all ? args_.size() : whole_utf8(args_);
    if (n == 0 || calls_ == 0) return;
    if (!out_.calls.empty() && out_.calls.back().index == calls_ - 1)
        out_.calls.back().arguments.append(args_, 0, n);
    else
        out_.calls.push_back({calls_ - 1, false, "", "", args_.substr(0, n)});
    args_.erase(0, n);
}

void ToolCallStream::Impl::args_json(std::string_view s) {
    std::string o;
    for (char c : s) {
        if (in_string_) {
            o += c;
            if (escape_)
                escape_ = false;
            else if (c == '\\')
                escape_ = true;
            else if (c == '"')
                in_string_ = false;
        } else if (!is_ws(c)) {
            o += c;
            if (c == '"') in_string_ = true;
            if (c == '{' || c == '[') ++depth_;
            if (c == '}' || c == ']') --depth_;
        }
    }
    args(o);
}

void ToolCallStream::Impl::args_string(std::string_view s) {
    static const char* hex = "0123456789abcdef";
    std::string o;
    for (char c : s) {
        if (const char* e = tok::json_short_escape(char32_t(uint8_t(c)))) {
            o += e;
        } else if (uint8_t(c) < 0x20) {
            o += "\\u00";
            o += hex[uint8_t(c) >> 4];
            o += hex[uint8_t(c) & 15];
        } else {
            o += c;
        }
    }
    args(o);
}

void ToolCallStream::Impl::end_call() {
    flush_args(true);
    open_ = false;
}

ToolCallStream::ToolCallStream(ToolSyntax syntax, std::string_view prompt_tail) {
    switch (syntax) {
        case ToolSyntax::kimi: impl_ = std::make_unique<KimiK2>(); break;
        case ToolSyntax::kimi_k3: impl_ = make_kimi_k3_parser(prompt_tail); break;
        case ToolSyntax::harmony: impl_ = std::make_unique<Harmony>(); break;
        case ToolSyntax::hermes: impl_ = std::make_unique<Hermes>(); break;
    }
}
ToolCallStream::~ToolCallStream() = default;
ToolCallStream::ToolCallStream(ToolCallStream&&) noexcept = default;
ToolCallStream& ToolCallStream::operator=(ToolCallStream&&) noexcept = default;

ToolDelta ToolCallStream::push(std::string_view text) { return impl_->feed(text, false); }
ToolDelta ToolCallStream::finish() { return impl_->feed({}, true); }
size_t ToolCallStream::calls() const { return impl_->calls(); }
bool ToolCallStream::call_open() const { return impl_->call_open(); }

}  // namespace sluice::api
