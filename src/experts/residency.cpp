#include "experts/residency.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sluice {

std::string format_bytes(uint64_t b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

uint64_t parse_size(const std::string& text) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (...) {
        fail("size '", text, "' is not a number (use e.g. 64G, 512M, 1.5GiB)");
    }
    std::string unit = text.substr(used);
    for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
    double mul = 1;
    if (unit == "" || unit == "B") mul = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1024.0 * 1024;
    else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
    else fail("size '", text, "' has an unknown unit '", text.substr(used), "' (K, M, G, T)");
    SLUICE_CHECK(std::isfinite(v) && v >= 0 && v * mul < 1.8e19, "size '", text, "' is out of range");
    return uint64_t(v * mul);
}

std::string ResidencyPlan::describe() const {
    std::ostringstream os;
    os << "memory budget        " << format_bytes(budget_bytes) << "\n"
       << "  spine (resident)   " << format_bytes(spine_bytes) << "\n";
    if (streams_spine())
        os << "  spine (streamed)   " << format_bytes(spine_streamed_bytes) << " per forward pass: the matrices of layers "
           << first_streamed_layer << "-" << n_layers - 1 << ", read ahead into 2 slots of "
           << format_bytes(spine_slot_bytes / 2) << "\n";
    os << "  sequence state     " << format_bytes(state_bytes) << "\n";
    if (prefix_cache_bytes > 0) os << "    of which prefix cache " << format_bytes(prefix_cache_bytes) << "\n";
    if (activation_bytes > 0) os << "    of which activations " << format_bytes(activation_bytes) << "\n";
    os
       << "  read staging       " << format_bytes(staging_bytes) << "\n"
       << "  expert cache       " << format_bytes(expert_cache_bytes) << "\n";
    return os.str();
}

ResidencyPlan plan_residency(uint64_t budget, uint64_t fixed, std::span<const uint64_t> layer_bytes, uint64_t state,
                             uint64_t staging, int64_t force_first) {
    const size_t L = layer_bytes.size();
    uint64_t all_layers = 0;
    for (uint64_t b : layer_bytes) all_layers += b;
    ResidencyPlan p;
    p.budget_bytes = budget;
    p.state_bytes = state;
    p.staging_bytes = staging;
    p.n_layers = int64_t(L);
    p.spine_fixed_bytes = fixed;
    p.layer_bytes.assign(layer_bytes.begin(), layer_bytes.end());
    p.spine_bytes = fixed + all_layers;
    if (force_first >= int64_t(L)) force_first = -1;
    if ((budget >= p.min_bytes() && force_first < 0) || L == 0) {
        if (budget < p.min_bytes())
            fail("--memory ", format_bytes(budget), " is below the minimum working set of ", format_bytes(p.min_bytes()),
                 " (spine ", format_bytes(p.spine_bytes), " + sequence state ", format_bytes(state),
                 " + read staging ", format_bytes(staging), ")");
        p.expert_cache_bytes = budget - p.min_bytes();
        return p;
    }
    // Keep layers [0, k) resident and stream [k, L) through two slots of the largest streamed layer; the largest
    // k that fits. Spine residency comes before the expert cache: a resident spine byte is used on every pass.
    std::vector<uint64_t> suffix_max(L + 1, 0);
    for (size_t l = L; l-- > 0;) suffix_max[l] = std::max(suffix_max[l + 1], layer_bytes[l]);
    uint64_t prefix = 0;
    int64_t best = -1;
    uint64_t best_cost = 0;
    for (size_t k = 0; k < L; ++k) {
        const uint64_t cost = fixed + prefix + 2 * suffix_max[k] + state + staging;
        if (cost <= budget && (force_first < 0 || int64_t(k) == force_first)) {
            best = int64_t(k);
            best_cost = cost;
        }
        prefix += layer_bytes[k];
    }
    if (best < 0) {
        const uint64_t min = fixed + 2 * suffix_max[0] + state + staging;
        fail("--memory ", format_bytes(budget), " is below the minimum working set of ", format_bytes(min),
             " (resident spine ", format_bytes(fixed), " + two layers of streamed spine ",
             format_bytes(2 * suffix_max[0]), " + sequence state ", format_bytes(state), " + read staging ",
             format_bytes(staging), ")");
    }
    p.first_streamed_layer = best;
    p.spine_bytes = fixed;
    for (int64_t l = 0; l < best; ++l) p.spine_bytes += layer_bytes[size_t(l)];
    p.spine_streamed_bytes = all_layers - (p.spine_bytes - fixed);
    p.spine_slot_bytes = 2 * suffix_max[size_t(best)];
    p.expert_cache_bytes = budget - best_cost;
    return p;
}

uint64_t default_memory_budget() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (f >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb * 1024 / 10 * 8;
    return uint64_t(4) << 30;
}

}  // namespace sluice
