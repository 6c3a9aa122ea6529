// Built-ins of the chat-template interpreter: operators, filters, tests, str/dict/list methods and the globals
// transformers installs (namespace, dict, range, raise_exception, strftime_now). Mutating list/dict methods are
// refused as in Jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_strings.h"

namespace sluice::jinja {
namespace {

// Positional-or-keyword argument access with Python-like defaults.
struct Args {
    CallArgs& a;
    const char* fn;
    Value get(size_t pos, const char* name, Value dflt = Value{}) const {
        if (pos < a.positional.size()) return a.positional[pos];
        for (const auto& [k, v] : a.keyword)
            if (k == name) return v;
        return dflt;
    }
    bool has(size_t pos, const char* name) const {
        if (pos < a.positional.size()) return true;
        for (const auto& kv : a.keyword)
            if (kv.first == name) return true;
        return false;
    }
    std::string str(size_t pos, const char* name, const std::string& dflt = "") const {
        Value v = get(pos, name, Value::string(dflt));
        SLUICE_CHECK(v.is_string(), fn, ": argument '", name, "' must be a string, got ", type_name(v));
        return v.s;
    }
    int64_t integer(size_t pos, const char* name, int64_t dflt) const {
        Value v = get(pos, name, Value::integer(dflt));
        if (v.kind == Kind::Bool) return v.b;
        SLUICE_CHECK(v.kind == Kind::Int, fn, ": argument '", name, "' must be an integer, got ", type_name(v));
        return v.i;
    }
};

int64_t as_int(const Value& v) {
    if (v.kind == Kind::Bool) return v.b;
    return v.i;
}

int64_t checked_op(char op, int64_t a, int64_t b) {
    int64_t r = 0;
    bool overflow = op == '+' ? __builtin_add_overflow(a, b, &r)
                    : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                : __builtin_mul_overflow(a, b, &r);
    SLUICE_CHECK(!overflow, "integer overflow");
    return r;
}

// Attribute path lookup used by map/selectattr/sort/... ("a.b", integer parts index lists).
Value attr_path(Interpreter& in, const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (true) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
        cur = in.get_item(cur, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

Value sorted(Interpreter& in, List items, bool reverse, bool case_sensitive, const std::string& attribute) {
    auto key = [&](const Value& v) {
        Value k = attribute.empty() ? v : attr_path(in, v, attribute);
        if (!case_sensitive && k.is_string()) return Value::string(ascii_lower(k.s));
        return k;
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& v : items) keyed.emplace_back(key(v), v);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    List out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return Value::make_list(std::move(out));
}

Value select_common(Interpreter& in, const Value& input, CallArgs& a, bool by_attr, bool keep) {
    List out;
    std::string attr;
    size_t first_test_arg = 0;
    if (by_attr) {
        SLUICE_CHECK(!a.positional.empty() && a.positional[0].is_string(), "selectattr: missing attribute name");
        attr = a.positional[0].s;
        first_test_arg = 1;
    }
    std::string test;
    if (a.positional.size() > first_test_arg) {
        SLUICE_CHECK(a.positional[first_test_arg].is_string(), "select: test name must be a string");
        test = a.positional[first_test_arg].s;
    }
    for (const Value& item : iterate(input)) {
        in.tick();
        Value v = by_attr ? attr_path(in, item, attr) : item;
        bool ok;
        if (test.empty()) {
            ok = v.truthy();
        } else {
            CallArgs targs;
            targs.positional.assign(a.positional.begin() + static_cast<long>(first_test_arg) + 1, a.positional.end());
            ok = apply_test(in, test, v, targs);
        }
        if (ok == keep) out.push_back(item);
    }
    return Value::make_list(std::move(out));
}

JsonOptions json_options(const Args& args) {
    JsonOptions o;
    o.ensure_ascii = args.get(0, "ensure_ascii", Value::boolean(false)).truthy();
    Value indent = args.get(1, "indent", Value::none());
    if (indent.kind == Kind::Int || indent.kind == Kind::Bool) {
        o.indent = static_cast<int>(std::clamp<int64_t>(as_int(indent), 0, 64));
    } else if (indent.is_string()) {
        o.indent_str = indent.s;
        if (o.indent_str.empty()) o.indent = 0;
    } else {
        SLUICE_CHECK(indent.is_none(), "tojson: indent must be an integer, a string or None");
    }
    Value seps = args.get(2, "separators", Value::none());
    if (!seps.is_none()) {
        SLUICE_CHECK(seps.is_list() && seps.list->size() == 2 && (*seps.list)[0].is_string() &&
                         (*seps.list)[1].is_string(),
                     "tojson: separators must be a pair of strings");
        o.item_sep = (*seps.list)[0].s;
        o.key_sep = (*seps.list)[1].s;
        if (o.item_sep.empty()) o.item_sep = std::string();  // json.dumps allows "", keep default otherwise
    }
    o.sort_keys = args.get(3, "sort_keys", Value::boolean(false)).truthy();
    return o;
}

}  // namespace

void undefined_error(const Value& undef) {
    fail(undef.s.empty() ? std::string("value is undefined") : undef.s);
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind) {
        case Kind::Undefined: return false;
        case Kind::String:
            SLUICE_CHECK(item.is_string(), "'in <string>' requires string as left operand, not ", type_name(item));
            return container.s.find(item.s) != std::string::npos;
        case Kind::List:
            for (const auto& v : *container.list)
                if (equals(v, item)) return true;
            return false;
        case Kind::Dict:
        case Kind::Namespace: return container.dict->find(item) != nullptr;
        default: fail("argument of type '", type_name(container), "' is not iterable");
    }
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        std::string s = to_str(a);
        std::string t = to_str(b);
        in.check_size(s.size() + t.size());
        return Value::string(s + t);
    }
    if (a.kind == Kind::Undefined) undefined_error(a);
    if (b.kind == Kind::Undefined) undefined_error(b);
    const bool ints = (a.kind == Kind::Int || a.kind == Kind::Bool) && (b.kind == Kind::Int || b.kind == Kind::Bool);
    const bool nums = a.is_number() && b.is_number();
    auto unsupported = [&]() -> Value {
        fail("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'");
    };
    if (op == "+") {
        if (ints) return Value::integer(checked_op('+', as_int(a), as_int(b)));
        if (nums) return Value::number(a.as_double() + b.as_double());
        if (a.is_string() && b.is_string()) {
            in.check_size(a.s.size() + b.s.size());
            return Value::string(a.s + b.s);
        }
        if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
            in.check_size((a.list->size() + b.list->size()) * sizeof(Value));
            List out = *a.list;
            out.insert(out.end(), b.list->begin(), b.list->end());
            return Value::make_list(std::move(out), a.is_tuple);
        }
        return unsupported();
    }
    if (op == "-") {
        if (ints) return Value::integer(checked_op('-', as_int(a), as_int(b)));
        if (nums) return Value::number(a.as_double() - b.as_double());
        return unsupported();
    }
    if (op == "*") {
        if (ints) return Value::integer(checked_op('*', as_int(a), as_int(b)));
        if (nums) return Value::number(a.as_double() * b.as_double());
        const Value* seq = a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
        const Value* count = seq == &a ? &b : &a;
        if (!seq || !(count->kind == Kind::Int || count->kind == Kind::Bool)) return unsupported();
        int64_t n = std::max<int64_t>(0, as_int(*count));
        size_t unit = seq->is_string() ? seq->s.size() : seq->list->size() * sizeof(Value);
        SLUICE_CHECK(unit == 0 || n <= static_cast<int64_t>(in.limits().max_output_bytes / unit), "output exceeds the limit of ",
                     in.limits().max_output_bytes, " bytes");
        if (seq->is_string()) {
            std::string out;
            for (int64_t i = 0; i < n; ++i) out += seq->s;
            return Value::string(std::move(out));
        }
        List out;
        for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->list->begin(), seq->list->end());
        return Value::make_list(std::move(out), seq->is_tuple);
    }
    if (op == "/") {
        if (!nums) return unsupported();
        SLUICE_CHECK(b.as_double() != 0.0, "division by zero");
        return Value::number(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
        if (op == "%" && a.is_string()) return Value::string(percent_format(a.s, b));
        if (!nums) return unsupported();
        if (ints) {
            int64_t x = as_int(a), y = as_int(b);
            SLUICE_CHECK(y != 0, "integer division or modulo by zero");
            SLUICE_CHECK(!(x == INT64_MIN && y == -1), "integer overflow");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                q -= 1;
                r += y;
            }
            return Value::integer(op == "//" ? q : r);
        }
        double x = a.as_double(), y = b.as_double();
        SLUICE_CHECK(y != 0.0, "float division or modulo by zero");
        double q = std::floor(x / y);
        if (op == "//") return Value::number(q);
        double r = std::fmod(x, y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value::number(r);
    }
    if (op == "**") {
        if (!nums) return unsupported();
        if (ints && as_int(b) >= 0) {
            int64_t base = as_int(a), e = as_int(b), r = 1;
            for (int64_t i = 0; i < e; ++i) {
                if (r == 0 || (r == 1 && base == 1)) break;
                r = checked_op('*', r, base);
            }
            return Value::integer(r);
        }
        return Value::number(std::pow(a.as_double(), b.as_double()));
    }
    fail("unknown operator '", op, "'");
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
    Args args{a, name.c_str()};
    if (name == "tojson") return Value::string(to_json(v, json_options(args)));
    if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
        if (name == "safe") return v;
        return Value::string(html_escape(to_str(v)));
    }
    if (name == "string") return Value::string(to_str(v));
    if (name == "length" || name == "count") {
        switch (v.kind) {
            case Kind::Undefined: return Value::integer(0);
            case Kind::String: return Value::integer(static_cast<int64_t>(utf8_decode(v.s).size()));
            case Kind::List: return Value::integer(static_cast<int64_t>(v.list->size()));
            case Kind::Dict:
            case Kind::Namespace: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
            default: fail("object of type '", type_name(v), "' has no len()");
        }
    }
    if (name == "default" || name == "d") {
        bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
        if (v.is_undefined() || (boolean && !v.truthy())) return args.get(0, "default_value", Value::string(""));
        return v;
    }
    if (name == "trim") {
        Value chars = args.get(0, "chars", Value::none());
        return Value::string(py_strip(to_str(v), chars.is_none() ? nullptr : &chars.s, true, true));
    }
    if (name == "upper") return Value::string(ascii_upper(to_str(v)));
    if (name == "lower") return Value::string(ascii_lower(to_str(v)));
    if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
    if (name == "title") return Value::string(py_title(to_str(v)));
    if (name == "replace") {
        std::string s = to_str(v);
        int64_t count = args.get(2, "count", Value::none()).is_none() ? -1 : args.integer(2, "count", -1);
        std::string out = py_replace(s, to_str(args.get(0, "old")), to_str(args.get(1, "new")), count);
        in.check_size(out.size());
        return Value::string(std::move(out));
    }
    if (name == "join") {
        std::string sep = args.str(0, "d", "");
        Value attr = args.get(1, "attribute", Value::none());
        std::string out;
        bool first = true;
        for (const Value& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            out += to_str(attr.is_none() ? item : attr_path(in, item, to_str(attr)));
            in.check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "first") {
        List items = iterate(v);
        return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    }
    if (name == "last") {
        List items = iterate(v);
        return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    }
    if (name == "reverse") {
        if (v.is_string()) {
            std::u32string u = utf8_decode(v.s);
            std::reverse(u.begin(), u.end());
            return Value::string(utf8_encode(u));
        }
        List items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
    }
    if (name == "items") {
        if (v.is_undefined()) return Value::make_list();
        SLUICE_CHECK(v.is_mapping(), "items: can only get item pairs from a mapping, got ", type_name(v));
        List out;
        for (const auto& [k, item] : v.dict->items) out.push_back(Value::make_list({k, item}, true));
        return Value::make_list(std::move(out));
    }
    if (name == "dictsort") {
        if (v.is_undefined()) undefined_error(v);
        SLUICE_CHECK(v.is_mapping(), "dictsort: expected a mapping, got ", type_name(v));
        bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
        std::string by = args.str(1, "by", "key");
        bool reverse = args.get(2, "reverse", Value::boolean(false)).truthy();
        SLUICE_CHECK(by == "key" || by == "value", "dictsort: You can only sort by either 'key' or 'value'");
        List pairs;
        for (const auto& [k, item] : v.dict->items) pairs.push_back(Value::make_list({k, item}, true));
        return sorted(in, std::move(pairs), reverse, case_sensitive, by == "key" ? "0" : "1");
    }
    if (name == "sort") {
        return sorted(in, iterate(v), args.get(0, "reverse", Value::boolean(false)).truthy(),
                      args.get(1, "case_sensitive", Value::boolean(false)).truthy(),
                      args.get(2, "attribute", Value::none()).is_none() ? "" : to_str(args.get(2, "attribute")));
    }
    if (name == "unique") {
        List out;
        for (const Value& item : iterate(v)) {
            in.tick();
            bool seen = false;
            for (const Value& o : out) seen = seen || equals(o, item);
            if (!seen) out.push_back(item);
        }
        return Value::make_list(std::move(out));
    }
    if (name == "min" || name == "max") {
        Value s = sorted(in, iterate(v), name == "max", args.get(0, "case_sensitive", Value::boolean(false)).truthy(),
                         args.get(1, "attribute", Value::none()).is_none() ? "" : to_str(args.get(1, "attribute")));
        return s.list->empty() ? Value::undefined("No aggregated item, sequence was empty.") : s.list->front();
    }
    if (name == "sum") {
        Value attr = args.get(0, "attribute", Value::none());
        Value total = args.get(1, "start", Value::integer(0));
        for (const Value& item : iterate(v)) total = binary_op(in, "+", total, attr.is_none() ? item : attr_path(in, item, to_str(attr)));
        return total;
    }
    if (name == "map") {
        List out;
        Value attr = args.get(99, "attribute", Value::none());
        for (const Value& item : iterate(v)) {
            in.tick();
            if (!attr.is_none()) {
                Value r = attr_path(in, item, to_str(attr));
                if (r.is_undefined() && args.has(99, "default")) r = args.get(99, "default");
                out.push_back(r);
            } else {
                SLUICE_CHECK(!a.positional.empty() && a.positional[0].is_string(), "map: expected a filter name");
                CallArgs fargs;
                fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
                fargs.keyword = a.keyword;
                out.push_back(apply_filter(in, a.positional[0].s, item, fargs));
            }
        }
        return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject") return select_common(in, v, a, false, name == "select");
    if (name == "selectattr" || name == "rejectattr") return select_common(in, v, a, true, name == "selectattr");
    if (name == "int") {
        Value dflt = args.get(0, "default", Value::integer(0));
        if (v.kind == Kind::Int) return v;
        if (v.kind == Kind::Bool) return Value::integer(v.b);
        if (v.kind == Kind::Float) return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? Value::integer(static_cast<int64_t>(v.f)) : dflt;
        if (v.is_string()) {
            auto r = py_parse_int(v.s, args.integer(1, "base", 10));
            return r ? Value::integer(*r) : dflt;
        }
        return dflt;
    }
    if (name == "float") {
        Value dflt = args.get(0, "default", Value::number(0.0));
        if (v.is_number()) return Value::number(v.as_double());
        if (v.is_string()) {
            auto r = py_parse_float(v.s);
            return r ? Value::number(*r) : dflt;
        }
        return dflt;
    }
    if (name == "abs") {
        SLUICE_CHECK(v.is_number(), "bad operand type for abs(): '", type_name(v), "'");
        if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
        SLUICE_CHECK(as_int(v) != INT64_MIN, "integer overflow");
        return Value::integer(std::llabs(as_int(v)));
    }
    if (name == "round") {
        SLUICE_CHECK(v.is_number(), "round: expected a number, got ", type_name(v));
        int64_t precision = std::clamp<int64_t>(args.integer(0, "precision", 0), -300, 300);
        std::string method = args.str(1, "method", "common");
        double p = std::pow(10.0, static_cast<double>(precision));
        double x = v.as_double() * p;
        double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
        return Value::number(r / p);
    }
    if (name == "indent") {
        std::string width = args.get(0, "width", Value::integer(4)).is_string()
                                ? args.get(0, "width").s
                                : std::string(static_cast<size_t>(std::clamp<int64_t>(args.integer(0, "width", 4), 0, 1024)), ' ');
        return Value::string(py_indent(to_str(v), width, args.get(1, "first", Value::boolean(false)).truthy(),
                                       args.get(2, "blank", Value::boolean(false)).truthy()));
    }
    if (name == "attr") return in.get_attr(v, args.str(0, "name"));
    if (name == "format") {
        if (a.positional.size() == 1) return Value::string(percent_format(to_str(v), a.positional[0]));
        return Value::string(percent_format(to_str(v), Value::make_list(a.positional, true)));
    }
    if (name == "wordcount") {
        int64_t n = 0;
        bool in_word = false;
        for (char32_t c : utf8_decode(to_str(v))) {
            bool w = py_is_alnum_or_underscore(c);
            if (w && !in_word) ++n;
            in_word = w;
        }
        return Value::integer(n);
    }
    fail("no filter named '", name, "'");
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
    Args args{a, name.c_str()};
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_mapping();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Kind::Int;
    if (name == "float") return v.kind == Kind::Float;
    if (name == "boolean") return v.kind == Kind::Bool;
    if (name == "true") return v.kind == Kind::Bool && v.b;
    if (name == "false") return v.kind == Kind::Bool && !v.b;
    if (name == "iterable") return v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
    if (name == "sequence") return v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
    if (name == "callable") return v.kind == Kind::Callable;
    if (name == "lower") return v.is_string() && ascii_lower(v.s) == v.s;
    if (name == "upper") return v.is_string() && ascii_upper(v.s) == v.s;
    if (name == "odd" || name == "even") {
        SLUICE_CHECK(v.kind == Kind::Int || v.kind == Kind::Bool, name, " test: expected an integer");
        return (as_int(v) % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
        int64_t n = args.integer(0, "num", 1);
        SLUICE_CHECK(n != 0 && (v.kind == Kind::Int || v.kind == Kind::Bool), "divisibleby: bad operands");
        return as_int(v) % n == 0;
    }
    Value other = args.get(0, "other");
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
    if (name == "ne" || name == "!=") return !equals(v, other);
    if (name == "sameas") return v.kind == other.kind && (v.kind == Kind::None || v.kind == Kind::Bool ? v.b == other.b : equals(v, other));
    if (name == "in") return contains(other, v);
    if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other) < 0;
    if (name == "le" || name == "<=") return compare(v, other) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other) > 0;
    if (name == "ge" || name == ">=") return compare(v, other) >= 0;
    (void)in;
    fail("no test named '", name, "'");
}

}  // namespace sluice::jinja
