// Python-compatible behaviour of template values: truthiness, str()/repr(), equality and ordering, json.dumps.
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace sluice::jinja {
namespace {

constexpr int kMaxNesting = 256;  // containers nested deeper than this cannot be printed (also breaks cycles)

bool printable(char32_t c) {
    // Approximates Python's str.isprintable(): control, format, separator (except space) and private-use
    // characters are not printable.
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad) return false;
    if (c == 0x1680 || c == 0x180e || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
    if ((c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff) return false;
    if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff9 && c <= 0xfffb) || c > 0x10ffff) return false;
    if ((c >= 0xe0000 && c <= 0xe0fff) || c >= 0xf0000) return false;
    return true;
}

void hex_escape(std::string& out, const char* prefix, unsigned v, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, v);
    out += buf;
}

std::string str_repr(const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, quote);
    for (char32_t c : utf8_decode(s)) {
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (printable(c)) {
            utf8_append(out, c);
        } else if (c < 0x100) {
            hex_escape(out, "\\x", c, 2);
        } else if (c < 0x10000) {
            hex_escape(out, "\\u", c, 4);
        } else {
            hex_escape(out, "\\U", c, 8);
        }
    }
    out += quote;
    return out;
}

void repr_into(std::string& out, const Value& v, int depth);

void container_repr(std::string& out, const Value& v, int depth) {
    SLUICE_CHECK(depth < kMaxNesting, "value nested too deeply to print (or contains itself)");
    if (v.kind == Kind::List) {
        out += v.is_tuple ? '(' : '[';
        for (size_t i = 0; i < v.list->size(); ++i) {
            if (i) out += ", ";
            repr_into(out, (*v.list)[i], depth + 1);
        }
        if (v.is_tuple && v.list->size() == 1) out += ',';
        out += v.is_tuple ? ')' : ']';
        return;
    }
    out += v.kind == Kind::Namespace ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, item] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, depth + 1);
        out += ": ";
        repr_into(out, item, depth + 1);
    }
    out += v.kind == Kind::Namespace ? "}>" : "}";
}

void repr_into(std::string& out, const Value& v, int depth) {
    switch (v.kind) {
        case Kind::String: out += str_repr(v.s); return;
        case Kind::List:
        case Kind::Dict:
        case Kind::Namespace: container_repr(out, v, depth); return;
        case Kind::Undefined: out += "Undefined"; return;
        default: out += to_str(v); return;
    }
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    for (char32_t c : utf8_decode(s)) {
        if (const char* e = tok::json_short_escape(c)) {
            out += e;
        } else if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
            if (c >= 0x10000) {
                char32_t v = c - 0x10000;
                hex_escape(out, "\\u", 0xd800 + (v >> 10), 4);
                hex_escape(out, "\\u", 0xdc00 + (v & 0x3ff), 4);
            } else {
                hex_escape(out, "\\u", c, 4);
            }
        } else {
            utf8_append(out, c);
        }
    }
    out += '"';
}

std::string json_key(const Value& k) {
    switch (k.kind) {
        case Kind::String: return k.s;
        case Kind::Bool: return k.b ? "true" : "false";
        case Kind::None: return "null";
        case Kind::Int: return std::to_string(k.i);
        case Kind::Float: return float_repr(k.f);
        default: fail("keys must be str, int, float, bool or None, not ", type_name(k));
    }
}

void json_into(std::string& out, const Value& v, const JsonOptions& o, int depth) {
    SLUICE_CHECK(depth < kMaxNesting, "tojson: value nested too deeply (or contains itself)");
    const bool pretty = o.indent >= 0 || !o.indent_str.empty();
    const std::string item_sep = !o.item_sep.empty() ? o.item_sep : (pretty ? "," : ", ");
    const std::string unit = !o.indent_str.empty() ? o.indent_str : std::string(std::max(o.indent, 0), ' ');
    auto newline = [&](int level) {
        if (!pretty) return;
        out += '\n';
        for (int l = 0; l < level; ++l) out += unit;
    };
    switch (v.kind) {
        case Kind::None: out += "null"; return;
        case Kind::Bool: out += v.b ? "true" : "false"; return;
        case Kind::Int: out += std::to_string(v.i); return;
        case Kind::Float:
            if (std::isnan(v.f)) out += "NaN";
            else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
            else out += float_repr(v.f);
            return;
        case Kind::String: json_string(out, v.s, o.ensure_ascii); return;
        case Kind::List: {
            if (v.list->empty()) { out += "[]"; return; }
            out += '[';
            for (size_t i = 0; i < v.list->size(); ++i) {
                if (i) out += item_sep;
                newline(depth + 1);
                json_into(out, (*v.list)[i], o, depth + 1);
            }
            newline(depth);
            out += ']';
            return;
        }
        case Kind::Dict: {
            if (v.dict->items.empty()) { out += "{}"; return; }
            std::vector<std::pair<std::string, const Value*>> items;
            for (const auto& [k, item] : v.dict->items) items.emplace_back(json_key(k), &item);
            if (o.sort_keys) {
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return utf8_decode(a.first) < utf8_decode(b.first); });
            }
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += item_sep;
                newline(depth + 1);
                json_string(out, items[i].first, o.ensure_ascii);
                out += o.key_sep;
                json_into(out, *items[i].second, o, depth + 1);
            }
            newline(depth);
            out += '}';
            return;
        }
        default: fail("tojson: object of type ", type_name(v), " is not JSON serializable");
    }
}

}  // namespace

const Value* Dict::find(const Value& key) const {
    for (const auto& kv : items)
        if (equals(kv.first, key)) return &kv.second;
    return nullptr;
}

Value* Dict::find(const Value& key) {
    for (auto& kv : items)
        if (equals(kv.first, key)) return &kv.second;
    return nullptr;
}

