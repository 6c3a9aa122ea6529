// Pre-tokenizer regex splitting on PCRE2 (UTF + UCP, JIT). Patterns are written in the reference dialects
// (Oniguruma for HF tokenizers, Rust regex/fancy-regex for tiktoken) and translated so PCRE2 matches the same
// pieces: \s and \S become the Unicode White_Space set, bare script names such as \p{Han} mean Script (not
// Script_Extensions), and class intersection [A&&[^B]] becomes (?:(?![B])[A]).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tok {

struct Span {
    size_t begin = 0;
    size_t end = 0;
};

// Rewrites a reference-dialect pattern into PCRE2 syntax; throws sluice::Error on constructs it cannot map.
std::string translate_pattern(std::string_view pattern);

enum class SplitBehavior { Isolated, Removed };

class RegexSplitter {
public:
    // pattern is in reference syntax unless `literal` (then it is matched as plain text).
    RegexSplitter(std::string_view pattern, bool literal, SplitBehavior behavior);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Splits text[span] (valid UTF-8) into matches and the gaps between them, appending non-empty pieces.
    void split(std::string_view text, Span span, std::vector<Span>& out) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    SplitBehavior behavior_;
};

}  // namespace sluice::tok
