// Logging to stderr. Levels: 0 quiet (errors only), 1 info (default), 2 debug.
#pragma once

#include <cstdio>
#include <string>

#include "core/error.h"

namespace sluice {

int log_level();
void set_log_level(int level);

template <typename... Args>
void log_info(Args&&... args) {
    if (log_level() >= 1) std::fprintf(stderr, "%s\n", cat(std::forward<Args>(args)...).c_str());
}
template <typename... Args>
void log_debug(Args&&... args) {
    if (log_level() >= 2) std::fprintf(stderr, "%s\n", cat(std::forward<Args>(args)...).c_str());
}

}  // namespace sluice
