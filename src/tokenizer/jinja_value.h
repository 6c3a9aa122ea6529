// Values of the chat-template interpreter, modelled on the Python objects Jinja2 works with: None, bool, int,
// float, str, list/tuple, insertion-ordered dict, namespace, callables and Jinja's default Undefined. Owns the
// Python-compatible conversions the templates observe: str()/repr(), truthiness, ==/< and json.dumps formatting
// (transformers overrides `tojson` with json.dumps(ensure_ascii=False)).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::jinja {

class Interpreter;
struct Value;

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

using List = std::vector<Value>;

// Insertion-ordered mapping (Python dict semantics); lookups are linear, dicts in chat data are small.
struct Dict {
    std::vector<std::pair<Value, Value>> items;
    const Value* find(const Value& key) const;
    Value* find(const Value& key);
    void set(const Value& key, Value value);
};

// Containers created while an arena is active on this thread are emptied when it ends. Templates can build
// reference cycles (`{% set ns.a = ns %}`, a list appended to itself) that shared ownership alone would leak on
// every render; emptying what the render created breaks them. Containers that existed before are untouched.
class ContainerArena {
public:
    ContainerArena();
    ~ContainerArena();
    ContainerArena(const ContainerArena&) = delete;
    ContainerArena& operator=(const ContainerArena&) = delete;

private:
    friend struct Value;
    ContainerArena* outer_;
    std::vector<std::weak_ptr<List>> lists_;
    std::vector<std::weak_ptr<Dict>> dicts_;
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, CallArgs&)> fn;
};

struct Value {
    Kind kind = Kind::Undefined;
    bool is_tuple = false;  // a List created as a tuple: prints as (a, b)
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;  // String payload; for Undefined, a description of what was missing (used in errors)
    std::shared_ptr<List> list;
    std::shared_ptr<Dict> dict;  // Dict and Namespace
    std::shared_ptr<Callable> fn;

    static Value undefined(std::string what = {});
    static Value none();
    static Value boolean(bool v);
    static Value integer(int64_t v);
    static Value number(double v);
    static Value string(std::string v);
    static Value make_list(List items = {}, bool tuple = false);
    static Value make_dict();
    static Value make_namespace();
    static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
    bool is_mapping() const { return kind == Kind::Dict; }
    bool is_list() const { return kind == Kind::List; }
    double as_double() const;

    bool truthy() const;
};

// Python type name of a value ("str", "dict", ...), used in error messages.
std::string type_name(const Value& v);

// Python str() (Undefined prints as the empty string) and repr().
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double v);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0 means None. Throws on unserializable data.
struct JsonOptions {
    bool ensure_ascii = false;
    int indent = -1;
    std::string indent_str;  // used instead of `indent` spaces when non-empty
    std::string item_sep;    // defaults: ", " (no indent) or "," (indent)
    std::string key_sep = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

// Python ==, and the ordering used by <, sort and dictsort (throws TypeError-like errors for unorderable types).
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

// Code point helpers for str semantics (len, indexing, slicing).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);

}  // namespace sluice::jinja
