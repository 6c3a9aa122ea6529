#include "core/log.h"

#include <atomic>

namespace sluice {
namespace {
std::atomic<int> g_level{1};
}
int log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_level(int level) { g_level.store(level, std::memory_order_relaxed); }
}  // namespace sluice
