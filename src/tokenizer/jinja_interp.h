// Sandboxed evaluator for parsed chat templates. No file or environment access; output size, loop iterations and
// call depth are bounded. Scoping follows Jinja2: each for-loop iteration and each macro call gets a fresh scope,
// `if` does not; macros see the template's top-level variables as they are at call time.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja_ast.h"

namespace sluice::jinja {

struct Limits {
    size_t max_output_bytes = 64u << 20;    // any rendered or built string
    int64_t max_loop_iterations = 10'000'000;  // summed over all loops, filters and range() of one render
    int max_call_depth = 200;              // nested macro calls
};

struct Scope {
    std::unordered_map<std::string, Value> vars;
    Scope* parent = nullptr;
};

class Interpreter {
public:
    Interpreter(const Program& program, Limits limits);

    // Renders with `vars` as the template's globals (plus the built-ins). Errors name the template line.
    std::string render(const std::map<std::string, Value>& vars);

    // Clock for strftime_now(); defaults to local time.
    std::function<std::tm()> now;

    // ---- used by the built-ins (jinja_builtins.cpp) ---------------------------------------------------------
    Value call(const Value& fn, CallArgs& args);
    Value get_attr(const Value& obj, const std::string& name);
    Value get_item(const Value& obj, const Value& key);
    void check_size(size_t bytes) const;
    void tick(int64_t n = 1);
    const Limits& limits() const { return limits_; }

private:
    enum class Flow { Normal, Break, Continue };

    const Program& program_;
    Limits limits_;
    Scope globals_;
    Scope* root_ = nullptr;   // template-level scope
    Scope* scope_ = nullptr;  // innermost scope
    std::string* out_ = nullptr;
    int64_t iterations_ = 0;
    int call_depth_ = 0;
    int line_ = 0;

    Flow exec_body(const Body& body);
    Flow exec(const Stmt& s);
    void exec_for(const Stmt& s);
    void exec_set(const Stmt& s);
    void define_macro(const Stmt& s);
    void exec_call_block(const Stmt& s);
    void emit(const std::string& text);

    Value eval(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_filter(const Expr& e);
    bool eval_test(const Expr& e);
    CallArgs eval_args(const Expr& e, size_t first);
    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v);
    void bind_targets(const std::vector<std::string>& targets, bool unpack, const Value& v);
    Value call_macro(const Stmt& def, CallArgs& args, const Value* caller);
};

// Built-ins (jinja_builtins.cpp).
Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
Value bound_method(Interpreter& in, const Value& obj, const std::string& name);  // Undefined if none
void install_globals(Interpreter& in, std::unordered_map<std::string, Value>& globals);
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
[[noreturn]] void undefined_error(const Value& undef);

// Iterating a value as Jinja's `for` does: list items, dict keys, string characters; Undefined is empty.
List iterate(const Value& v);

}  // namespace sluice::jinja
