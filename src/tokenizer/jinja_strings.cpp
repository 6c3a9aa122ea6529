// Python str semantics on UTF-8 strings for the chat-template interpreter.
#include "tokenizer/jinja_strings.h"

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace sluice::jinja {
namespace {

bool ascii_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char32_t to_lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
char32_t to_upper(char32_t c) { return c >= 'a' && c <= 'z' ? c - 32 : c; }

std::string strip_ascii_space(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
    return s.substr(a, b - a);
}

}  // namespace

bool py_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

bool py_is_alnum_or_underscore(char32_t c) { return c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !py_isspace(c)); }

std::string ascii_lower(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(to_lower(static_cast<unsigned char>(c)));
    return out;
}

std::string ascii_upper(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(to_upper(static_cast<unsigned char>(c)));
    return out;
}

std::string py_capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty()) out[0] = static_cast<char>(to_upper(static_cast<unsigned char>(out[0])));
    return out;
}

std::string py_title(const std::string& s) {
    std::u32string u = utf8_decode(s);
    bool prev_cased = false;
    for (char32_t& c : u) {
        bool cased = ascii_alpha(c);
        if (cased) c = prev_cased ? to_lower(c) : to_upper(c);
        prev_cased = cased;
    }
    return utf8_encode(u);
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
    std::u32string u = utf8_decode(s);
    std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
    auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
    size_t a = 0, b = u.size();
    if (left)
        while (a < b && strip(u[a])) ++a;
    if (right)
        while (b > a && strip(u[b - 1])) --b;
    return utf8_encode(u.substr(a, b - a));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        SLUICE_CHECK(!sep->empty(), "split: empty separator");
        size_t start = 0;
        while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
            size_t p = s.find(*sep, start);
            if (p == std::string::npos) break;
            out.push_back(s.substr(start, p - start));
            start = p + sep->size();
        }
        out.push_back(s.substr(start));
        return out;
    }
    std::u32string u = utf8_decode(s);
    size_t i = 0;
    while (true) {
        while (i < u.size() && py_isspace(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
            size_t end = u.size();
            while (end > i && py_isspace(u[end - 1])) --end;
            out.push_back(utf8_encode(u.substr(i, end - i)));
            break;
        }
        size_t j = i;
        while (j < u.size() && !py_isspace(u[j])) ++j;
        out.push_back(utf8_encode(u.substr(i, j - i)));
        i = j;
    }
    return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
    if (!sep || maxsplit < 0) return py_split(s, sep, maxsplit);
    SLUICE_CHECK(!sep->empty(), "rsplit: empty separator");
    std::vector<std::string> out;
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t p = s.rfind(*sep, end - sep->size());
        if (p == std::string::npos) break;
        out.insert(out.begin(), s.substr(p + sep->size(), end - p - sep->size()));
        end = p;
    }
    out.insert(out.begin(), s.substr(0, end));
    return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
    std::string out;
    if (old.empty()) {
        std::u32string u = utf8_decode(s);
        int64_t done = 0;
        for (size_t i = 0; i <= u.size(); ++i) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            if (i < u.size()) utf8_append(out, u[i]);
        }
        return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t p = s.find(old, start);
        if (p == std::string::npos) break;
        out.append(s, start, p - start);
        out += repl;
        start = p + old.size();
        ++done;
    }
    out.append(s, start, std::string::npos);
    return out;
}

std::string py_indent(const std::string& s, const std::string& pad, bool first, bool blank) {
    // jinja2 do_indent: (s + "\n").splitlines(), every line after the first gets `pad` (empty lines only if blank).
    std::string text = s + "\n";
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < text.size()) {
        size_t p = text.find('\n', start);
        lines.push_back(text.substr(start, p - start));
        start = p + 1;
    }
    std::string out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
        out += '\n';
        if (blank || !lines[i].empty()) out += pad;
        out += lines[i];
    }
    if (first) out = pad + out;
    return out;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

std::string percent_format(const std::string& fmt, const Value& args) {
    List items = args.is_list() && args.is_tuple ? *args.list : List{args};
    size_t next = 0;
    std::string out;
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        SLUICE_CHECK(i + 1 < fmt.size(), "incomplete format");
        char c = fmt[++i];
        if (c == '%') {
            out += '%';
            continue;
        }
        SLUICE_CHECK(next < items.size(), "not enough arguments for format string");
        const Value& v = items[next++];
        switch (c) {
            case 's': out += to_str(v); break;
            case 'r': out += to_repr(v); break;
            case 'd':
            case 'i':
                SLUICE_CHECK(v.is_number(), "%", c, " format: a real number is required, not ", type_name(v));
                if (v.kind == Kind::Float) {  // Python: the float's integer part, exactly; NaN/inf are errors
                    SLUICE_CHECK(std::isfinite(v.f), "%", c, " format: cannot convert float ", to_str(v),
                                 " to integer");
                    if (std::fabs(v.f) < 9.2e18) {
                        out += std::to_string(static_cast<int64_t>(v.f));
                    } else {
                        char buf[400];
                        std::snprintf(buf, sizeof buf, "%.0f", std::trunc(v.f));
                        out += buf;
                    }
                } else {
                    out += std::to_string(v.kind == Kind::Bool ? v.b : v.i);
                }
                break;
            case 'f': {
                SLUICE_CHECK(v.is_number(), "%f format: a real number is required, not ", type_name(v));
                char buf[64];
                std::snprintf(buf, sizeof buf, "%f", v.as_double());
                out += buf;
                break;
            }
            default: fail("unsupported format character '", c, "'");
        }
    }
    SLUICE_CHECK(next == items.size() || !(args.is_list() && args.is_tuple),
                 "not all arguments converted during string formatting");
    return out;
}

std::optional<int64_t> py_parse_int(const std::string& s, int64_t base) {
    std::string t = strip_ascii_space(s);
    std::string digits;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == '_' && i > 0 && i + 1 < t.size()) continue;
        digits += t[i];
    }
    if (digits.empty() || base < 2 || base > 36) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (errno == 0 && end && *end == '\0' && !std::isspace(static_cast<unsigned char>(digits[0]))) return v;
    // Jinja falls back to int(float(value)).
    auto f = py_parse_float(s);
    if (f && std::isfinite(*f) && *f > -9.2e18 && *f < 9.2e18) return static_cast<int64_t>(*f);
    return std::nullopt;
}

std::optional<double> py_parse_float(const std::string& s) {
    std::string t = strip_ascii_space(s);
    if (t.empty()) return std::nullopt;
    std::string lower = ascii_lower(t);
    if (lower == "nan" || lower == "+nan" || lower == "-nan") return std::nan("");
    if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity") return HUGE_VAL;
    if (lower == "-inf" || lower == "-infinity") return -HUGE_VAL;
    for (char c : t)
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
            return std::nullopt;
    char* end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (!end || *end != '\0') return std::nullopt;
    return v;
}

}  // namespace sluice::jinja
