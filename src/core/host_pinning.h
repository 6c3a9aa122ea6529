// Page-locking host buffers for a device backend, without core depending on it: a backend that copies from host
// memory (ops/cuda) installs its pin/unpin pair; buffers whose contents cross the link every pass (the scratch arena's
// activations) ask to be pinned when allocated and unpinned before they are freed. With no backend installed, or
// when the backend declines (the CPU is selected, the driver refuses), pin() returns false and nothing changes.
#pragma once

#include <cstdint>

namespace sluice::host_pinning {

struct Hooks {
    bool (*pin)(void* p, uint64_t bytes) = nullptr;
    void (*unpin)(void* p) = nullptr;
};
void install(Hooks hooks);

bool pin(void* p, uint64_t bytes);  // true when p is now page-locked (then unpin(p) before freeing it)
void unpin(void* p);

}  // namespace sluice::host_pinning
