// Address ranges whose bytes never change while they are registered (the checkpoint's memory maps). A backend that
// keeps device copies of weights (ops/cuda) may reuse a copy only for bytes inside such a range: everything else
// (expert cache slots, read staging, streamed spine slots) is rewritten in place and is copied again at every use.
// Each registration gets a fresh id, so a copy keyed by (id, offset) can never be mistaken for a later mapping that
// happens to reuse the same addresses.
#pragma once

#include <cstdint>

namespace sluice::stable_memory {

uint64_t add(const void* p, uint64_t bytes);  // returns the range's id (never 0)
void remove(uint64_t id);

struct Place {
    uint64_t id = 0;  // 0: not inside one registered range
    uint64_t offset_bytes = 0;
};
// Where [p, p + bytes) lies, when wholly inside one registered range.
Place find(const void* p, uint64_t bytes);

}  // namespace sluice::stable_memory
