// Kimi K3's tool calls (see tool_stream.h). Its chat template writes an assistant turn as tags, each opened by the
// special token <|open|> and closed by <|close|>, with <|sep|> ending the tag:
//   <|open|>message role="assistant"<|sep|><|open|>think<|sep|>REASONING<|close|>think<|sep|>
//   <|open|>response<|sep|>CONTENT<|close|>response<|sep|>
//   <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>ARGUMENTS<|close|>call<|sep|>...<|close|>tools<|sep|>
//   <|close|>message<|sep|><|end_of_msg|>
// where ARGUMENTS is one <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|> per argument (VALUE
// the raw text for type "string", else JSON) or one <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>.
// Attribute values escape & and " as &amp; and &quot;. The generation prompt opens the message and its think (or,
// without thinking, response) element, so the output starts inside it. The response is the content, the think
// element (reasoning) is left out, and each call's arguments are written as one JSON object while they arrive: an
// argument's key when its tag closes, a string value escaped byte by byte, a JSON value compacted.
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "api/tool_stream_impl.h"

namespace sluice::api {

namespace {

constexpr std::string_view k_open = "<|open|>", k_close = "<|close|>", k_sep = "<|sep|>", k_eom = "<|end_of_msg|>";

struct Tag {
    std::string name;
    std::vector<std::pair<std::string, std::string>> attrs;

    const std::string* attr(std::string_view key) const {
        for (const auto& [k, v] : attrs)
            if (k == key) return &v;
        return nullptr;
    }
};

std::string unescape_attr(std::string_view v) {
    std::string o;
    for (size_t i = 0; i < v.size(); ++i) {
        bool done = false;
        for (auto [ent, ch] : {std::pair<std::string_view, char>{"&amp;", '&'}, {"&quot;", '"'}, {"&lt;", '<'},
                               {"&gt;", '>'}, {"&apos;", '\''}})
            if (v.substr(i, ent.size()) == ent) {
                o += ch;
                i += ent.size() - 1;
                done = true;
                break;
            }
        if (!done) o += v[i];
    }
    return o;
}

// NAME key="value" key="value" (a value without its closing quote runs to the end).
Tag parse_tag(std::string_view s) {
    Tag t;
    size_t p = 0;
    while (p < s.size() && s[p] != ' ') ++p;
    t.name = std::string(s.substr(0, p));
    while (p < s.size()) {
        while (p < s.size() && s[p] == ' ') ++p;
        const size_t k = p;
        while (p < s.size() && s[p] != '=' && s[p] != ' ') ++p;
        std::string key(s.substr(k, p - k));
        if (p + 1 < s.size() && s[p] == '=' && s[p + 1] == '"') {
            const size_t v = p + 2;
            size_t e = s.find('"', v);
            if (e == std::string_view::npos) e = s.size();
            t.attrs.emplace_back(std::move(key), unescape_attr(s.substr(v, e - v)));
            p = e + 1;
        } else if (!key.empty()) {
            t.attrs.emplace_back(std::move(key), "");
        }
        if (p == k) ++p;  // always move on
    }
    return t;
}

class KimiK3 final : public ToolCallStream::Impl {
public:
    explicit KimiK3(std::string_view prompt_tail) {
        // the element the generation prompt leaves open: its last <|open|>TAG<|sep|>, when nothing follows it
        const size_t o = prompt_tail.rfind(k_open);
        if (o == std::string_view::npos) return;
        std::string_view rest = prompt_tail.substr(o + k_open.size());
        const size_t s = rest.find(k_sep);
        if (s == std::string_view::npos || s + k_sep.size() != rest.size()) return;
        const Tag t = parse_tag(rest.substr(0, s));
        if (t.name == "think") in_ = In::think;
        if (t.name == "response") in_ = In::response;
    }

private:
    enum class In { top, think, response, tools, call, arg_string, arg_json, json } in_ = In::top;
    enum class S { text, tag } s_ = S::text;
    bool closing_ = false;
    std::string tag_;
    bool keyed_ = false, json_block_ = false;  // the open call has argument elements / a json element

    void close_call() {
        if (!call_open()) return;
        if (in_ == In::arg_string) args("\"");
        if (keyed_) args("}");
        if (!keyed_ && !json_block_) args("{}");
        end_call();
        keyed_ = json_block_ = false;
    }

    void open_tag(const Tag& t) {
        if (t.name == "think") in_ = In::think;
        if (t.name == "response") in_ = In::response;
        if (t.name == "tools") in_ = In::tools;
        if (t.name == "message") close_call(), in_ = In::top;
        if (t.name == "call") {
            close_call();
            const std::string* tool = t.attr("tool");
            if (tool && !tool->empty()) {
                start_call(new_call_id(), *tool);
                in_ = In::call;
            } else {
                in_ = In::tools;  // a call without a name cannot be reported
            }
        }
        if (t.name == "argument" && in_ == In::call && call_open()) {
            const std::string* key = t.attr("key");
            const std::string* type = t.attr("type");
            args(keyed_ ? "," : "{");
            keyed_ = true;
            args(nlohmann::json(key ? *key : std::string())
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            args(":");
            const bool string = !type || *type == "string";
            if (string) args("\"");
            in_ = string ? In::arg_string : In::arg_json;
        }
        if (t.name == "json" && in_ == In::call && call_open()) {
            json_block_ = true;
            in_ = In::json;
        }
    }

    void close_tag(const Tag& t) {
        if (t.name == "argument" && (in_ == In::arg_string || in_ == In::arg_json)) {
            if (in_ == In::arg_string) args("\"");
            in_ = In::call;
        }
        if (t.name == "json" && in_ == In::json) in_ = In::call;
        if (t.name == "call") close_call(), in_ = In::tools;
        if (t.name == "think" || t.name == "response" || t.name == "tools" || t.name == "message")
            close_call(), in_ = In::top;
    }

    bool step(bool eof) override {
        if (s_ == S::text) {
            const int m = take_until({k_open, k_close, k_eom}, eof, [&](std::string_view t) {
                switch (in_) {
                    case In::top:
                    case In::response: content(t); break;
                    case In::arg_string: args_string(t); break;
                    case In::arg_json:
                    case In::json: args_json(t); break;
                    case In::think:
                    case In::tools:
                    case In::call: break;  // reasoning, and the space between calls and arguments
                }
            });
            if (m < 0) return false;
            if (m == 2) {
                close_call();
                in_ = In::top;
                return true;
            }
            closing_ = m == 1;
            tag_.clear();
            s_ = S::tag;
            return true;
        }
        const int m = take_until({k_sep, k_open, k_close}, eof, [&](std::string_view t) { tag_ += t; });
        if (m < 0) return false;
        if (m == 0) {
            const Tag t = parse_tag(tag_);
            closing_ ? close_tag(t) : open_tag(t);
            s_ = S::text;
        } else {  // a tag without its <|sep|>: dropped; a new one starts
            closing_ = m == 2;
            tag_.clear();
        }
        return true;
    }
    void at_end() override {}
};

}  // namespace

std::unique_ptr<ToolCallStream::Impl> make_kimi_k3_parser(std::string_view prompt_tail) {
    return std::make_unique<KimiK3>(prompt_tail);
}

}  // namespace sluice::api
