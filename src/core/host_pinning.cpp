#include "core/host_pinning.h"

namespace sluice::host_pinning {

namespace {
Hooks g_hooks;  // set once, at static initialisation of the backend that installs it
}

void install(Hooks hooks) { g_hooks = hooks; }

bool pin(void* p, uint64_t bytes) { return p && bytes && g_hooks.pin && g_hooks.pin(p, bytes); }

void unpin(void* p) {
    if (p && g_hooks.unpin) g_hooks.unpin(p);
}

}  // namespace sluice::host_pinning
