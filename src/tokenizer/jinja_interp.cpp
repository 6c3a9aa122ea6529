// Statement execution and expression evaluation for the chat-template interpreter.
#include "tokenizer/jinja_interp.h"

#include "core/error.h"

namespace sluice::jinja {
namespace {

struct ScopeGuard {
    Scope*& slot;
    Scope* saved;
    ScopeGuard(Scope*& s, Scope* next) : slot(s), saved(s) { slot = next; }
    ~ScopeGuard() { slot = saved; }
};

struct OutGuard {
    std::string*& slot;
    std::string* saved;
    OutGuard(std::string*& s, std::string* next) : slot(s), saved(s) { slot = next; }
    ~OutGuard() { slot = saved; }
};

}  // namespace

Interpreter::Interpreter(const Program& program, Limits limits) : program_(program), limits_(limits) {
    now = [] {
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        return tm;
    };
}

std::string Interpreter::render(const std::map<std::string, Value>& vars) {
    ContainerArena arena;  // breaks reference cycles the template builds (see jinja_value.h)
    globals_.vars.clear();
    install_globals(*this, globals_.vars);
    for (const auto& [k, v] : vars) globals_.vars[k] = v;
    Scope root;
    root.parent = &globals_;
    root_ = &root;
    scope_ = &root;
    std::string out;
    out_ = &out;
    iterations_ = 0;
    call_depth_ = 0;
    try {
        exec_body(program_.body);
    } catch (const Error& e) {
        root_ = scope_ = nullptr;
        out_ = nullptr;
        fail("chat template line ", line_, ": ", e.what());
    }
    root_ = scope_ = nullptr;
    out_ = nullptr;
    return out;
}

void Interpreter::check_size(size_t bytes) const {
    SLUICE_CHECK(bytes <= limits_.max_output_bytes, "output exceeds the limit of ", limits_.max_output_bytes,
                 " bytes");
}

void Interpreter::tick(int64_t n) {
    iterations_ += n;
    SLUICE_CHECK(iterations_ <= limits_.max_loop_iterations, "more than ", limits_.max_loop_iterations,
                 " loop iterations");
}

void Interpreter::emit(const std::string& text) {
    check_size(out_->size() + text.size());
    *out_ += text;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
    for (const auto& s : body) {
        Flow f = exec(*s);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
    line_ = s.line;
    switch (s.kind) {
        case StmtKind::Text: emit(s.text); break;
        case StmtKind::Output: {
            Value v = eval(*s.expr);
            line_ = s.line;
            emit(to_str(v));
            break;
        }
        case StmtKind::If:
            for (size_t i = 0; i < s.conds.size(); ++i) {
                if (eval(*s.conds[i]).truthy()) return exec_body(s.bodies[i]);
            }
            return exec_body(s.else_body);
        case StmtKind::For: exec_for(s); break;
        case StmtKind::Set: exec_set(s); break;
        case StmtKind::SetBlock: {
            std::string buf;
            {
                OutGuard g(out_, &buf);
                exec_body(s.body);
            }
            assign(s.targets[0], Value::string(std::move(buf)));
            break;
        }
        case StmtKind::Macro: define_macro(s); break;
        case StmtKind::CallBlock: exec_call_block(s); break;
        case StmtKind::Break: return Flow::Break;
        case StmtKind::Continue: return Flow::Continue;
        case StmtKind::Scope: return exec_body(s.body);
    }
    return Flow::Normal;
}

List iterate(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return {};
        case Kind::List: return *v.list;
        case Kind::Dict: {
            List keys;
            for (const auto& kv : v.dict->items) keys.push_back(kv.first);
            return keys;
        }
        case Kind::String: {
            List chars;
            for (char32_t c : utf8_decode(v.s)) chars.push_back(Value::string(utf8_encode(std::u32string(1, c))));
            return chars;
        }
        default: fail("'", type_name(v), "' object is not iterable");
    }
}

void Interpreter::bind_targets(const std::vector<std::string>& targets, bool unpack, const Value& v) {
    if (!unpack) {
        assign(targets[0], v);
        return;
    }
    List items = iterate(v);
    SLUICE_CHECK(items.size() == targets.size(), "cannot unpack ", items.size(), " values into ", targets.size(),
                 " names");
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s) {
    List items = iterate(eval(*s.expr));
    if (s.cond) {
        List kept;
        for (auto& item : items) {
            tick();
            Scope tmp;
            tmp.parent = scope_;
            ScopeGuard g(scope_, &tmp);
            bind_targets(s.targets, s.tuple_target, item);
            if (eval(*s.cond).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    if (n == 0) {
        exec_body(s.else_body);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        tick();
        Scope iter;
        iter.parent = scope_;
        ScopeGuard g(scope_, &iter);
        Value loop = Value::make_dict();
        Dict& d = *loop.dict;
        d.set(Value::string("index"), Value::integer(i + 1));
        d.set(Value::string("index0"), Value::integer(i));
        d.set(Value::string("revindex"), Value::integer(n - i));
        d.set(Value::string("revindex0"), Value::integer(n - i - 1));
        d.set(Value::string("first"), Value::boolean(i == 0));
        d.set(Value::string("last"), Value::boolean(i == n - 1));
        d.set(Value::string("length"), Value::integer(n));
        d.set(Value::string("depth"), Value::integer(1));
        d.set(Value::string("depth0"), Value::integer(0));
        if (i > 0) d.set(Value::string("previtem"), items[i - 1]);
        if (i + 1 < n) d.set(Value::string("nextitem"), items[i + 1]);
        d.set(Value::string("cycle"), Value::callable("loop.cycle", [i](Interpreter&, CallArgs& a) {
                  SLUICE_CHECK(!a.positional.empty(), "loop.cycle: no items given");
                  return a.positional[static_cast<size_t>(i) % a.positional.size()];
              }));
        iter.vars["loop"] = loop;
        bind_targets(s.targets, s.tuple_target, items[i]);
        if (exec_body(s.body) == Flow::Break) break;
    }
}

void Interpreter::exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    line_ = s.line;
    if (!s.text.empty()) {
        Value target = lookup(s.targets[0]);
        SLUICE_CHECK(target.kind == Kind::Namespace, "cannot assign attribute '", s.text, "' on a ",
                     type_name(target), " (only namespace() objects are mutable)");
        SLUICE_CHECK(s.text[0] != '_', "cannot store underscore-prefixed attribute '", s.text, "' on a namespace");
        target.dict->set(Value::string(s.text), std::move(v));
        return;
    }
    bind_targets(s.targets, s.tuple_target, v);
}

void Interpreter::define_macro(const Stmt& s) {
    const Stmt* def = &s;
    assign(s.text, Value::callable(s.text, [def](Interpreter& in, CallArgs& args) {
               return in.call_macro(*def, args, nullptr);
           }));
}

Value Interpreter::call_macro(const Stmt& def, CallArgs& args, const Value* caller) {
    SLUICE_CHECK(call_depth_ < limits_.max_call_depth, "macro calls nested deeper than ", limits_.max_call_depth);
    SLUICE_CHECK(args.positional.size() <= def.params.size(), "macro '", def.text, "' takes not more than ",
                 def.params.size(), " argument(s)");
    Scope frame;
    frame.parent = root_;
    ScopeGuard g(scope_, &frame);
    ++call_depth_;
    struct DepthRestore {
        int& d;
        ~DepthRestore() { --d; }
    } restore{call_depth_};
    for (const auto& [key, value] : args.keyword) {
        bool known = key == "caller";
        for (const auto& p : def.params) known = known || p.name == key;
        SLUICE_CHECK(known, "macro '", def.text, "' takes no keyword argument '", key, "'");
        frame.vars[key] = value;
    }
    for (size_t i = 0; i < def.params.size(); ++i) {
        const MacroParam& p = def.params[i];
        if (i < args.positional.size()) {
            frame.vars[p.name] = args.positional[i];
        } else if (!frame.vars.count(p.name)) {
            frame.vars[p.name] =
                p.default_value ? eval(*p.default_value) : Value::undefined("parameter '" + p.name + "' was not provided");
        }
    }
    if (caller) frame.vars["caller"] = *caller;
    std::string buf;
    OutGuard og(out_, &buf);
    exec_body(def.body);
    return Value::string(std::move(buf));
}

void Interpreter::exec_call_block(const Stmt& s) {
    const Expr& call = *s.expr;
    Value fn = eval(*call.args[0]);
    CallArgs args = eval_args(call, 1);
    Scope* defining = scope_;
    const Stmt* block = &s;
    Value caller = Value::callable("caller", [block, defining](Interpreter& in, CallArgs& a) {
        Scope frame;
        frame.parent = defining;
        ScopeGuard g(in.scope_, &frame);
        for (size_t i = 0; i < block->params.size(); ++i) {
            const MacroParam& p = block->params[i];
            frame.vars[p.name] = i < a.positional.size() ? a.positional[i]
                                 : p.default_value   ? in.eval(*p.default_value)
                                                     : Value::undefined("parameter '" + p.name + "' was not provided");
        }
        std::string buf;
        OutGuard og(in.out_, &buf);
        in.exec_body(block->body);
        return Value::string(std::move(buf));
    });
    args.keyword.emplace_back("caller", caller);
    emit(to_str(this->call(fn, args)));
}

Value Interpreter::lookup(const std::string& name) const {
    for (const Scope* s = scope_; s; s = s->parent) {
        auto it = s->vars.find(name);
        if (it != s->vars.end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value v) { scope_->vars[name] = std::move(v); }

Value Interpreter::call(const Value& fn, CallArgs& args) {
    if (fn.kind == Kind::Undefined) undefined_error(fn);
    SLUICE_CHECK(fn.kind == Kind::Callable, "'", type_name(fn), "' object is not callable");
    return fn.fn->fn(*this, args);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
    if (obj.kind == Kind::Undefined) undefined_error(obj);
    if (obj.kind == Kind::Dict || obj.kind == Kind::Namespace) {
        Value m = obj.kind == Kind::Dict ? bound_method(*this, obj, name) : Value{};
        if (!m.is_undefined() || !m.s.empty()) return m;
        if (const Value* v = obj.dict->find(Value::string(name))) return *v;
        return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
    }
    Value m = bound_method(*this, obj, name);
    if (m.is_undefined() && m.s.empty()) {
        return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
    }
    return m;
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
    if (obj.kind == Kind::Undefined) undefined_error(obj);
    if (obj.kind == Kind::Dict || obj.kind == Kind::Namespace) {
        if (const Value* v = obj.dict->find(key)) return *v;
    } else if ((obj.kind == Kind::List || obj.kind == Kind::String) && (key.kind == Kind::Int || key.kind == Kind::Bool)) {
        int64_t i = key.kind == Kind::Bool ? key.b : key.i;
        if (obj.kind == Kind::List) {
            int64_t n = static_cast<int64_t>(obj.list->size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return (*obj.list)[static_cast<size_t>(i)];
        } else {
            std::u32string u = utf8_decode(obj.s);
            int64_t n = static_cast<int64_t>(u.size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return Value::string(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
        }
    }
    if (key.kind == Kind::String && obj.kind != Kind::Namespace) {
        Value m = bound_method(*this, obj, key.s);
        if (!m.is_undefined() || !m.s.empty()) return m;
    }
    return Value::undefined("'" + type_name(obj) + " object' has no attribute " + to_repr(key));
}

namespace {

int64_t clamp_index(int64_t i, int64_t n, bool upper_inclusive_neg) {
    if (i < 0) {
        i += n;
        if (i < 0) i = upper_inclusive_neg ? -1 : 0;
    } else if (i > n) {
        i = upper_inclusive_neg ? n - 1 : n;
    }
    return i;
}

template <typename Seq>
Seq slice_seq(const Seq& seq, const Value& start, const Value& stop, const Value& step) {
    const int64_t n = static_cast<int64_t>(seq.size());
    auto as_int = [](const Value& v, const char* what) {
        SLUICE_CHECK(v.kind == Kind::Int || v.kind == Kind::Bool, "slice ", what, " must be an integer or None");
        return v.kind == Kind::Bool ? int64_t{v.b} : v.i;
    };
    int64_t st = step.is_none() ? 1 : as_int(step, "step");
    SLUICE_CHECK(st != 0, "slice step cannot be zero");
    Seq out;
    if (st > 0) {
        int64_t a = start.is_none() ? 0 : clamp_index(as_int(start, "start"), n, false);
        int64_t b = stop.is_none() ? n : clamp_index(as_int(stop, "stop"), n, false);
        for (int64_t i = a; i < b; i += st) out.push_back(seq[static_cast<size_t>(i)]);
    } else {
        int64_t a = start.is_none() ? n - 1 : clamp_index(as_int(start, "start"), n, true);
        int64_t b = stop.is_none() ? -1 : clamp_index(as_int(stop, "stop"), n, true);
        for (int64_t i = a; i > b; i += st) out.push_back(seq[static_cast<size_t>(i)]);
    }
    return out;
}

}  // namespace

Value Interpreter::eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
        case ExprKind::Literal: return e.value;
        case ExprKind::Name: return lookup(e.name);
        case ExprKind::ListLit:
        case ExprKind::TupleLit: {
            List items;
            for (const auto& a : e.args) items.push_back(eval(*a));
            return Value::make_list(std::move(items), e.kind == ExprKind::TupleLit);
        }
        case ExprKind::DictLit: {
            Value d = Value::make_dict();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value k = eval(*e.args[i]);
                SLUICE_CHECK(k.kind != Kind::List && k.kind != Kind::Dict, "unhashable type: '", type_name(k), "'");
                d.dict->set(k, eval(*e.args[i + 1]));
            }
            return d;
        }
        case ExprKind::Attr: {
            Value obj = eval(*e.args[0]);
            line_ = e.line;
            return get_attr(obj, e.name);
        }
        case ExprKind::Item: {
            Value obj = eval(*e.args[0]);
            Value key = eval(*e.args[1]);
            line_ = e.line;
            return get_item(obj, key);
        }
        case ExprKind::Slice: {
            Value obj = eval(*e.args[0]);
            Value parts[3];
            for (int k = 0; k < 3; ++k) parts[k] = e.args[k + 1] ? eval(*e.args[k + 1]) : Value::none();
            line_ = e.line;
            if (obj.kind == Kind::Undefined) undefined_error(obj);
            if (obj.kind == Kind::List) {
                return Value::make_list(slice_seq(*obj.list, parts[0], parts[1], parts[2]), obj.is_tuple);
            }
            SLUICE_CHECK(obj.kind == Kind::String, "'", type_name(obj), "' object is not subscriptable");
            return Value::string(utf8_encode(slice_seq(utf8_decode(obj.s), parts[0], parts[1], parts[2])));
        }
        case ExprKind::Call: {
            Value fn = eval(*e.args[0]);
            CallArgs args = eval_args(e, 1);
            line_ = e.line;
            return call(fn, args);
        }
        case ExprKind::Filter: return eval_filter(e);
        case ExprKind::Test: return Value::boolean(eval_test(e) != e.negated);
        case ExprKind::Not: return Value::boolean(!eval(*e.args[0]).truthy());
        case ExprKind::Neg:
        case ExprKind::Pos: {
            Value v = eval(*e.args[0]);
            line_ = e.line;
            if (v.kind == Kind::Undefined) undefined_error(v);
            SLUICE_CHECK(v.is_number(), "bad operand type for unary ", e.kind == ExprKind::Neg ? "-" : "+", ": '",
                         type_name(v), "'");
            if (e.kind == ExprKind::Pos) return v.kind == Kind::Bool ? Value::integer(v.b) : v;
            if (v.kind == Kind::Float) return Value::number(-v.f);
            int64_t i = v.kind == Kind::Bool ? v.b : v.i;
            SLUICE_CHECK(i != INT64_MIN, "integer overflow");
            return Value::integer(-i);
        }
        case ExprKind::And: {
            Value a = eval(*e.args[0]);
            return a.truthy() ? eval(*e.args[1]) : a;
        }
        case ExprKind::Or: {
            Value a = eval(*e.args[0]);
            return a.truthy() ? a : eval(*e.args[1]);
        }
        case ExprKind::CondExpr: {
            if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
            if (e.args[2]) return eval(*e.args[2]);
            return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                    " evaluated to false and no else section was defined");
        }
        case ExprKind::Binary: return eval_binary(e);
    }
    return Value{};
}

Value Interpreter::eval_binary(const Expr& e) {
    Value a = eval(*e.args[0]);
    Value b = eval(*e.args[1]);
    line_ = e.line;
    if (e.name == "in") return Value::boolean(contains(b, a));
    if (e.name == "not in") return Value::boolean(!contains(b, a));
    if (e.name == "==") return Value::boolean(equals(a, b));
    if (e.name == "!=") return Value::boolean(!equals(a, b));
    if (e.name == "<" || e.name == "<=" || e.name == ">" || e.name == ">=") {
        if (a.kind == Kind::Undefined) undefined_error(a);
        if (b.kind == Kind::Undefined) undefined_error(b);
        int c = compare(a, b);
        bool r = e.name == "<" ? c < 0 : e.name == "<=" ? c <= 0 : e.name == ">" ? c > 0 : c >= 0;
        return Value::boolean(r);
    }
    return binary_op(*this, e.name, a, b);
}

Value Interpreter::eval_filter(const Expr& e) {
    Value input = eval(*e.args[0]);
    CallArgs args = eval_args(e, 1);
    line_ = e.line;
    return apply_filter(*this, e.name, input, args);
}

bool Interpreter::eval_test(const Expr& e) {
    Value v = eval(*e.args[0]);
    CallArgs args = eval_args(e, 1);
    line_ = e.line;
    return apply_test(*this, e.name, v, args);
}

}  // namespace sluice::jinja
