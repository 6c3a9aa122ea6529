// A sequence's state in a file, so a conversation can continue after a restart and a prefix can be kept on SSD.
// Format (version 1, little-endian): "SLUICEST", u32 version, u32 header bytes, a JSON header (the model's
// architecture and fingerprint, n_past, the snapshot position, the layer layout), the token ids (i32 each), every
// layer's buffers as f32 in layer order, then the xxh3-64 of all bytes before it. A file from another model, another
// version, cut short or with a bad checksum is refused with one error naming the file; nothing is loaded then.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "state/sequence_state.h"

namespace sluice {

// What ties a state file to the model that wrote it.
struct StateFileModel {
    std::string architecture;
    uint64_t config_xxh3 = 0;   // of config.json's bytes
    uint64_t weights_xxh3 = 0;  // of the weight files' names and sizes
};

inline constexpr uint32_t k_state_file_version = 1;

// Writes `state` to `path` (via a temporary name and a rename). Throws Error naming the file.
void save_state(const SequenceState& state, const StateFileModel& model, const std::string& path);

// What peek_state reads of a file without loading it.
struct StateFileInfo {
    int64_t n_past = 0, snapshot_position = -1;
    std::vector<int32_t> tokens;
    uint64_t file_bytes = 0;
};

// Reads only the header and token ids of `path` (for an index of many files; load_state checks the checksum and
// the layers). Throws Error naming the file for a wrong magic, version or model, or a short or malformed head.
StateFileInfo peek_state(const std::string& path, const StateFileModel& model);

// The size of the file save_state would write for `state`.
uint64_t state_file_bytes(const SequenceState& state, const StateFileModel& model);

// Reads `path` into `into`, which must be a fresh state (n_past 0) made by the same model. Throws Error naming the
// file and what does not match; `into` is unchanged then.
void load_state(const std::string& path, const StateFileModel& model, SequenceState& into);

}  // namespace sluice
