#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"

namespace sluice {

int32_t argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[size_t(best)]) best = int32_t(i);
    return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed), draft_rng_(p.seed ^ 0x9e3779b97f4a7c15ull) {
    SLUICE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0, got ", p.temperature);
    SLUICE_CHECK(p.top_k >= 0, "top-k must be >= 0, got ", p.top_k);
    SLUICE_CHECK(p.top_p > 0 && p.top_p <= 1, "top-p must be in (0, 1], got ", p.top_p);
    SLUICE_CHECK(p.min_p >= 0 && p.min_p <= 1, "min-p must be in [0, 1], got ", p.min_p);
}

namespace {
// Sorts keys whose low 32 bits are their own index (so `keys` starts in ascending order of the low half) by their
// high 32 bits: least significant digit first, 11 + 11 + 10 bits, each pass stable, so keys with equal high halves
// stay in index order. That is the order std::sort gives on the whole 64-bit keys, without its ~log2(n) passes: for
// a 201,088-token vocabulary sampled with no top-k the whole-vocabulary std::sort was 4.7% of a gpt-oss-shaped
// model's decode. The three histograms are counted in one pass; a digit that every key shares (the sign and top
// exponent bits, mostly) moves nothing and is skipped.
void sort_by_high_half(std::vector<uint64_t>& keys, std::vector<uint64_t>& spare) {
    constexpr int kShift[3] = {32, 43, 54};
    constexpr uint64_t kMask = (uint64_t(1) << 11) - 1;  // the last digit has 10 bits: its mask takes nothing more
    spare.resize(keys.size());
    thread_local std::vector<uint32_t> count;
    count.assign(3u << 11, 0u);
    for (uint64_t k : keys) {
        ++count[size_t((k >> 32) & kMask)];
        ++count[(1u << 11) + size_t((k >> 43) & kMask)];
        ++count[(2u << 11) + size_t(k >> 54)];
    }
    for (int pass = 0; pass < 3; ++pass) {
        const int shift = kShift[pass];
        uint32_t* c = count.data() + (size_t(pass) << 11);
        if (c[size_t((keys[0] >> shift) & kMask)] == keys.size()) continue;  // one digit: nothing moves
        uint32_t at = 0;
        for (size_t d = 0; d < (size_t(1) << 11); ++d) at += std::exchange(c[d], at);
        for (uint64_t k : keys) spare[c[size_t((k >> shift) & kMask)]++] = k;
        keys.swap(spare);
    }
}
}  // namespace

// The candidates sample() draws from, best first, with their probabilities (summing to `total`).
Sampler::Candidates Sampler::candidates(std::span<const float> logits, size_t max_keep) const {
    SLUICE_CHECK(!logits.empty(), "sample: empty logits");
    Candidates c;
    // candidates sorted by logit (descending; ties by id). That is a total order, so any sort gives the same list.
    // Each token is one 64-bit key, sorted ascending: the logit's bits mapped so that integer order is descending
    // float order (-0 taken as +0, which compares equal to it; NaN last), then the id. A whole-vocabulary
    // partial_sort (a heap sort over indices) was a quarter of a small model's decode step; with top-k the k best
    // are split off first.
    thread_local std::vector<uint64_t> order;
    order.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        float f = logits[i];
        if (f == 0.0f) f = 0.0f;
        uint32_t u = std::bit_cast<uint32_t>(f);
        u = (u >> 31) ? ~u : (u | 0x80000000u);  // ascending integer order = ascending float order
        if (std::isnan(f)) u = 0;                 // NaN after every number
        order[i] = uint64_t(~u) << 32 | uint32_t(i);
    }
    size_t keep = order.size();
    if (p_.top_k > 0) keep = std::min(keep, size_t(p_.top_k));
    keep = std::min(keep, std::max<size_t>(max_keep, 1));
    if (keep < order.size()) {
        std::nth_element(order.begin(), order.begin() + ptrdiff_t(keep), order.end());
        std::sort(order.begin(), order.begin() + ptrdiff_t(keep));
    } else if (order.size() < kRadixSortFrom) {
        std::sort(order.begin(), order.end());
    } else {
        thread_local std::vector<uint64_t> spare;
        sort_by_high_half(order, spare);
    }
    c.ids.resize(keep);
    for (size_t i = 0; i < keep; ++i) c.ids[i] = int32_t(uint32_t(order[i]));
    const float mx = logits[size_t(c.ids[0])] / p_.temperature;
    c.prob.resize(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i)
        sum += (c.prob[i] = std::exp(double(logits[size_t(c.ids[i])] / p_.temperature - mx)));
    for (auto& q : c.prob) q /= sum;
    // tokens of probability 0 (a structured-output mask sets logits to -inf) are never candidates, not even the
    // fallback of a draw that rounding carries past the last one
    size_t n = keep;
    while (n > 1 && c.prob[n - 1] == 0) --n;
    // min-p: drop tokens below min_p * p_max
    if (p_.min_p > 0)
        while (n > 1 && c.prob[n - 1] < double(p_.min_p) * c.prob[0]) --n;
    // top-p: smallest prefix whose mass reaches top_p
    if (p_.top_p < 1) {
        double cum = 0;
        for (size_t i = 0; i < n; ++i) {
            cum += c.prob[i];
            if (cum >= double(p_.top_p)) {
                n = i + 1;
                break;
            }
        }
    }
    c.ids.resize(n);
    c.prob.resize(n);
    for (size_t i = 0; i < n; ++i) c.total += c.prob[i];
    return c;
}

