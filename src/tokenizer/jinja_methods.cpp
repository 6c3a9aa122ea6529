// Methods callable on template values (str, dict, list) and the global functions of transformers' chat-template
// environment. Mutating methods (list.append, dict.pop, ...) are refused like Jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_strings.h"

namespace sluice::jinja {
namespace {

using Fn = std::function<Value(Interpreter&, CallArgs&)>;

Value method(const std::string& name, Fn fn) { return Value::callable(name, std::move(fn)); }

Value arg(CallArgs& a, size_t pos, const char* name, Value dflt = Value{}) {
    if (pos < a.positional.size()) return a.positional[pos];
    for (const auto& [k, v] : a.keyword)
        if (k == name) return v;
    return dflt;
}

std::string str_arg(CallArgs& a, size_t pos, const char* name, const char* fn) {
    Value v = arg(a, pos, name);
    SLUICE_CHECK(v.is_string(), fn, "() argument '", name, "' must be str, not ", type_name(v));
    return v.s;
}

int64_t int_arg(CallArgs& a, size_t pos, const char* name, int64_t dflt) {
    Value v = arg(a, pos, name, Value::integer(dflt));
    if (v.kind == Kind::Bool) return v.b;
    SLUICE_CHECK(v.kind == Kind::Int, "argument '", name, "' must be an integer, not ", type_name(v));
    return v.i;
}

Value string_list(const std::vector<std::string>& parts) {
    List out;
    for (const auto& p : parts) out.push_back(Value::string(p));
    return Value::make_list(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
    auto one = [&](const Value& v) {
        SLUICE_CHECK(v.is_string(), prefix ? "startswith" : "endswith", " first arg must be str or a tuple of str");
        if (v.s.size() > s.size()) return false;
        return prefix ? s.compare(0, v.s.size(), v.s) == 0 : s.compare(s.size() - v.s.size(), v.s.size(), v.s) == 0;
    };
    if (affix.is_list() && affix.is_tuple) {
        for (const auto& v : *affix.list)
            if (one(v)) return true;
        return false;
    }
    return one(affix);
}

Value str_method(const Value& self, const std::string& name) {
    const std::string s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool left = name != "rstrip", right = name != "lstrip";
        return method(name, [s, left, right](Interpreter&, CallArgs& a) {
            Value chars = arg(a, 0, "chars", Value::none());
            SLUICE_CHECK(chars.is_none() || chars.is_string(), "strip arg must be None or str");
            return Value::string(py_strip(s, chars.is_none() ? nullptr : &chars.s, left, right));
        });
    }
    if (name == "split" || name == "rsplit") {
        bool r = name == "rsplit";
        return method(name, [s, r](Interpreter& in, CallArgs& a) {
            Value sep = arg(a, 0, "sep", Value::none());
            SLUICE_CHECK(sep.is_none() || sep.is_string(), "must be str or None, not ", type_name(sep));
            int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
            auto parts = r ? py_rsplit(s, sep.is_none() ? nullptr : &sep.s, maxsplit)
                           : py_split(s, sep.is_none() ? nullptr : &sep.s, maxsplit);
            in.tick(static_cast<int64_t>(parts.size()));
            return string_list(parts);
        });
    }
    if (name == "splitlines") {
        return method(name, [s](Interpreter&, CallArgs&) {
            std::vector<std::string> lines;
            size_t start = 0;
            while (start < s.size()) {
                size_t p = s.find('\n', start);
                if (p == std::string::npos) p = s.size();
                lines.push_back(s.substr(start, p - start));
                start = p + 1;
            }
            return string_list(lines);
        });
    }
    if (name == "startswith" || name == "endswith") {
        bool prefix = name == "startswith";
        return method(name, [s, prefix](Interpreter&, CallArgs& a) {
            return Value::boolean(affix_match(s, arg(a, 0, "prefix"), prefix));
        });
    }
    if (name == "replace") {
        return method(name, [s](Interpreter& in, CallArgs& a) {
            std::string out = py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                                         int_arg(a, 2, "count", -1));
            in.check_size(out.size());
            return Value::string(std::move(out));
        });
    }
    if (name == "upper") return method(name, [s](Interpreter&, CallArgs&) { return Value::string(ascii_upper(s)); });
    if (name == "lower") return method(name, [s](Interpreter&, CallArgs&) { return Value::string(ascii_lower(s)); });
    if (name == "title") return method(name, [s](Interpreter&, CallArgs&) { return Value::string(py_title(s)); });
    if (name == "capitalize") {
        return method(name, [s](Interpreter&, CallArgs&) { return Value::string(py_capitalize(s)); });
    }
    if (name == "find" || name == "rfind" || name == "count") {
        return method(name, [s, name](Interpreter&, CallArgs& a) {
            std::string sub = str_arg(a, 0, "sub", name.c_str());
            if (name == "count") {
                if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_decode(s).size()) + 1);
                int64_t n = 0;
                for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
                return Value::integer(n);
            }
            size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
            if (p == std::string::npos) return Value::integer(-1);
            return Value::integer(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
        });
    }
    if (name == "join") {
        return method(name, [s](Interpreter& in, CallArgs& a) {
            std::string out;
            bool first = true;
            for (const Value& v : iterate(arg(a, 0, "iterable"))) {
                SLUICE_CHECK(v.is_string(), "sequence item: expected str instance, ", type_name(v), " found");
                if (!first) out += s;
                first = false;
                out += v.s;
                in.check_size(out.size());
            }
            return Value::string(std::move(out));
        });
    }
    if (name == "removeprefix" || name == "removesuffix") {
        bool prefix = name == "removeprefix";
        return method(name, [s, prefix](Interpreter&, CallArgs& a) {
            Value affix = arg(a, 0, "affix");
            if (!affix.is_string() || !affix_match(s, affix, prefix)) return Value::string(s);
            return Value::string(prefix ? s.substr(affix.s.size()) : s.substr(0, s.size() - affix.s.size()));
        });
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "islower" ||
        name == "isupper") {
        return method(name, [s, name](Interpreter&, CallArgs&) {
            if (s.empty()) return Value::boolean(false);
            if (name == "islower") return Value::boolean(ascii_lower(s) == s && ascii_upper(s) != s);
            if (name == "isupper") return Value::boolean(ascii_upper(s) == s && ascii_lower(s) != s);
            for (char32_t c : utf8_decode(s)) {
                bool ok = name == "isspace"   ? py_isspace(c)
                          : name == "isdigit" ? (c >= '0' && c <= '9')
                          : name == "isalpha" ? ((c | 32) >= 'a' && (c | 32) <= 'z')
                                              : ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9');
                if (!ok) return Value::boolean(false);
            }
            return Value::boolean(true);
        });
    }
    return Value{};
}

