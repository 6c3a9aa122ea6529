#include "core/stable_memory.h"

#include <map>
#include <mutex>

namespace sluice::stable_memory {

namespace {
struct Range {
    uint64_t id, bytes;
};
std::mutex g_mutex;
std::map<uintptr_t, Range> g_ranges;  // start address -> range
uint64_t g_next_id = 1;
}  // namespace

uint64_t add(const void* p, uint64_t bytes) {
    std::lock_guard lock(g_mutex);
    const uint64_t id = g_next_id++;
    if (p && bytes) g_ranges[reinterpret_cast<uintptr_t>(p)] = {id, bytes};
    return id;
}

void remove(uint64_t id) {
    std::lock_guard lock(g_mutex);
    for (auto it = g_ranges.begin(); it != g_ranges.end(); ++it)
        if (it->second.id == id) {
            g_ranges.erase(it);
            return;
        }
}

Place find(const void* p, uint64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(g_mutex);
    auto it = g_ranges.upper_bound(a);
    if (it == g_ranges.begin()) return {};
    --it;
    const uintptr_t start = it->first;
    if (a + bytes > start + it->second.bytes) return {};
    return {it->second.id, uint64_t(a - start)};
}

}  // namespace sluice::stable_memory