int32_t Sampler::draw(const Candidates& c, int32_t skip) {
    const double total = c.total - (skip >= 0 ? c.prob_of(skip) : 0.0);
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0;
    int32_t last = -1;
    for (size_t i = 0; i < c.ids.size(); ++i) {
        if (c.ids[i] == skip) continue;
        cum += c.prob[i];
        last = c.ids[i];
        if (u < cum) return c.ids[i];
    }
    return last;
}

namespace {
// prob[i] of the i with ids[i] == id; 0 when id is not listed (a candidate list and a draft distribution alike)
double listed_prob(const std::vector<int32_t>& ids, const std::vector<double>& prob, int32_t id) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == id) return prob[i];
    return 0.0;
}
}  // namespace

double Sampler::Candidates::prob_of(int32_t id) const { return listed_prob(ids, prob, id); }

int32_t Sampler::sample(std::span<const float> logits) {
    SLUICE_CHECK(!logits.empty(), "sample: empty logits");
    if (p_.temperature == 0.0f) return argmax(logits);
    return draw(candidates(logits), -1);
}

Sampler::Verdict Sampler::verify(std::span<const float> logits, int32_t draft) {
    SLUICE_CHECK(!logits.empty(), "sample: empty logits");
    if (p_.temperature == 0.0f) {
        const int32_t best = argmax(logits);
        return {best, best == draft};
    }
    const Candidates c = candidates(logits);
    const double p = c.prob_of(draft) / c.total;
    if (p > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p) return {draft, true};
    if (p >= 1) return {draft, true};  // the only candidate (u < 1 always; kept for rounding)
    return {draw(c, draft), false};
}

double DraftDist::of(int32_t id) const { return listed_prob(ids, prob, id); }

int32_t Sampler::draw_draft(std::span<const float> logits, std::span<const int64_t> offsets, DraftDist& q,
                            size_t max_support) {
    SLUICE_CHECK(!logits.empty(), "draft: empty logits");
    SLUICE_CHECK(offsets.empty() || offsets.size() == logits.size(), "draft: ", offsets.size(), " offsets for ",
                 logits.size(), " logits");
    const auto target_id = [&](int32_t i) { return int32_t(offsets.empty() ? i : i + offsets[size_t(i)]); };
    q.ids.clear();
    q.prob.clear();
    if (p_.temperature == 0.0f) {
        q.ids.push_back(target_id(argmax(logits)));
        q.prob.push_back(1.0);
        return q.ids[0];
    }
    const Candidates c = candidates(logits, max_support);
    q.ids.resize(c.ids.size());
    q.prob.resize(c.ids.size());
    for (size_t i = 0; i < c.ids.size(); ++i) {
        q.ids[i] = target_id(c.ids[i]);
        q.prob[i] = c.prob[i] / c.total;
    }
    // the draw uses q exactly as stored, so the verification's q(draft) is the probability it was drawn with
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(draft_rng_);
    double cum = 0;
    for (size_t i = 0; i < q.ids.size(); ++i) {
        cum += q.prob[i];
        if (u < cum) return q.ids[i];
    }
    size_t last = q.ids.size() - 1;  // rounding carried the draw past the end: the last token of nonzero q
    while (last > 0 && q.prob[last] == 0) --last;
    return q.ids[last];
}

Sampler::Verdict Sampler::verify(std::span<const float> logits, int32_t draft, const DraftDist& q) {
    SLUICE_CHECK(!logits.empty(), "sample: empty logits");
    if (p_.temperature == 0.0f) {
        const int32_t best = argmax(logits);
        return {best, best == draft};
    }
    const double qx = q.of(draft);
    SLUICE_CHECK(qx > 0, "speculative decoding: draft ", draft, " has no probability in the distribution it was drawn from");
    const Candidates c = candidates(logits);
    const double px = c.prob_of(draft) / c.total;
    if (px >= qx) return {draft, true};  // min(1, p/q) = 1
    if (px > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * qx < px) return {draft, true};
    // residual: max(0, p - q) over the candidates (p is 0 elsewhere), drawn in the candidates' order.
    // index_of_: target id -> its place among the candidates, else -1; one per thread (as candidates' sort keys), not
    // per request: a vocabulary-sized table for each of hundreds of requests would sit outside the memory plan
    thread_local std::vector<int32_t> index_of_;
    if (index_of_.size() < logits.size()) index_of_.assign(logits.size(), -1);
    std::vector<double> r(c.ids.size());
    for (size_t i = 0; i < c.ids.size(); ++i) {
        r[i] = c.prob[i] / c.total;
        index_of_[size_t(c.ids[i])] = int32_t(i);
    }
    for (size_t j = 0; j < q.ids.size(); ++j) {
        const int32_t id = q.ids[j];
        if (id < 0 || size_t(id) >= index_of_.size()) continue;
        if (const int32_t i = index_of_[size_t(id)]; i >= 0) r[size_t(i)] = std::max(0.0, r[size_t(i)] - q.prob[j]);
    }
    for (int32_t id : c.ids) index_of_[size_t(id)] = -1;
    double total = 0;
    for (double x : r) total += x;
    if (!(total > 0)) return {draw(c, draft), false};  // p <= q everywhere only by rounding: p without the draft
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0;
    int32_t last = -1;
    for (size_t i = 0; i < c.ids.size(); ++i) {
        if (r[i] <= 0) continue;
        cum += r[i];
        last = c.ids[i];
        if (u < cum) return {c.ids[i], false};
    }
    return {last, false};
}

}  // namespace sluice
