// Jinja2 lexer: root text scanning with whitespace control, tag-internal tokens, Python string literal escapes.
#include "tokenizer/jinja_lexer.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/jinja_value.h"

namespace sluice::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_source(std::string_view src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out += '\n';
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out += src[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
    return out;
}

class Lexer {
public:
    Lexer(std::string src, const LexOptions& opts) : src_(std::move(src)), opts_(opts) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            size_t start = find_tag_start(pos_);
            std::string text = src_.substr(pos_, start - pos_);
            int text_lines = count_newlines(text);
            if (start == src_.size()) {
                emit(TokKind::Data, text);
                line_ += text_lines;
                pos_ = start;
                break;
            }
            char type = src_[start + 1];
            char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
            if (mod != '-' && mod != '+') mod = '\0';
            if (mod == '-') {
                size_t end = text.size();
                while (end > 0 && is_space(text[end - 1])) --end;
                text.resize(end);
            } else if (mod != '+' && opts_.lstrip_blocks && type != '{') {
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
                if (l_pos > 0 || line_starting) {
                    bool blank = true;
                    for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
                    if (blank) text.resize(l_pos);
                }
            }
            emit(TokKind::Data, text);
            line_ += text_lines;
            pos_ = start + 2 + (mod ? 1 : 0);
            if (type == '#') {
                line_starting = lex_comment();
            } else if (type == '%' && is_raw()) {
                line_starting = lex_raw();
            } else {
                line_starting = lex_tag(type == '{');
            }
        }
        emit(TokKind::Eof, "");
        return std::move(toks_);
    }

