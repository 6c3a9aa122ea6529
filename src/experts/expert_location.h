// Where each routed expert's bytes live on disk, independent of who decided it: byte extents in the original
// checkpoint files (located from the bound views), or an expert-major packed store (experts/packed_store.h).
// A location lists the expert's parts (gate, up, down x payload, scales) and where each lands in a cache slot;
// parts whose file layout mirrors the slot layout are merged so a packed expert is one aligned read.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_source.h"

namespace sluice {

class Checkpoint;

// One byte extent of a file and the slot offset its aligned read lands at (the bytes start at
// slot_offset + head_bytes(offset)).
struct ExpertPart {
    uint32_t file = 0;
    uint64_t offset = 0, length = 0, slot_offset = 0;
};

struct ExpertLocation {
    std::array<ExpertPart, 6> parts;  // gate, up, down; payload then scales, those present
    int n_parts = 0;
    std::array<ExpertPart, 6> reads;  // what is actually read: parts merged by merge_reads()
    int n_reads = 0;
    ExpertWeights shape;  // formats and dims; non-null data/scales mark the parts present
    // Packed stores: xxh3-64 of the slot bytes [0, checksum_bytes) once the expert has landed.
    bool has_checksum = false;
    uint64_t checksum = 0, checksum_bytes = 0;

    uint64_t slot_end() const;  // slot bytes this expert needs (4 KiB multiple)
};

// Fills loc.reads from loc.parts: consecutive parts of one file whose aligned file distance equals their slot
// distance become one read.
void merge_reads(ExpertLocation& loc);

// Every expert of a model: the files they are read from and where[layer][expert] (empty for dense layers).
struct ExpertLayout {
    std::vector<std::string> paths;
    std::vector<std::vector<ExpertLocation>> where;
    std::string origin;  // names the source in errors: the checkpoint folder or the manifest
};

// Locations of the views' bytes inside the checkpoint's files, each part at a 4 KiB-aligned slot offset.
ExpertLayout locate_in_checkpoint(const Checkpoint& ck, const std::vector<std::vector<ExpertWeights>>& views);

// The matrix (0 gate, 1 up, 2 down) of an expert.
inline const Weight& expert_matrix(const ExpertWeights& w, int k) { return k == 0 ? w.gate : k == 1 ? w.up : w.down; }
inline Weight& expert_matrix(ExpertWeights& w, int k) { return k == 0 ? w.gate : k == 1 ? w.up : w.down; }

// The parts' byte lengths in location order (payload then scales per matrix, absent ones skipped).
std::vector<uint64_t> expert_part_lengths(const ExpertWeights& w);

// 16 lowercase hex digits (how checksums are written and reported).
std::string hex64(uint64_t v);

}  // namespace sluice