void Dict::set(const Value& key, Value value) {
    if (Value* v = find(key)) {
        *v = std::move(value);
    } else {
        items.emplace_back(key, std::move(value));
    }
}

Value Value::undefined(std::string what) { return {.s = std::move(what)}; }
Value Value::none() { return {.kind = Kind::None}; }
Value Value::boolean(bool b) { return {.kind = Kind::Bool, .b = b}; }
Value Value::integer(int64_t i) { return {.kind = Kind::Int, .i = i}; }
Value Value::number(double f) { return {.kind = Kind::Float, .f = f}; }
Value Value::string(std::string s) { return {.kind = Kind::String, .s = std::move(s)}; }

namespace {
thread_local ContainerArena* t_arena = nullptr;
}  // namespace

ContainerArena::ContainerArena() : outer_(t_arena) { t_arena = this; }

ContainerArena::~ContainerArena() {
    t_arena = outer_;
    // Move the contents out before they are destroyed, so no destructor runs while a container is half-cleared.
    std::vector<List> dead_lists;
    std::vector<std::vector<std::pair<Value, Value>>> dead_dicts;
    for (auto& w : lists_)
        if (auto p = w.lock()) dead_lists.push_back(std::move(*p)), p->clear();
    for (auto& w : dicts_)
        if (auto p = w.lock()) dead_dicts.push_back(std::move(p->items)), p->items.clear();
}

Value Value::make_list(List items, bool tuple) {
    Value v;
    v.kind = Kind::List;
    v.is_tuple = tuple;
    v.list = std::make_shared<List>(std::move(items));
    if (t_arena) t_arena->lists_.push_back(v.list);
    return v;
}
Value Value::make_dict() {
    Value v;
    v.kind = Kind::Dict;
    v.dict = std::make_shared<Dict>();
    if (t_arena) t_arena->dicts_.push_back(v.dict);
    return v;
}
Value Value::make_namespace() {
    Value v = make_dict();
    v.kind = Kind::Namespace;
    return v;
}
Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
    Value v;
    v.kind = Kind::Callable;
    v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

double Value::as_double() const {
    switch (kind) {
        case Kind::Bool: return b ? 1.0 : 0.0;
        case Kind::Int: return static_cast<double>(i);
        case Kind::Float: return f;
        default: fail("expected a number, got ", type_name(*this));
    }
}

bool Value::truthy() const {
    switch (kind) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return b;
        case Kind::Int: return i != 0;
        case Kind::Float: return f != 0.0;
        case Kind::String: return !s.empty();
        case Kind::List: return !list->empty();
        case Kind::Dict: return !dict->items.empty();
        default: return true;
    }
}

std::string type_name(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List: return v.is_tuple ? "tuple" : "list";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Callable: return "function";
    }
    return "?";
}

std::string float_repr(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    // sci looks like "-1.2345e+16": split into sign, digits and exponent.
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    int exp = std::stoi(sci.substr(e + 1));
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    if (exp >= -5 + 1 && exp < 16) {
        std::string out;
        if (exp >= 0) {
            if (static_cast<int>(digits.size()) <= exp + 1) {
                out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
            } else {
                out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
            }
        } else {
            out = "0." + std::string(-exp - 1, '0') + digits;
        }
        return sign + out;
    }
    std::string out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + out + eb;
}

std::string to_str(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return "";
        case Kind::None: return "None";
        case Kind::Bool: return v.b ? "True" : "False";
        case Kind::Int: return std::to_string(v.i);
        case Kind::Float: return float_repr(v.f);
        case Kind::String: return v.s;
        case Kind::Callable: return "<function " + v.fn->name + ">";
        default: {
            std::string out;
            container_repr(out, v, 0);
            return out;
        }
    }
}

std::string to_repr(const Value& v) {
    std::string out;
    repr_into(out, v, 0);
    return out;
}

std::string to_json(const Value& v, const JsonOptions& opts) {
    std::string out;
    json_into(out, v, opts, 0);
    return out;
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
        return (a.kind == Kind::Bool ? a.b : a.i) == (b.kind == Kind::Bool ? b.b : b.i);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::String: return a.s == b.s;
        case Kind::List: {
            if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
            for (size_t i = 0; i < a.list->size(); ++i)
                if (!equals((*a.list)[i], (*b.list)[i])) return false;
            return true;
        }
        case Kind::Dict: {
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto& [k, item] : a.dict->items) {
                const Value* other = b.dict->find(k);
                if (!other || !equals(item, *other)) return false;
            }
            return true;
        }
        default: return a.dict == b.dict && a.fn == b.fn;
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind != Kind::Float && b.kind != Kind::Float) {
            int64_t x = a.kind == Kind::Bool ? a.b : a.i, y = b.kind == Kind::Bool ? b.b : b.i;
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        double x = a.as_double(), y = b.as_double();
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.kind == Kind::String && b.kind == Kind::String) {
        // UTF-8 byte order equals code point order.
        int c = a.s.compare(b.s);
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.kind == Kind::List && b.kind == Kind::List) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t i = 0; i < n; ++i) {
            if (equals((*a.list)[i], (*b.list)[i])) continue;
            return compare((*a.list)[i], (*b.list)[i]);
        }
        return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
    }
    fail("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::u32string utf8_decode(std::string_view s) {
    // Invalid bytes decode to U+FFFD one byte at a time, so arbitrary input never fails.
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; ++k) {
            unsigned char cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xc0) != 0x80) ok = false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if (!ok || cp > 0x10ffff) {
            out += 0xfffd;
            i += 1;
        } else {
            out += cp;
            i += len;
        }
    }
    return out;
}

std::string utf8_encode(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) utf8_append(out, c);
    return out;
}

}  // namespace sluice::jinja
