// SpineStreamer: the big matrices of spine layers that do not fit the memory budget are read from the checkpoint
// layer by layer, ahead of use, into two slots. Each streamed layer owns a fixed slot (alternating), so its
// Weights are rebound once, at load, to point into that slot; before a layer runs, begin_layer() waits for its
// bytes and starts reading the next streamed layer into the other slot (the layer that used it has finished).
// Reads are large, sequential and O_DIRECT (io/direct_reader); a failed read fails the forward pass with the
// reader's error and leaves the slot empty, so the next pass reads it again.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/stable_memory.h"
#include "formats/checkpoint.h"
#include "io/aligned_buffer.h"
#include "io/direct_reader.h"
#include "ops/ops.h"
#include "ops/weight.h"

namespace sluice {

// One layer's streamable tensors as file extents -> the reads a slot holds: sorted, neighbours within 64 KiB merged,
// each read padded to 4 KiB (O_DIRECT). The planner (plan/model_shape) sizes layers with this too.
struct SpineExtent {
    uint32_t file = 0;
    uint64_t offset = 0, length = 0;
    uint64_t slot_pos = 0;  // after merge_spine_extents: 4 KiB-aligned position of its padded read in the slot
};
struct SpineLayerReads {
    std::vector<SpineExtent> regions;  // merged
    uint64_t read_bytes = 0;           // slot bytes the layer needs (padded reads)
    uint64_t weight_bytes = 0;         // distinct tensor bytes (no padding, no gaps)
};
SpineLayerReads merge_spine_extents(std::vector<SpineExtent> extents);
// The merged reads of one layer's Weights (data and scales) in the checkpoint's files; bytes the checkpoint does not
// map (made at load) are left out. SpineStreamer and the resident layers' SpineWarmer both take their reads from it.
SpineLayerReads spine_layer_reads(const Checkpoint& ck, const std::vector<Weight*>& weights);

struct SpineStreamStats {
    uint64_t layers_read = 0;
    uint64_t bytes_read = 0;   // device bytes, alignment padding included
    double wait_ms = 0;        // time begin_layer() blocked on reads
};

class SpineStreamer {
public:
    // layers[l]: pointers to layer l's streamable Weights, bound to the checkpoint's memory map (empty Weights
    // are ignored; several Weights may share a tensor). Nothing is read or rebound yet.
    SpineStreamer(const Checkpoint& ck, std::vector<std::vector<Weight*>> layers);
    ~SpineStreamer();

    // Bytes layer l needs in a slot (its tensors' 4 KiB-aligned extents, neighbours merged).
    const std::vector<uint64_t>& layer_bytes() const { return layer_bytes_; }
    // Bytes of the distinct tensors behind all the layers' Weights (no padding, no gaps).
    uint64_t weight_bytes_total() const { return weight_bytes_total_; }

    // Streams layers [first, n_layers): allocates the two slots, rebinds those layers' Weights into them and
    // starts reading the first streamed layer.
    void start(int64_t first, const io::ReaderOptions& reader);

    // Call before layer l's Weights are used (every architecture's forward loop does). A no-op for resident layers.
    void begin_layer(int64_t l);
    // Call after the last layer of a pass has run: with an odd number of streamed layers the first one shares a
    // slot with the last, so its read for the next pass can only start now.
    void end_pass();

    int64_t first_streamed() const { return first_; }
    const SpineStreamStats& stats() const { return stats_; }
    io::DirectReader& reader() { return *reader_; }

private:
    using Region = SpineExtent;  // one merged extent of a file; bytes [offset, offset + length)
    struct Slot {
        io::AlignedBuffer buffer;
        ops::PinnedRegion pinned;  // page-locked while the CUDA backend copies the layer's matrices from it
        int64_t layer = -1;  // layer whose bytes are (being) read into it
        io::ReadBatch batch;
        bool pending = false;  // batch not yet waited for
    };
    void issue(int64_t l);
    void wait(Slot& s);
    int64_t next_streamed(int64_t l) const;
    int slot_of(int64_t l) const { return int((l - first_) % 2); }

    const Checkpoint& ck_;
    std::vector<std::vector<Weight*>> layers_;
    std::vector<std::vector<Region>> regions_;
    std::vector<uint64_t> layer_bytes_;
    uint64_t weight_bytes_total_ = 0;
    int64_t first_ = -1;
    std::unique_ptr<io::DirectReader> reader_;
    Slot slots_[2];
    uint64_t content_space_ = stable_memory::new_space();  // slots are registered by the layer they hold
    SpineStreamStats stats_;
};

}  // namespace sluice