Value dict_method(const Value& self, const std::string& name) {
    std::shared_ptr<Dict> d = self.dict;
    if (name == "get") {
        return method(name, [d](Interpreter&, CallArgs& a) {
            SLUICE_CHECK(!a.positional.empty(), "get expected at least 1 argument, got 0");
            const Value* v = d->find(a.positional[0]);
            return v ? *v : (a.positional.size() > 1 ? a.positional[1] : Value::none());
        });
    }
    if (name == "items" || name == "keys" || name == "values") {
        return method(name, [d, name](Interpreter&, CallArgs&) {
            List out;
            for (const auto& [k, v] : d->items) {
                out.push_back(name == "items" ? Value::make_list({k, v}, true) : (name == "keys" ? k : v));
            }
            return Value::make_list(std::move(out));
        });
    }
    if (name == "copy") {
        return method(name, [d](Interpreter&, CallArgs&) {
            Value out = Value::make_dict();
            *out.dict = *d;
            return out;
        });
    }
    static const char* const mutating[] = {"pop", "popitem", "setdefault", "update", "clear"};
    for (const char* m : mutating) {
        if (name == m) return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
    return Value{};
}

Value list_method(const Value& self, const std::string& name) {
    std::shared_ptr<List> l = self.list;
    if (name == "index" || name == "count") {
        return method(name, [l, name](Interpreter&, CallArgs& a) {
            SLUICE_CHECK(!a.positional.empty(), name, "() takes at least 1 argument");
            int64_t n = 0;
            for (size_t i = 0; i < l->size(); ++i) {
                if (!equals((*l)[i], a.positional[0])) continue;
                if (name == "index") return Value::integer(static_cast<int64_t>(i));
                ++n;
            }
            SLUICE_CHECK(name == "count", to_repr(a.positional[0]), " is not in list");
            return Value::integer(n);
        });
    }
    static const char* const mutating[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
    for (const char* m : mutating) {
        if (name == m) {
            return Value::undefined("access to attribute '" + name + "' of '" + type_name(self) +
                                    "' object is unsafe.");
        }
    }
    return Value{};
}

std::string strftime_tm(const std::string& fmt, const std::tm& tm) {
    SLUICE_CHECK(fmt.size() < 1024, "strftime_now: format too long");
    std::string buf(4096, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return buf;
}

}  // namespace

Value bound_method(Interpreter& in, const Value& obj, const std::string& name) {
    (void)in;
    switch (obj.kind) {
        case Kind::String: return str_method(obj, name);
        case Kind::Dict: return dict_method(obj, name);
        case Kind::List: return list_method(obj, name);
        default: return Value{};
    }
}

void install_globals(Interpreter& in, std::unordered_map<std::string, Value>& g) {
    (void)in;
    g["raise_exception"] = Value::callable("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
        fail("raise_exception: ", a.positional.empty() ? std::string() : to_str(a.positional[0]));
    });
    g["strftime_now"] = Value::callable("strftime_now", [](Interpreter& interp, CallArgs& a) {
        Value fmt = arg(a, 0, "format");
        SLUICE_CHECK(fmt.is_string(), "strftime_now: format must be a string");
        return Value::string(strftime_tm(fmt.s, interp.now()));
    });
    g["namespace"] = Value::callable("namespace", [](Interpreter&, CallArgs& a) {
        Value ns = Value::make_namespace();
        for (const Value& init : a.positional) {
            SLUICE_CHECK(init.is_mapping(), "namespace() positional argument must be a mapping");
            for (const auto& [k, v] : init.dict->items) ns.dict->set(k, v);
        }
        for (const auto& [k, v] : a.keyword) ns.dict->set(Value::string(k), v);
        for (const auto& kv : ns.dict->items) {
            SLUICE_CHECK(!(kv.first.is_string() && !kv.first.s.empty() && kv.first.s[0] == '_'),
                         "Chat templates cannot store underscore-prefixed attributes on a namespace, but got ",
                         to_repr(kv.first), ".");
        }
        return ns;
    });
    g["dict"] = Value::callable("dict", [](Interpreter&, CallArgs& a) {
        Value d = Value::make_dict();
        SLUICE_CHECK(a.positional.size() <= 1, "dict expected at most 1 argument");
        if (!a.positional.empty()) {
            const Value& init = a.positional[0];
            if (init.is_mapping()) {
                for (const auto& [k, v] : init.dict->items) d.dict->set(k, v);
            } else {
                for (const Value& pair : iterate(init)) {
                    List kv = iterate(pair);
                    SLUICE_CHECK(kv.size() == 2, "dictionary update sequence element has length ", kv.size(),
                                 "; 2 is required");
                    d.dict->set(kv[0], kv[1]);
                }
            }
        }
        for (const auto& [k, v] : a.keyword) d.dict->set(Value::string(k), v);
        return d;
    });
    g["range"] = Value::callable("range", [](Interpreter& interp, CallArgs& a) {
        SLUICE_CHECK(!a.positional.empty() && a.positional.size() <= 3, "range expected 1 to 3 arguments");
        for (const Value& v : a.positional) {
            SLUICE_CHECK(v.kind == Kind::Int || v.kind == Kind::Bool, "range() arguments must be integers, not ",
                         type_name(v));
        }
        auto iv = [&](size_t i) { return a.positional[i].kind == Kind::Bool ? int64_t{a.positional[i].b} : a.positional[i].i; };
        int64_t start = a.positional.size() == 1 ? 0 : iv(0);
        int64_t stop = a.positional.size() == 1 ? iv(0) : iv(1);
        int64_t step = a.positional.size() == 3 ? iv(2) : 1;
        SLUICE_CHECK(step != 0, "range() arg 3 must not be zero");
        // Jinja's sandbox refuses ranges longer than 100000 items (MAX_RANGE).
        double count = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
        SLUICE_CHECK(count <= 100000, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
            interp.tick();
            out.push_back(Value::integer(i));
            if (__builtin_add_overflow(i, step, &i)) break;
        }
        return Value::make_list(std::move(out));
    });
}

}  // namespace sluice::jinja
