#include "experts/residency.h"

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
       << "  spine (resident)   " << format_bytes(spine_bytes) << "\n"
       << "  sequence state     " << format_bytes(state_bytes) << "\n"
       << "  read staging       " << format_bytes(staging_bytes) << "\n"
       << "  expert cache       " << format_bytes(expert_cache_bytes) << "\n";
    return os.str();
}

ResidencyPlan plan_residency(uint64_t budget, uint64_t spine, uint64_t state, uint64_t staging) {
    ResidencyPlan p{budget, spine, state, staging, 0};
    if (budget < p.min_bytes())
        fail("--memory ", format_bytes(budget), " is below the minimum working set of ", format_bytes(p.min_bytes()),
             " (spine ", format_bytes(spine), " + sequence state ", format_bytes(state), " + read staging ",
             format_bytes(staging), "); streaming the spine layer by layer is not implemented yet");
    p.expert_cache_bytes = budget - p.min_bytes();
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
