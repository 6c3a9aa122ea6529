#include "core/phase_times.h"

#include <atomic>

namespace sluice::phase_times {

namespace {
std::array<std::atomic<double>, kCount> g_ms{};
std::atomic<double> g_matmul_flops{0};
}

const char* name(Phase p) {
    switch (p) {
        case kMla: return "MLA";
        case kGqa: return "GQA";
        case kKda: return "KDA";
        case kKdaDeltaRule: return "KDA delta rule";
        case kRoute: return "routing";
        case kMoe: return "MoE experts";
        case kAttnRes: return "attention residuals";
        case kMatmul: return "weight matmuls";
        default: return "?";
    }
}

void add(Phase p, double ms) { g_ms[size_t(p)].fetch_add(ms, std::memory_order_relaxed); }

std::array<double, kCount> snapshot_ms() {
    std::array<double, kCount> out{};
    for (size_t i = 0; i < out.size(); ++i) out[i] = g_ms[i].load(std::memory_order_relaxed);
    return out;
}

void add_matmul_flops(double flops) { g_matmul_flops.fetch_add(flops, std::memory_order_relaxed); }
double matmul_flops() { return g_matmul_flops.load(std::memory_order_relaxed); }

}  // namespace sluice::phase_times
