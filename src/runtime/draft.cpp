#include "runtime/draft.h"

#include <algorithm>

#include "state/sequence_state.h"

namespace sluice {

std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t max_tokens, int64_t ngram_min,
                                  int64_t ngram_max) {
    const int64_t L = int64_t(context.size());
    if (max_tokens <= 0) return {};
    for (int64_t n = std::min(ngram_max, L - 1); n >= std::max<int64_t>(ngram_min, 1); --n) {
        const auto suffix = context.subspan(size_t(L - n));
        // the most recent earlier occurrence: start positions L-n-1 down to 0
        for (int64_t s = L - n - 1; s >= 0; --s) {
            if (!std::equal(suffix.begin(), suffix.end(), context.begin() + s)) continue;
            const int64_t from = s + n, to = std::min(L, from + max_tokens);
            return {context.begin() + from, context.begin() + to};
        }
    }
    return {};
}

bool target_taps_cover(const SequenceState* target, std::span<const int32_t> tokens, int64_t width) {
    const int64_t n = int64_t(tokens.size());
    return target && target->taps().width() == width && target->taps().rows() >= n && target->n_past() >= n &&
           std::equal(tokens.begin(), tokens.end(), target->tokens().begin());
}

}  // namespace sluice