private:
    std::string src_;
    LexOptions opts_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> toks_;

    [[noreturn]] void error(const std::string& msg) const { fail("chat template line ", line_, ": ", msg); }

    static int count_newlines(std::string_view s) {
        int n = 0;
        for (char c : s) n += c == '\n';
        return n;
    }

    void emit(TokKind kind, std::string text) {
        if (kind == TokKind::Data && text.empty()) return;
        toks_.push_back(Token{kind, std::move(text), line_});
    }

    size_t find_tag_start(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i) {
            if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        }
        return src_.size();
    }

    // After a closing delimiter: `-` strips all following whitespace, `+` keeps it, otherwise trim_blocks drops one
    // newline (blocks and comments only). Returns whether the consumed text ended with a newline.
    bool close_tag(char mod, bool is_block) {
        bool nl = false;
        if (mod == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                nl = src_[pos_] == '\n';
                line_ += nl;
                ++pos_;
            }
        } else if (mod != '+' && is_block && opts_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            ++line_;
            nl = true;
        }
        return nl;
    }

    bool lex_comment() {
        size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) error("missing end of comment tag");
        char mod = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
        line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
        pos_ = end + 2;
        return close_tag(mod, true);
    }

    bool is_raw() const {
        size_t p = pos_;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
    }

    bool lex_raw() {
        size_t p = src_.find("%}", pos_);
        bool strip_after = src_[p - 1] == '-';
        line_ += count_newlines(std::string_view(src_).substr(pos_, p - pos_));
        pos_ = p + 2;
        if (strip_after) close_tag('-', true);
        // Find {% endraw %} (with optional modifiers).
        for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 2)) {
            size_t r = q + 2;
            char mod_open = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : '\0';
            while (r < src_.size() && is_space(src_[r])) ++r;
            if (src_.compare(r, 6, "endraw") != 0) continue;
            r += 6;
            while (r < src_.size() && is_space(src_[r])) ++r;
            char mod_close = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) mod_close = src_[r++];
            if (src_.compare(r, 2, "%}") != 0) continue;
            std::string text = src_.substr(pos_, q - pos_);
            int lines = count_newlines(text);
            if (mod_open == '-') {
                while (!text.empty() && is_space(text.back())) text.pop_back();
            }
            emit(TokKind::Data, text);
            line_ += lines;
            pos_ = r + 2;
            return close_tag(mod_close, true);
        }
        error("missing end of raw directive");
    }

    bool lex_tag(bool is_var) {
        toks_.push_back(Token{is_var ? TokKind::VarBegin : TokKind::BlockBegin, is_var ? "{{" : "{%", line_});
        std::vector<char> balance;
        const char close = is_var ? '}' : '%';
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
            if (pos_ >= src_.size()) error(is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
            if (balance.empty()) {
                char mod = (src_[pos_] == '-' || src_[pos_] == '+') ? src_[pos_] : '\0';
                if (mod == '+' && is_var) mod = '\0';
                size_t p = pos_ + (mod ? 1 : 0);
                if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
                    pos_ = p + 2;
                    toks_.push_back(Token{is_var ? TokKind::VarEnd : TokKind::BlockEnd, "", line_});
                    return close_tag(mod, !is_var);
                }
            }
            lex_token(balance);
        }
    }

    void lex_token(std::vector<char>& balance) {
        char c = src_[pos_];
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t s = pos_;
            while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
            toks_.push_back(Token{TokKind::Name, src_.substr(s, pos_ - s), line_});
            return;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
        if (c == '\'' || c == '"') return lex_string();
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        for (const char* op : two) {
            if (src_.compare(pos_, 2, op) == 0) {
                toks_.push_back(Token{TokKind::Op, op, line_});
                pos_ += 2;
                return;
            }
        }
        if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
            error(cat("unexpected character '", c, "'"));
        }
        if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) error(cat("unexpected '", c, "'"));
            if (balance.back() != c) error(cat("unexpected '", c, "', expected '", balance.back(), "'"));
            balance.pop_back();
        }
        toks_.push_back(Token{TokKind::Op, std::string(1, c), line_});
        ++pos_;
    }

    void lex_number() {
        auto digits = [&] {
            std::string d;
            while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                          (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                           std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
                if (src_[pos_] != '_') d += src_[pos_];
                ++pos_;
            }
            return d;
        };
        std::string num = digits();
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
            ++pos_;
            num += "." + digits();
            is_float = true;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t p = pos_ + 1;
            if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
            if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
                num += 'e';
                if (src_[pos_ + 1] == '-') num += '-';
                pos_ = p;
                num += digits();
                is_float = true;
            }
        }
        toks_.push_back(Token{is_float ? TokKind::Float : TokKind::Int, num, line_});
    }

    // Python string literal with the escapes of codecs "unicode-escape"; unknown escapes are kept verbatim.
    void lex_string() {
        const char quote = src_[pos_++];
        const int start_line = line_;
        std::string out;
        while (true) {
            if (pos_ >= src_.size()) error("unterminated string literal");
            char c = src_[pos_++];
            if (c == quote) break;
            if (c == '\n') ++line_;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= src_.size()) error("unterminated string literal");
            char e = src_[pos_++];
            auto hex = [&](int n) {
                if (pos_ + n > src_.size()) error("truncated \\x/\\u escape in string literal");
                uint32_t v = 0;
                for (int k = 0; k < n; ++k) {
                    char h = src_[pos_++];
                    if (!std::isxdigit(static_cast<unsigned char>(h))) error("bad \\x/\\u escape in string literal");
                    v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
                }
                if (v > 0x10ffff) error("escape out of range in string literal");
                utf8_append(out, v);
            };
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'v': out += '\v'; break;
                case '\n': ++line_; break;  // line continuation
                case 'x': hex(2); break;
                case 'u': hex(4); break;
                case 'U': hex(8); break;
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t v = e - '0';
                        for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
                            v = v * 8 + (src_[pos_++] - '0');
                        utf8_append(out, v);
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        toks_.push_back(Token{TokKind::String, std::move(out), start_line});
    }
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& opts) {
    return Lexer(normalize_source(source), opts).run();
}

}  // namespace sluice::jinja
