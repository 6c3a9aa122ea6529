#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace sluice {

int32_t argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[size_t(best)]) best = int32_t(i);
    return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
    SLUICE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0, got ", p.temperature);
    SLUICE_CHECK(p.top_k >= 0, "top-k must be >= 0, got ", p.top_k);
    SLUICE_CHECK(p.top_p > 0 && p.top_p <= 1, "top-p must be in (0, 1], got ", p.top_p);
    SLUICE_CHECK(p.min_p >= 0 && p.min_p <= 1, "min-p must be in [0, 1], got ", p.min_p);
}

int32_t Sampler::sample(std::span<const float> logits) {
    SLUICE_CHECK(!logits.empty(), "sample: empty logits");
    if (p_.temperature == 0.0f) return argmax(logits);
    // candidates sorted by logit (descending; ties by id)
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    size_t keep = idx.size();
    if (p_.top_k > 0) keep = std::min(keep, size_t(p_.top_k));
    std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(keep), idx.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    idx.resize(keep);
    const float mx = logits[size_t(idx[0])] / p_.temperature;
    std::vector<double> prob(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += (prob[i] = std::exp(double(logits[size_t(idx[i])] / p_.temperature - mx)));
    for (auto& q : prob) q /= sum;
    // min-p: drop tokens below min_p * p_max
    size_t n = keep;
    if (p_.min_p > 0)
        while (n > 1 && prob[n - 1] < double(p_.min_p) * prob[0]) --n;
    // top-p: smallest prefix whose mass reaches top_p
    if (p_.top_p < 1) {
        double cum = 0;
        for (size_t i = 0; i < n; ++i) {
            cum += prob[i];
            if (cum >= double(p_.top_p)) {
                n = i + 1;
                break;
            }
        }
    }
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += prob[i];
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
        cum += prob[i];
        if (u < cum) return idx[i];
    }
    return idx[n - 1];
}

}  // namespace sluice
