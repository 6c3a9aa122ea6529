// Lexer for the Jinja2 subset: splits template text into data and tag tokens, applying Jinja's whitespace rules
// exactly as transformers configures them (trim_blocks, lstrip_blocks, `-`/`+` modifiers, one trailing newline
// dropped, newlines normalised to \n).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

enum class TokKind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    TokKind kind = TokKind::Eof;
    std::string text;  // data text, name, decoded string literal, number digits, operator
    int line = 1;
};

struct LexOptions {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
};

// Throws sluice::Error("chat template line N: ...") on malformed input.
std::vector<Token> lex(std::string_view source, const LexOptions& opts = {});

}  // namespace sluice::jinja
