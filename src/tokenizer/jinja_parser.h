// Parser for the Jinja2 subset chat templates use: builds the syntax tree (jinja_ast.h) from lexer tokens with
// Jinja2's operator precedence. Syntax errors throw sluice::Error naming the template line.
#pragma once

#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace sluice::jinja {

struct ParseOptions {
    int max_depth = 200;  // nesting of expressions and blocks (bounds parser recursion)
};

Program parse(std::string_view source, const ParseOptions& opts = {});

}  // namespace sluice::jinja
