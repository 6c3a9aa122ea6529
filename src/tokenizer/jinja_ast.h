// Syntax tree of a parsed chat template: expressions and statements, each carrying its template line so runtime
// errors can name it. Built by jinja_parser, walked by jinja_interp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace sluice::jinja {

enum class ExprKind {
    Literal,    // value
    Name,       // name
    ListLit,    // args = items
    TupleLit,   // args = items
    DictLit,    // args = key0, value0, key1, value1, ...
    Attr,       // args[0].name
    Item,       // args[0][args[1]]
    Slice,      // args[0][args[1]:args[2]:args[3]] (null parts are omitted bounds)
    Call,       // args[0](args[1..], kwargs)
    Filter,     // args[0] | name(args[1..], kwargs)
    Test,       // args[0] is [not] name(args[1..])
    Not,        // not args[0]
    Neg,        // -args[0]
    Pos,        // +args[0]
    Binary,     // args[0] op args[1]
    And,        // args[0] and args[1]
    Or,         // args[0] or args[1]
    CondExpr,   // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    ExprKind kind = ExprKind::Literal;
    int line = 0;
    std::string name;  // Name, Attr, Filter, Test, Binary operator
    bool negated = false;  // Test: `is not`
    Value value;           // Literal
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class StmtKind {
    Text,        // text
    Output,      // {{ expr }}
    If,          // conds[i] -> bodies[i]; else_body
    For,         // targets in iter [if cond] body else_body
    Set,         // targets = expr, or target.attr = expr when attr is set
    SetBlock,    // {% set target %}body{% endset %}
    Macro,       // name(params) body
    CallBlock,   // {% call(params) expr %}body{% endcall %}
    Break,
    Continue,
    Scope,       // a body rendered in place (e.g. {% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null when required
};

struct Stmt {
    StmtKind kind = StmtKind::Text;
    int line = 0;
    std::string text;                  // Text; Macro name; Set attribute (namespace assignment)
    std::vector<std::string> targets;  // For/Set/SetBlock names
    ExprPtr expr;                      // Output/For iterable/Set value/CallBlock call
    ExprPtr cond;                      // For filter
    std::vector<ExprPtr> conds;        // If
    std::vector<Body> bodies;          // If branches
    Body body;
    Body else_body;
    std::vector<MacroParam> params;    // Macro / CallBlock
    bool tuple_target = false;         // Set/For: targets written as `a, b`
};

struct Program {
    Body body;
};

}  // namespace sluice::jinja
