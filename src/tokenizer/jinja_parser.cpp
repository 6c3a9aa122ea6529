// Recursive-descent parser following jinja2/parser.py: statements (if/for/set/macro/call/break/continue/
// generation/raw) and expressions (condexpr > or > and > not > compare > +,- > ~ > *,/,//,% > ** > unary >
// postfix > filters/tests).
#include "tokenizer/jinja_parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "tokenizer/jinja_lexer.h"

namespace sluice::jinja {
namespace {

class Parser {
public:
    Parser(std::vector<Token> toks, const ParseOptions& opts) : toks_(std::move(toks)), opts_(opts) {}

    Program run() {
        Program prog;
        std::string end = parse_body(prog.body, {});
        if (!end.empty()) error(cat("unexpected '", end, "'"));
        return prog;
    }

private:
    std::vector<Token> toks_;
    ParseOptions opts_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > p.opts_.max_depth) p.error("template nested too deeply");
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
    void advance() {
        if (pos_ + 1 < toks_.size()) ++pos_;
    }
    [[noreturn]] void error(const std::string& msg) const { fail("chat template line ", cur().line, ": ", msg); }

    static std::string describe(const Token& t) {
        switch (t.kind) {
            case TokKind::Eof: return "end of template";
            case TokKind::BlockEnd: return "'%}'";
            case TokKind::VarEnd: return "'}}'";
            case TokKind::String: return "string";
            case TokKind::Data: return "template data";
            default: return "'" + t.text + "'";
        }
    }

    bool is_op(const char* op) const { return cur().kind == TokKind::Op && cur().text == op; }
    bool is_name(const char* name) const { return cur().kind == TokKind::Name && cur().text == name; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(const char* name) {
        if (!is_name(name)) return false;
        advance();
        return true;
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) error(cat("expected '", op, "', got ", describe(cur())));
    }
    std::string expect_name() {
        if (cur().kind != TokKind::Name) error(cat("expected a name, got ", describe(cur())));
        std::string n = cur().text;
        advance();
        return n;
    }
    void expect_block_end() {
        if (cur().kind != TokKind::BlockEnd) error(cat("expected '%}', got ", describe(cur())));
        advance();
    }

    ExprPtr node(ExprKind kind, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }

    // ---- statements ------------------------------------------------------------------------------------------

    // Parses until a block tag whose name is in `ends`; returns that name with the stream at the name token
    // (or "" at end of input).
    std::string parse_body(Body& body, const std::set<std::string>& ends) {
        DepthGuard guard(*this);
        while (true) {
            const Token& t = cur();
            if (t.kind == TokKind::Eof) return "";
            if (t.kind == TokKind::Data) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                advance();
            } else if (t.kind == TokKind::VarBegin) {
                advance();
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Output;
                s->line = t.line;
                s->expr = parse_tuple(true);
                if (cur().kind != TokKind::VarEnd) error(cat("expected '}}', got ", describe(cur())));
                advance();
                body.push_back(std::move(s));
            } else if (t.kind == TokKind::BlockBegin) {
                advance();
                if (cur().kind != TokKind::Name) error(cat("expected a statement name, got ", describe(cur())));
                if (ends.count(cur().text)) return cur().text;
                body.push_back(parse_statement());
            } else {
                error(cat("unexpected ", describe(t)));
            }
        }
    }

    void expect_end(const std::string& got, const char* want, int open_line) {
        if (got.empty()) fail("chat template line ", open_line, ": unclosed block, expected '", want, "'");
    }

