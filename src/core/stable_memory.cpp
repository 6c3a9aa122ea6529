#include "core/stable_memory.h"

#include <map>
#include <set>

#include "core/error.h"
#include <mutex>

namespace sluice::stable_memory {

namespace {
struct Range {
    uint64_t id, bytes;
};
std::mutex g_mutex;
std::map<uintptr_t, Range> g_ranges;  // start address -> range
uint64_t g_next_id = 1;
uint64_t g_next_space = 1;
std::set<uint64_t> g_live;  // add() ids not yet removed
uint64_t g_removals = 0;
constexpr uint64_t kContentBit = uint64_t(1) << 63;
}  // namespace

uint64_t add(const void* p, uint64_t bytes) {
    std::lock_guard lock(g_mutex);
    const uint64_t id = g_next_id++;
    if (p && bytes) g_ranges[reinterpret_cast<uintptr_t>(p)] = {id, bytes};
    g_live.insert(id);
    return id;
}

void remove(uint64_t id) {
    std::lock_guard lock(g_mutex);
    if (g_live.erase(id)) ++g_removals;
    for (auto it = g_ranges.begin(); it != g_ranges.end(); ++it)
        if (it->second.id == id) {
            g_ranges.erase(it);
            return;
        }
}

uint64_t new_space() {
    std::lock_guard lock(g_mutex);
    SLUICE_ASSERT(g_next_space < (uint64_t(1) << 20), "stable_memory: content spaces exhausted");
    return g_next_space++;
}

uint64_t content_id(uint64_t space, uint64_t a, uint64_t b) {
    SLUICE_ASSERT(space > 0 && space < (uint64_t(1) << 20) && a < (uint64_t(1) << 21) && b < (uint64_t(1) << 22),
                  "stable_memory: content id out of range (space ", space, ", ", a, ", ", b, ")");
    return kContentBit | space << 43 | a << 22 | b;
}

void set_at(const void* p, uint64_t bytes, uint64_t id) {
    if (!p || !bytes) return;
    std::lock_guard lock(g_mutex);
    g_ranges[reinterpret_cast<uintptr_t>(p)] = {id, bytes};
}

void remove_at(const void* p) {
    std::lock_guard lock(g_mutex);
    g_ranges.erase(reinterpret_cast<uintptr_t>(p));
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

bool is_content(uint64_t id) { return (id & kContentBit) != 0; }

bool live(uint64_t id) {
    if (is_content(id)) return true;
    std::lock_guard lock(g_mutex);
    return g_live.count(id) != 0;
}

uint64_t removals() {
    std::lock_guard lock(g_mutex);
    return g_removals;
}

}  // namespace sluice::stable_memory
