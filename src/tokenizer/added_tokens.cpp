// Leftmost-longest matching of added tokens through first-byte buckets.
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace sluice::tok {

namespace {
bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
}  // namespace

void AddedTokenMatcher::add(const AddedToken& token) {
    if (token.content.empty()) return;
    auto& bucket = by_first_byte_[static_cast<uint8_t>(token.content[0])];
    for (auto& e : bucket) {
        if (e.content == token.content) {  // a later definition of the same content wins, as in a map
            e.id = token.id;
            return;
        }
    }
    bucket.push_back({token.content, token.id, token.lstrip, token.rstrip});
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
    ++count_;
}

void AddedTokenMatcher::split(std::string_view text, Span span, std::vector<Segment>& out) const {
    size_t gap_start = span.begin;
    size_t pos = span.begin;
    while (pos < span.end) {
        const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
        const Entry* hit = nullptr;
        for (const auto& e : bucket) {
            if (e.content.size() <= span.end - pos && text.compare(pos, e.content.size(), e.content) == 0) {
                hit = &e;
                break;
            }
        }
        if (!hit) {
            ++pos;
            continue;
        }
        size_t m0 = pos, m1 = pos + hit->content.size();
        if (hit->lstrip)
            while (m0 > gap_start && ascii_space(text[m0 - 1])) --m0;
        if (hit->rstrip)
            while (m1 < span.end && ascii_space(text[m1])) ++m1;
        if (m0 > gap_start) out.push_back({{gap_start, m0}, -1});
        out.push_back({{m0, m1}, hit->id});
        gap_start = pos = m1;
    }
    if (span.end > gap_start) out.push_back({{gap_start, span.end}, -1});
}

}  // namespace sluice::tok
