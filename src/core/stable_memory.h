// Address ranges whose bytes never change while they are registered (the checkpoint's memory maps). A backend that
// keeps device copies of weights (ops/cuda) may reuse a copy only for bytes inside such a range: everything else
// (expert cache slots, read staging, streamed spine slots) is rewritten in place and is copied again at every use.
// Each registration gets a fresh id, so a copy keyed by (id, offset) can never be mistaken for a later mapping that
// happens to reuse the same addresses.
//
// Content-keyed ranges: a buffer that is rewritten in place but always with the same bytes for the same content (an
// expert cache slot holding expert (layer, e); a spine-streaming slot holding layer l's matrices) registers, once its
// new content is decided and before any op reads it, under an id naming that content (content_id: a space from
// new_space() plus two numbers). A device copy keyed by such an id stays valid after the host slot is rewritten,
// and is found again when the same content comes back into any slot: the device keeps what the host cache had to
// drop (the VRAM expert tier). Content ids have the top bit set, so they never equal an add() id.
#pragma once

#include <cstdint>

namespace sluice::stable_memory {

uint64_t add(const void* p, uint64_t bytes);  // returns the range's id (never 0)
void remove(uint64_t id);

uint64_t new_space();  // a fresh namespace for content ids (one per cache or streamer)
// The id for content (a, b) in `space`: a < 2^21, b < 2^22 (checked).
uint64_t content_id(uint64_t space, uint64_t a, uint64_t b);
// Registers [p, p + bytes) under `id`, replacing whatever was registered at p.
void set_at(const void* p, uint64_t bytes, uint64_t id);
void remove_at(const void* p);  // forgets the range registered at p (no-op when none)

struct Place {
    uint64_t id = 0;  // 0: not inside one registered range
    uint64_t offset_bytes = 0;
};
// Where [p, p + bytes) lies, when wholly inside one registered range.
Place find(const void* p, uint64_t bytes);

// Whether an add() id is still registered (content ids: always true). removals() counts remove() calls, so a holder
// of copies keyed by add() ids can sweep the dead ones only when a range went away (a model unloaded).
bool live(uint64_t id);
uint64_t removals();
bool is_content(uint64_t id);

}  // namespace sluice::stable_memory
