#include "models/blocks/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/rope.h"

namespace sluice {

namespace {
double get_mscale(double scale, double mscale = 1.0) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
}  // namespace

Rope::Rope(const RopeParameters& p, int64_t dim) : dim_(dim) {
    SLUICE_CHECK(dim > 0 && dim % 2 == 0, "rope: rotated dimension must be even, got ", dim);
    const int64_t half = dim / 2;
    // pos_freqs = base ** (arange(0, dim, 2).float() / dim), all float32 as in transformers
    std::vector<float> pos_freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const float e = float(2 * i) / float(dim);
        pos_freqs[size_t(i)] = float(std::pow(double(float(p.rope_theta)), double(e)));
    }
    inv_freq_.resize(size_t(half));
    if (p.rope_type == "default" || p.rope_type == "linear") {
        const float f = p.rope_type == "linear" ? float(p.factor) : 1.0f;
        for (int64_t i = 0; i < half; ++i) inv_freq_[size_t(i)] = 1.0f / pos_freqs[size_t(i)] / f;
        attention_factor_ = 1.0f;
        return;
    }
    SLUICE_CHECK(p.rope_type == "yarn", "rope: unsupported rope_type '", p.rope_type, "'");
    const double factor = p.factor;
    if (p.attention_factor)
        attention_factor_ = float(*p.attention_factor);
    else if (p.mscale != 0.0 && p.mscale_all_dim != 0.0)
        attention_factor_ = float(get_mscale(factor, p.mscale) / get_mscale(factor, p.mscale_all_dim));
    else
        attention_factor_ = float(get_mscale(factor));
    const double beta_fast = p.beta_fast != 0.0 ? p.beta_fast : 32.0;
    const double beta_slow = p.beta_slow != 0.0 ? p.beta_slow : 1.0;
    const double base = p.rope_theta;
    const double orig = double(p.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
        return (double(dim) * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (p.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
        float ramp = (float(i) - float(low)) / (float(high) - float(low));
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        const float extrap_factor = 1.0f - ramp;
        const float inv_extrap = 1.0f / pos_freqs[size_t(i)];
        const float inv_interp = 1.0f / (float(factor) * pos_freqs[size_t(i)]);
        inv_freq_[size_t(i)] = inv_interp * (1.0f - extrap_factor) + inv_extrap * extrap_factor;
    }
}

void Rope::cos_sin(int64_t position, std::vector<float>& c, std::vector<float>& s) const {
    const int64_t half = dim_ / 2;
    c.resize(size_t(half));
    s.resize(size_t(half));
    for (int64_t i = 0; i < half; ++i) {
        const float angle = float(position) * inv_freq_[size_t(i)];  // float32 product, as transformers
        c[size_t(i)] = float(std::cos(double(angle))) * attention_factor_;
        s[size_t(i)] = float(std::sin(double(angle))) * attention_factor_;
    }
}

void Rope::apply_interleaved(float* x, int64_t n_heads, int64_t head_stride, int64_t position) const {
    thread_local std::vector<float> c, s;
    cos_sin(position, c, s);
    ops::rope_rotate(ops::RopeLayout::Interleaved, c.data(), s.data(), dim_ / 2, x, n_heads, head_stride);
}

void Rope::apply_half(float* x, int64_t n_heads, int64_t head_stride, int64_t position) const {
    thread_local std::vector<float> c, s;
    cos_sin(position, c, s);
    ops::rope_rotate(ops::RopeLayout::Half, c.data(), s.data(), dim_ / 2, x, n_heads, head_stride);
}

}  // namespace sluice