    StmtPtr parse_statement() {
        const Token& t = cur();
        auto s = std::make_unique<Stmt>();
        s->line = t.line;
        std::string name = t.text;
        advance();
        if (name == "if") {
            s->kind = StmtKind::If;
            while (true) {
                s->conds.push_back(parse_tuple(false));
                expect_block_end();
                s->bodies.emplace_back();
                std::string end = parse_body(s->bodies.back(), {"elif", "else", "endif"});
                expect_end(end, "endif", s->line);
                advance();
                if (end == "elif") continue;
                if (end == "else") {
                    expect_block_end();
                    expect_end(parse_body(s->else_body, {"endif"}), "endif", s->line);
                    advance();
                }
                break;
            }
        } else if (name == "for") {
            s->kind = StmtKind::For;
            parse_targets(*s, "in");
            if (!skip_name("in")) error(cat("expected 'in', got ", describe(cur())));
            s->expr = parse_tuple(false, /*with_condexpr=*/false);
            if (skip_name("if")) s->cond = parse_expression();
            if (is_name("recursive")) error("recursive for loops are not supported");
            expect_block_end();
            ++loop_depth_;
            std::string end = parse_body(s->body, {"else", "endfor"});
            --loop_depth_;
            expect_end(end, "endfor", s->line);
            advance();
            if (end == "else") {
                expect_block_end();
                expect_end(parse_body(s->else_body, {"endfor"}), "endfor", s->line);
                advance();
            }
        } else if (name == "set") {
            if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == "." &&
                peek(2).kind == TokKind::Name) {
                s->kind = StmtKind::Set;
                s->targets.push_back(cur().text);
                s->text = peek(2).text;
                advance();
                advance();
                advance();
                expect_op("=");
                s->expr = parse_tuple(true);
            } else {
                parse_targets(*s, "=");
                if (skip_op("=")) {
                    s->kind = StmtKind::Set;
                    s->expr = parse_tuple(true);
                } else {
                    if (s->tuple_target) error("block set takes a single name");
                    if (is_op("|")) error("filters on block set are not supported");
                    s->kind = StmtKind::SetBlock;
                    expect_block_end();
                    expect_end(parse_body(s->body, {"endset"}), "endset", s->line);
                    advance();
                }
            }
        } else if (name == "macro") {
            s->kind = StmtKind::Macro;
            s->text = expect_name();
            parse_params(*s);
            expect_block_end();
            int saved = loop_depth_;
            loop_depth_ = 0;
            expect_end(parse_body(s->body, {"endmacro"}), "endmacro", s->line);
            loop_depth_ = saved;
            advance();
        } else if (name == "call") {
            s->kind = StmtKind::CallBlock;
            if (is_op("(")) parse_params(*s);
            s->expr = parse_expression();
            if (s->expr->kind != ExprKind::Call) error("expected a macro call after 'call'");
            expect_block_end();
            expect_end(parse_body(s->body, {"endcall"}), "endcall", s->line);
            advance();
        } else if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) fail("chat template line ", s->line, ": '", name, "' outside of a loop");
            s->kind = name == "break" ? StmtKind::Break : StmtKind::Continue;
        } else if (name == "generation") {
            s->kind = StmtKind::Scope;
            expect_block_end();
            expect_end(parse_body(s->body, {"endgeneration"}), "endgeneration", s->line);
            advance();
        } else if (name == "include" || name == "import" || name == "from" || name == "extends" ||
                   name == "block") {
            fail("chat template line ", s->line, ": '", name, "' is not supported (templates have no file access)");
        } else {
            fail("chat template line ", s->line, ": unknown or unsupported tag '", name, "'");
        }
        expect_block_end();
        return s;
    }

    void parse_targets(Stmt& s, const char* stop) {
        bool parens = skip_op("(");
        while (true) {
            s.targets.push_back(expect_name());
            if (!skip_op(",")) break;
            s.tuple_target = true;
            if (cur().kind != TokKind::Name || is_name(stop)) break;
        }
        if (parens) {
            expect_op(")");
            s.tuple_target = true;
        }
    }

    void parse_params(Stmt& s) {
        expect_op("(");
        while (!is_op(")")) {
            MacroParam p;
            p.name = expect_name();
            if (skip_op("=")) p.default_value = parse_expression();
            s.params.push_back(std::move(p));
            if (!skip_op(",")) break;
        }
        expect_op(")");
    }

    // ---- expressions -----------------------------------------------------------------------------------------

    // A comma-separated list becomes a tuple; `explicit_parens` is handled by parse_primary.
    ExprPtr parse_tuple(bool allow_tuple, bool with_condexpr = true) {
        int line = cur().line;
        ExprPtr first = with_condexpr ? parse_expression() : parse_or();
        if (!allow_tuple || !is_op(",")) return first;
        auto t = node(ExprKind::TupleLit, line);
        t->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (cur().kind == TokKind::VarEnd || cur().kind == TokKind::BlockEnd) break;
            t->args.push_back(with_condexpr ? parse_expression() : parse_or());
        }
        return t;
    }

    ExprPtr parse_expression() {
        DepthGuard guard(*this);
        ExprPtr e = parse_or();
        while (is_name("if")) {
            int line = cur().line;
            advance();
            auto c = node(ExprKind::CondExpr, line);
            c->args.push_back(std::move(e));
            c->args.push_back(parse_or());
            c->args.push_back(skip_name("else") ? parse_expression() : nullptr);
            e = std::move(c);
        }
        return e;
    }

    ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr a, ExprPtr b, int line) {
        auto e = node(kind, line);
        e->name = op;
        e->args.push_back(std::move(a));
        e->args.push_back(std::move(b));
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) {
            int line = cur().line;
            advance();
            e = binary(ExprKind::Or, "or", std::move(e), parse_and(), line);
        }
        return e;
    }

    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) {
            int line = cur().line;
            advance();
            e = binary(ExprKind::And, "and", std::move(e), parse_not(), line);
        }
        return e;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto e = node(ExprKind::Not, cur().line);
            advance();
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        ExprPtr e = parse_math1();
        bool compared = false;
        while (true) {
            int line = cur().line;
            std::string op;
            if (cur().kind == TokKind::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                 cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                advance();
            } else if (is_name("in")) {
                op = "in";
                advance();
            } else if (is_name("not") && peek().kind == TokKind::Name && peek().text == "in") {
                op = "not in";
                advance();
                advance();
            } else {
                break;
            }
            if (compared) error("chained comparisons (a < b < c) are not supported");
            compared = true;
            e = binary(ExprKind::Binary, op, std::move(e), parse_math1(), line);
        }
        return e;
    }

    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = cur().text;
            int line = cur().line;
            advance();
            e = binary(ExprKind::Binary, op, std::move(e), parse_concat(), line);
        }
        return e;
    }

    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) {
            int line = cur().line;
            advance();
            e = binary(ExprKind::Binary, "~", std::move(e), parse_math2(), line);
        }
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = cur().text;
            int line = cur().line;
            advance();
            e = binary(ExprKind::Binary, op, std::move(e), parse_pow(), line);
        }
        return e;
    }

    ExprPtr parse_pow() {
        ExprPtr e = parse_unary(true);
        while (is_op("**")) {
            int line = cur().line;
            advance();
            e = binary(ExprKind::Binary, "**", std::move(e), parse_unary(true), line);
        }
        return e;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        int line = cur().line;
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            ExprKind k = is_op("-") ? ExprKind::Neg : ExprKind::Pos;
            advance();
            e = node(k, line);
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr literal(Value v, int line) {
        auto e = node(ExprKind::Literal, line);
        e->value = std::move(v);
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        int line = t.line;
        switch (t.kind) {
            case TokKind::Name: {
                std::string n = t.text;
                advance();
                if (n == "true" || n == "True") return literal(Value::boolean(true), line);
                if (n == "false" || n == "False") return literal(Value::boolean(false), line);
                if (n == "none" || n == "None") return literal(Value::none(), line);
                auto e = node(ExprKind::Name, line);
                e->name = n;
                return e;
            }
            case TokKind::String: {
                std::string s = t.text;
                advance();
                while (cur().kind == TokKind::String) {  // adjacent literals concatenate
                    s += cur().text;
                    advance();
                }
                return literal(Value::string(std::move(s)), line);
            }
            case TokKind::Int: {
                int64_t v = 0;
                auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
                if (r.ec != std::errc()) error("integer literal out of range");
                advance();
                return literal(Value::integer(v), line);
            }
            case TokKind::Float: {
                double v = std::strtod(t.text.c_str(), nullptr);
                advance();
                return literal(Value::number(v), line);
            }
            case TokKind::Op: break;
            default: error(cat("unexpected ", describe(t)));
        }
        if (skip_op("(")) {
            if (skip_op(")")) return node(ExprKind::TupleLit, line);
            ExprPtr first = parse_expression();
            if (skip_op(")")) return first;
            auto tup = node(ExprKind::TupleLit, line);
            tup->args.push_back(std::move(first));
            while (skip_op(",")) {
                if (is_op(")")) break;
                tup->args.push_back(parse_expression());
            }
            expect_op(")");
            return tup;
        }
        if (skip_op("[")) {
            auto l = node(ExprKind::ListLit, line);
            while (!is_op("]")) {
                l->args.push_back(parse_expression());
                if (!skip_op(",")) break;
            }
            expect_op("]");
            return l;
        }
        if (skip_op("{")) {
            auto d = node(ExprKind::DictLit, line);
            while (!is_op("}")) {
                d->args.push_back(parse_expression());
                expect_op(":");
                d->args.push_back(parse_expression());
                if (!skip_op(",")) break;
            }
            expect_op("}");
            return d;
        }
        error(cat("unexpected ", describe(t)));
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            int line = cur().line;
            if (skip_op(".")) {
                if (cur().kind == TokKind::Int) {
                    auto item = node(ExprKind::Item, line);
                    item->args.push_back(std::move(e));
                    item->args.push_back(parse_primary());
                    e = std::move(item);
                } else {
                    auto a = node(ExprKind::Attr, line);
                    a->name = expect_name();
                    a->args.push_back(std::move(e));
                    e = std::move(a);
                }
            } else if (skip_op("[")) {
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr target, int line) {
        DepthGuard guard(*this);
        ExprPtr parts[3];
        bool is_slice = false;
        if (!is_op(":")) parts[0] = parse_expression();
        if (skip_op(":")) {
            is_slice = true;
            if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
            if (skip_op(":") && !is_op("]")) parts[2] = parse_expression();
        }
        expect_op("]");
        auto e = node(is_slice ? ExprKind::Slice : ExprKind::Item, line);
        e->args.push_back(std::move(target));
        if (is_slice) {
            for (auto& p : parts) e->args.push_back(std::move(p));
        } else {
            e->args.push_back(std::move(parts[0]));
        }
        return e;
    }

    void parse_call_args(Expr& call) {
        expect_op("(");
        while (!is_op(")")) {
            if (is_op("*") || is_op("**")) error("*args/**kwargs in calls are not supported");
            if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == "=") {
                std::string key = cur().text;
                advance();
                advance();
                call.kwargs.emplace_back(key, parse_expression());
            } else {
                if (!call.kwargs.empty()) error("positional argument follows keyword argument");
                call.args.push_back(parse_expression());
            }
            if (!skip_op(",")) break;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        DepthGuard guard(*this);
        auto c = node(ExprKind::Call, cur().line);
        c->args.push_back(std::move(callee));
        parse_call_args(*c);
        return c;
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            int line = cur().line;
            if (skip_op("|")) {
                DepthGuard guard(*this);
                auto f = node(ExprKind::Filter, line);
                f->name = expect_name();
                while (skip_op(".")) f->name += "." + expect_name();
                f->args.push_back(std::move(e));
                if (is_op("(")) parse_call_args(*f);
                e = std::move(f);
            } else if (is_name("is")) {
                DepthGuard guard(*this);
                advance();
                auto t = node(ExprKind::Test, line);
                t->negated = skip_name("not");
                t->name = expect_name();
                while (skip_op(".")) t->name += "." + expect_name();
                t->args.push_back(std::move(e));
                const Token& c = cur();
                bool arg_start = c.kind == TokKind::Name || c.kind == TokKind::String || c.kind == TokKind::Int ||
                                 c.kind == TokKind::Float ||
                                 (c.kind == TokKind::Op && (c.text == "(" || c.text == "[" || c.text == "{"));
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) error("you cannot chain multiple tests with is");
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }
};

}  // namespace

Program parse(std::string_view source, const ParseOptions& opts) {
    return Parser(lex(source), opts).run();
}

}  // namespace sluice::jinja
