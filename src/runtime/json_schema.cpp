// JSON Schema -> node graph (see json_schema.h). Compilation makes one node per schema (a $ref becomes an alias of
// its target, so recursion needs no lookahead), then finalize() resolves aliases, flattens and checks choices
// (literals merged, integer folded into number, first bytes disjoint) and refuses reachable nodes without a finite
// instance.
#include "runtime/json_schema.h"

#include <algorithm>
#include <cmath>
#include <bitset>
#include <map>
#include <set>

namespace sluice::schema {

namespace {

using ojson = nlohmann::ordered_json;
using Kind = SchemaNode::Kind;

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
std::string index(const std::string& path, size_t i) { return cat(path, "[", i, "]"); }

[[noreturn]] void bad(const std::string& path, const std::string& message) { throw SchemaError(path, message); }

const std::set<std::string> k_annotations = {"title", "description", "default", "examples", "$schema", "$id",
                                             "$comment", "$defs", "definitions", "deprecated", "readOnly",
                                             "writeOnly"};
const std::set<std::string> k_keywords = {"type", "properties", "required", "additionalProperties", "items",
                                          "minItems", "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref",
                                          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const char* const k_bounds[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
const std::set<std::string> k_types = {"object", "array", "string", "number", "integer", "boolean", "null"};

std::bitset<256> first_bytes(const Grammar& g, int32_t n) {
    std::bitset<256> s;
    for (int b = 0; b < 256; ++b)
        if (starts_value(g, n, uint8_t(b))) s.set(size_t(b));
    return s;
}

class Compiler {
public:
    explicit Compiler(const ojson& root) : root_(root) {}

    Grammar run() {
        g_.root = compile(root_, "", 0);
        finalize();
        return std::move(g_);
    }

    int32_t any() {
        if (any_ >= 0) return any_;
        any_ = add(Kind::choice, "");
        const int32_t obj = add(Kind::object, ""), arr = add(Kind::array, ""), str = add(Kind::string, ""),
                      num = add(Kind::number, ""), lit = add(Kind::literals, "");
        g_.nodes[size_t(obj)].additional = any_;
        g_.nodes[size_t(arr)].items = any_;
        g_.nodes[size_t(lit)].literals = {"false", "null", "true"};
        g_.nodes[size_t(any_)].alts = {obj, arr, str, num, lit};
        return any_;
    }

private:
    const ojson& root_;
    Grammar g_;
    std::vector<std::string> path_;    // per node: where in the schema it comes from
    std::vector<int32_t> alias_;       // per node: the node it stands for ($ref), or -1
    std::map<std::string, int32_t> refs_;
    int32_t any_ = -1;

    int32_t add(Kind k, const std::string& path) {
        if (g_.nodes.size() >= size_t(kMaxNodes))
            bad(path, cat("the schema is too large (more than ", kMaxNodes, " nodes)"));
        g_.nodes.emplace_back().kind = k;
        path_.push_back(path);
        alias_.push_back(-1);
        return int32_t(g_.nodes.size() - 1);
    }

    int32_t compile(const ojson& s, const std::string& path, int depth) {
        if (depth > kMaxSchemaDepth) bad(path, cat("the schema is nested deeper than ", kMaxSchemaDepth, " levels"));
        if (s.is_boolean()) {
            if (s.get<bool>()) return any();
            bad(path, "the schema 'false' has no instance");
        }
        if (!s.is_object()) bad(path, cat("a schema must be an object or a boolean, got ", s.type_name()));
        for (const auto& [key, v] : s.items())
            if (!k_keywords.count(key) && !k_annotations.count(key))
                bad(join(path, key), cat("the keyword '", key, "' is not supported in structured output schemas"));
        const auto has = [&](const char* k) { return s.contains(k); };
        if (has("$ref")) {
            for (const auto& [key, v] : s.items())
                if (key != "$ref" && k_keywords.count(key))
                    bad(join(path, key), cat("'", key, "' beside '$ref' is not supported"));
            return ref(s["$ref"], join(path, "$ref"));
        }
        if (has("anyOf") || has("oneOf")) {
            const char* k = has("anyOf") ? "anyOf" : "oneOf";
            for (const auto& [key, v] : s.items())
                if (key != k && k_keywords.count(key))
                    bad(join(path, key), cat("'", key, "' beside '", k, "' is not supported"));
            const ojson& alts = s[k];
            const std::string p = join(path, k);
            if (!alts.is_array() || alts.empty()) bad(p, cat("'", k, "' must be a non-empty array of schemas"));
            const int32_t n = add(Kind::choice, p);
            std::vector<int32_t> out;
            for (size_t i = 0; i < alts.size(); ++i) out.push_back(compile(alts[i], index(p, i), depth + 1));
            g_.nodes[size_t(n)].alts = std::move(out);
            return n;
        }
        std::vector<std::string> types;
        if (has("type")) {
            const ojson& t = s["type"];
            const std::string p = join(path, "type");
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
                if (!k_types.count(types[0])) bad(p, cat("unknown type '", types[0], "'"));
            } else if (t.is_array() && !t.empty()) {
                for (size_t i = 0; i < t.size(); ++i) {
                    if (!t[i].is_string() || !k_types.count(t[i].get<std::string>()))
                        bad(index(p, i), cat("unknown type ", t[i].dump()));
                    types.push_back(t[i].get<std::string>());
                }
            } else {
                bad(p, "'type' must be a type name or a non-empty array of them");
            }
        }
        const auto typed_as = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
        for (const char* k : k_bounds)  // bounds apply to numbers only; the mask enforces them on integers
            if (has(k) && (has("enum") || has("const") || !typed_as("integer") || typed_as("number")))
                bad(join(path, k), cat("'", k, "' is supported only with \"type\": \"integer\" (not beside 'enum' or "
                                       "'const', nor on type 'number', whose bounds the mask cannot enforce exactly)"));
        if (has("enum") || has("const")) return literals(s, path, types);
        if (types.empty()) {
            if (has("properties") || has("required") || has("additionalProperties")) types = {"object"};
            else if (has("items") || has("minItems") || has("maxItems")) types = {"array"};
            else return any();
        }
        std::vector<int32_t> alts;
        for (const std::string& t : types) alts.push_back(typed(s, path, t, depth));
        if (alts.size() == 1) return alts[0];
        const int32_t n = add(Kind::choice, join(path, "type"));
        g_.nodes[size_t(n)].alts = std::move(alts);
        return n;
    }

    int32_t ref(const ojson& r, const std::string& path) {
        if (!r.is_string()) bad(path, "'$ref' must be a string");
        const std::string target = r.get<std::string>();
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        const ojson* s = nullptr;
        if (target == "#") {
            s = &root_;
        } else {
            for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
                const std::string pre = prefix;
                if (target.rfind(pre, 0) != 0) continue;
                const std::string name = target.substr(pre.size());
                const std::string defs = pre.substr(2, pre.size() - 3);
                if (root_.is_object() && root_.contains(defs) && root_[defs].is_object() &&
                    root_[defs].contains(name))
                    s = &root_[defs][name];
            }
        }
        if (!s) bad(path, cat("'$ref' \"", target, "\" does not name '#', '#/$defs/NAME' or '#/definitions/NAME' of this schema"));
        const int32_t n = add(Kind::choice, path);
        refs_[target] = n;
        // a $ref nests no deeper than the definition it names
        std::string at = target == "#" ? "" : target.substr(2);
        std::replace(at.begin(), at.end(), '/', '.');
        const int32_t t = compile(*s, at, 1);
        alias_[size_t(n)] = t;
        return n;
    }

    int32_t literals(const ojson& s, const std::string& path, const std::vector<std::string>& types) {
        std::vector<std::pair<const ojson*, std::string>> values;  // value, its path
        if (s.contains("enum")) {
            const ojson& e = s["enum"];
            if (!e.is_array() || e.empty()) bad(join(path, "enum"), "'enum' must be a non-empty array");
            for (size_t i = 0; i < e.size(); ++i) values.push_back({&e[i], index(join(path, "enum"), i)});
        }
        if (s.contains("const")) {
            const ojson& c = s["const"];
            if (!values.empty() && std::none_of(values.begin(), values.end(), [&](auto& v) { return *v.first == c; }))
                bad(join(path, "const"), "'const' is not one of the 'enum' values: no value satisfies both");
            values = {{&c, join(path, "const")}};
        }
        const int32_t n = add(Kind::literals, path);
        std::vector<std::string> out;
        for (const auto& [v, p] : values) {
            if (!types.empty()) {
                std::string t = v->is_object() ? "object" : v->is_array() ? "array" : v->is_string() ? "string"
                                : v->is_boolean() ? "boolean" : v->is_null() ? "null"
                                : v->is_number_float() ? "number" : "integer";
                const bool ok = std::find(types.begin(), types.end(), t) != types.end() ||
                                (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
                if (!ok) bad(p, cat("the value ", v->dump(), " is not of the schema's 'type'"));
            }
            try {
                out.push_back(v->dump());
            } catch (const std::exception&) {
                bad(p, "the value is not valid UTF-8");
            }
        }
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        g_.nodes[size_t(n)].literals = std::move(out);
        return n;
    }

    uint32_t count(const ojson& s, const std::string& path, const char* key, uint32_t dflt) {
        if (!s.contains(key)) return dflt;
        const ojson& v = s[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= int64_t(UINT32_MAX))
            bad(join(path, key), cat("'", key, "' must be a non-negative integer"));
        return uint32_t(v.get<int64_t>());
    }

    // An integer node with its bounds: minimum / maximum as they are (a fraction rounded inward), the exclusive
    // forms one step inside; within the 64-bit range.
    int32_t integer(const ojson& s, const std::string& path) {
        const int32_t n = add(Kind::integer, path);
        SchemaNode& node = g_.nodes[size_t(n)];
        std::string lo_key, hi_key;
        for (const char* k : k_bounds) {
            if (!s.contains(k)) continue;
            const ojson& v = s[k];
            const std::string p = join(path, k);
            if (!v.is_number()) bad(p, cat("'", k, "' must be a number"));
            const bool upper = std::string_view(k).find("aximum") != std::string_view::npos;
            const bool exclusive = k[0] == 'e';
            const double d = v.get<double>();
            if (!(d > -9.2e18 && d < 9.2e18) || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
                bad(p, cat("'", k, "' must be within the 64-bit integer range"));
            int64_t b;
            if (v.is_number_integer()) {
                b = v.get<int64_t>();
                if (exclusive) b += upper ? -1 : 1;
            } else {
                const double r = upper ? std::floor(d) : std::ceil(d);
                b = int64_t(r);
                if (exclusive && r == d) b += upper ? -1 : 1;
            }
            if (upper && (!node.has_max || b < node.max_int)) node.max_int = b, node.has_max = true, hi_key = p;
            if (!upper && (!node.has_min || b > node.min_int)) node.min_int = b, node.has_min = true, lo_key = p;
        }
        if (node.has_min && node.has_max && node.min_int > node.max_int)
            bad(lo_key, "the lower bound is above the upper bound: no integer satisfies both");
        return n;
    }

    int32_t typed(const ojson& s, const std::string& path, const std::string& type, int depth) {
        if (type == "string") {
            const uint32_t mn = count(s, path, "minLength", 0), mx = count(s, path, "maxLength", UINT32_MAX);
            if (mn > mx) bad(join(path, "minLength"), "'minLength' is greater than 'maxLength': no string satisfies both");
            const int32_t n = add(Kind::string, path);
            g_.nodes[size_t(n)].min_length = mn;
            g_.nodes[size_t(n)].max_length = mx;
            return n;
        }
        if (type == "number") return add(Kind::number, path);
        if (type == "integer") return integer(s, path);
        if (type == "boolean" || type == "null") {
            const int32_t n = add(Kind::literals, path);
            g_.nodes[size_t(n)].literals = type == "null" ? std::vector<std::string>{"null"}
                                                          : std::vector<std::string>{"false", "true"};
            return n;
        }
        if (type == "array") {
            const int32_t n = add(Kind::array, path);
            const uint32_t mn = count(s, path, "minItems", 0), mx = count(s, path, "maxItems", UINT32_MAX);
            if (mn > mx) bad(join(path, "minItems"), "'minItems' is greater than 'maxItems': no array satisfies both");
            int32_t items = -1;
            if (!s.contains("items")) items = any();
            else if (!(s["items"].is_boolean() && !s["items"].get<bool>()))
                items = compile(s["items"], join(path, "items"), depth + 1);
            if (items < 0 && mn > 0) bad(join(path, "minItems"), "'minItems' asks for items that 'items: false' forbids");
            SchemaNode& a = g_.nodes[size_t(n)];
            a.items = mx == 0 ? -1 : items;
            a.min_items = mn;
            a.max_items = mx;
            return n;
        }
        // object
        const int32_t n = add(Kind::object, path);
        std::vector<std::pair<std::string, int32_t>> props;
        if (s.contains("properties")) {
            const ojson& p = s["properties"];
            const std::string pp = join(path, "properties");
            if (!p.is_object()) bad(pp, "'properties' must be an object");
            if (p.size() > size_t(kMaxProperties))
                bad(pp, cat("more than ", kMaxProperties, " properties in one object are not supported"));
            for (const auto& [name, sub] : p.items()) {
                for (unsigned char c : name)
                    if (c == '"' || c == '\\' || c < 0x20)
                        bad(join(pp, name), "property names that need escaping in JSON are not supported");
                props.push_back({name, compile(sub, join(pp, name), depth + 1)});
            }
        }
        std::sort(props.begin(), props.end());
        int32_t additional = any();
        if (s.contains("additionalProperties")) {
            const ojson& a = s["additionalProperties"];
            if (a.is_boolean()) additional = a.get<bool>() ? any() : -1;
            else additional = compile(a, join(path, "additionalProperties"), depth + 1);
        }
        SchemaNode& o = g_.nodes[size_t(n)];
        for (auto& [name, node] : props) {
            o.keys.push_back(name);
            o.key_nodes.push_back(node);
        }
        o.additional = additional;
        if (s.contains("required")) {
            const ojson& r = s["required"];
            const std::string rp = join(path, "required");
            if (!r.is_array()) bad(rp, "'required' must be an array of property names");
            for (size_t i = 0; i < r.size(); ++i) {
                if (!r[i].is_string()) bad(index(rp, i), "'required' must be an array of property names");
                const auto it = std::lower_bound(o.keys.begin(), o.keys.end(), r[i].get<std::string>());
                if (it == o.keys.end() || *it != r[i].get<std::string>())
                    bad(index(rp, i), cat("the required property ", r[i].dump(), " is not in 'properties'",
                                          o.additional < 0 ? " and no other property is allowed" : " (not supported)"));
                o.required |= uint64_t(1) << (it - o.keys.begin());
            }
        }
        return n;
    }

    int32_t resolve(int32_t n) const {
        for (size_t hops = 0; n >= 0 && alias_[size_t(n)] >= 0; ++hops) {
            if (hops > alias_.size()) bad(path_[size_t(n)], "'$ref' refers to itself");
            n = alias_[size_t(n)];
        }
        return n;
    }

    // The alternatives a choice stands for, choices inside it expanded.
    void flatten(int32_t n, std::vector<int32_t>& out, std::vector<int32_t>& open) {
        if (std::find(open.begin(), open.end(), n) != open.end())
            bad(path_[size_t(n)], "'anyOf' refers to itself before any value starts");
        open.push_back(n);
        for (int32_t a : g_.nodes[size_t(n)].alts) {
            a = resolve(a);
            if (g_.nodes[size_t(a)].kind == Kind::choice) flatten(a, out, open);
            else out.push_back(a);
        }
        open.pop_back();
    }

    void finalize() {
        for (size_t i = 0; i < g_.nodes.size(); ++i) {
            if (alias_[i] >= 0) continue;
            SchemaNode& n = g_.nodes[i];
            for (auto& k : n.key_nodes) k = resolve(k);
            if (n.additional >= 0) n.additional = resolve(n.additional);
            if (n.items >= 0) n.items = resolve(n.items);
        }
        g_.root = resolve(g_.root);
        const size_t before = g_.nodes.size();
        for (size_t i = 0; i < before; ++i) {
            if (alias_[i] >= 0 || g_.nodes[i].kind != Kind::choice) continue;
            std::vector<int32_t> flat, open, alts;
            flatten(int32_t(i), flat, open);
            std::vector<std::string> lits;
            const bool has_number = std::any_of(flat.begin(), flat.end(),
                                                [&](int32_t a) { return g_.nodes[size_t(a)].kind == Kind::number; });
            for (int32_t a : flat) {
                const SchemaNode& s = g_.nodes[size_t(a)];
                if (s.kind == Kind::literals) lits.insert(lits.end(), s.literals.begin(), s.literals.end());
                else if (!(s.kind == Kind::integer && has_number)) alts.push_back(a);
            }
            if (!lits.empty()) {
                std::sort(lits.begin(), lits.end());
                lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
                const int32_t l = add(Kind::literals, path_[i]);
                g_.nodes[size_t(l)].literals = std::move(lits);
                alts.push_back(l);
            }
            std::sort(alts.begin(), alts.end());
            alts.erase(std::unique(alts.begin(), alts.end()), alts.end());
            for (size_t a = 0; a < alts.size(); ++a)
                for (size_t b = a + 1; b < alts.size(); ++b)
                    if ((first_bytes(g_, alts[a]) & first_bytes(g_, alts[b])).any())
                        bad(path_[i], "alternatives of one JSON type (or a literal of a type also allowed whole) "
                                      "are not supported: each alternative must start differently");
            g_.nodes[i].alts = std::move(alts);
        }
        check_finite();
    }

    // Every node reachable from the root must have a finite instance, else generation could never finish it.
    void check_finite() {
        std::vector<int32_t> reach{g_.root};
        std::vector<uint8_t> seen(g_.nodes.size(), 0);
        seen[size_t(g_.root)] = 1;
        for (size_t i = 0; i < reach.size(); ++i) {
            const SchemaNode& n = g_.nodes[size_t(reach[i])];
            std::vector<int32_t> next = n.key_nodes;
            next.insert(next.end(), n.alts.begin(), n.alts.end());
            for (int32_t x : {n.additional, n.items})
                if (x >= 0) next.push_back(x);
            for (int32_t x : next)
                if (!seen[size_t(x)]) seen[size_t(x)] = 1, reach.push_back(x);
        }
        std::vector<uint8_t> finite(g_.nodes.size(), 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (int32_t id : reach) {
                if (finite[size_t(id)]) continue;
                const SchemaNode& n = g_.nodes[size_t(id)];
                bool f = true;
                if (n.kind == Kind::object) {
                    for (size_t k = 0; k < n.keys.size(); ++k)
                        if ((n.required >> k & 1) && !finite[size_t(n.key_nodes[k])]) f = false;
                } else if (n.kind == Kind::array) {
                    f = n.min_items == 0 || finite[size_t(n.items)];
                } else if (n.kind == Kind::choice) {
                    f = std::any_of(n.alts.begin(), n.alts.end(), [&](int32_t a) { return finite[size_t(a)]; });
                }
                if (f) finite[size_t(id)] = 1, changed = true;
            }
        }
        for (int32_t id : reach)
            if (!finite[size_t(id)])
                bad(path_[size_t(id)], "this schema has no finite instance (a required property or minItems "
                                       "recurses into it forever)");
    }
};

}  // namespace

bool starts_value(const Grammar& g, int32_t n, uint8_t b) {
    const SchemaNode& s = g.nodes[size_t(n)];
    switch (s.kind) {
        case Kind::object:
            return b == '{';
        case Kind::array:
            return b == '[';
        case Kind::string:
            return b == '"';
        case Kind::number:
        case Kind::integer:
            return b == '-' || (b >= '0' && b <= '9');
        case Kind::literals:
            return std::any_of(s.literals.begin(), s.literals.end(),
                               [b](const std::string& l) { return !l.empty() && uint8_t(l[0]) == b; });
        case Kind::choice:
            return std::any_of(s.alts.begin(), s.alts.end(), [&](int32_t a) { return starts_value(g, a, b); });
        case Kind::sequence:
            return !s.parts.empty() && starts_value(g, s.parts[0], b);
    }
    return false;
}

Grammar any_object_grammar() { return compile_schema(ojson{{"type", "object"}}); }

Grammar compile_schema(const ojson& schema) { return Compiler(schema).run(); }

int32_t append_grammar(Grammar& into, const Grammar& g) {
    const int32_t base = int32_t(into.nodes.size());
    const auto shift = [base](int32_t& x) {
        if (x >= 0) x += base;
    };
    for (SchemaNode n : g.nodes) {
        for (auto* v : {&n.key_nodes, &n.alts, &n.then, &n.parts})
            for (int32_t& x : *v) shift(x);
        shift(n.additional);
        shift(n.items);
        into.nodes.push_back(std::move(n));
    }
    return g.root + base;
}

}  // namespace sluice::schema
