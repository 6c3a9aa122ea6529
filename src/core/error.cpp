#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace sluice {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "sluice: internal error: %s:%d: assertion '%s' failed%s%s\n", file, line, expr,
                 msg.empty() ? "" : ": ", msg.c_str());
    std::abort();
}

}  // namespace sluice
