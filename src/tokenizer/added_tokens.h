// Added/special token recognition: the text is cut at every occurrence of an added token's content, choosing the
// leftmost match and, among matches starting there, the longest (HF's LeftmostLongest; tiktoken's special-token
// pass gives the same result because the contents are prefix-free in practice).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_split.h"

namespace sluice::tok {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool normalized = false;
    bool lstrip = false;  // the match also swallows ASCII whitespace on its left / right
    bool rstrip = false;
};

struct Segment {
    Span span;
    int32_t id = -1;  // the added token's id, or -1 for ordinary text
};

class AddedTokenMatcher {
public:
    void add(const AddedToken& token);
    bool empty() const { return count_ == 0; }
    // Splits text[span] into ordinary-text segments and added-token segments, in order; empty gaps are dropped.
    void split(std::string_view text, Span span, std::vector<Segment>& out) const;

private:
    struct Entry {
        std::string content;
        int32_t id;
        bool lstrip, rstrip;
    };
    std::vector<Entry> by_first_byte_[256];  // each bucket sorted longest first
    size_t count_ = 0;
};

}  // namespace sluice::tok
