// Experts streamed from SSD: each (layer, expert) is located as byte extents in the checkpoint files (no
// conversion needed) or in a packed expert store (one aligned read per expert), read with the DirectReader
// (O_DIRECT + io_uring when the system allows) into slots of the byte-budgeted ExpertCache, or into a small
// staging pool when the cache is full of pinned experts. One fetch issues every miss at once and hands experts to
// the caller as their bytes land; cache hits are handed out first so compute overlaps the reads.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>

#include "experts/expert_cache.h"
#include "experts/expert_location.h"
#include "experts/expert_source.h"
#include "formats/checkpoint.h"
#include "io/direct_reader.h"

namespace sluice {

struct StreamingOptions {
    uint64_t cache_bytes = 0;      // expert cache budget (0: every expert is read on every use)
    std::string policy = "lru";
    int64_t staging_experts = 4;   // experts readable at once when no cache slot is free
    bool prefetch = true;          // honour prefetch() hints (look-ahead reads into the cache)
    io::ReaderOptions reader;
    // Packed expert stores written by `sluice pack` (the manifest's folder, and the folders of its data files
    // when they moved); empty: read the experts from the checkpoint files.
    std::vector<std::string> experts_dirs;
    bool verify_reads = false;  // check each packed expert's xxh3 after it lands (fails the request on mismatch)
};

struct ExpertIoStats {
    uint64_t fetch_calls = 0;
    uint64_t experts_requested = 0;
    uint64_t experts_read = 0;
    uint64_t bytes_read = 0;        // bytes the experts occupy (what a token must bring in)
    uint64_t device_bytes_read = 0; // including 4 KiB alignment padding
    double io_wait_ms = 0;          // time the caller waited with nothing to compute
    double fetch_ms = 0;            // total time inside fetch (compute of on_ready included)
    uint64_t prefetch_issued = 0;   // experts read ahead on a hint (counted in experts_read and bytes_read too)
    uint64_t prefetch_used = 0;     // ... of which a later fetch asked for
    uint64_t prefetch_skipped = 0;  // hints ignored because recent guesses were mostly wrong
};

class StreamingExpertSource : public ExpertSource {
public:
    // views[layer][expert] are weights bound to the memory-mapped checkpoint; only their shapes and their
    // locations are used, their bytes are never touched through the map.
    StreamingExpertSource(const Checkpoint& ck, const std::vector<std::vector<ExpertWeights>>& views,
                          const StreamingOptions& options);
    // Experts wherever `layout` says (checkpoint extents or a packed store); the one read path for both.
    StreamingExpertSource(ExpertLayout layout, const StreamingOptions& options);
    ~StreamingExpertSource() override;

    void fetch(int64_t layer, std::span<const int32_t> experts,
               const std::function<void(size_t i, const ExpertWeights&)>& on_ready,
               const std::function<void()>& while_reading = {}) override;
    void prefetch(int64_t layer, std::span<const int32_t> experts) override;

    const ExpertIoStats& stats() const { return stats_; }
    const ExpertCache& cache() const { return *cache_; }
    const io::DirectReader& reader() const { return *reader_; }
    uint64_t slot_bytes() const { return slot_bytes_; }
    uint64_t memory_bytes() const;  // cache + staging
    const ExpertLayout& layout() const { return layout_; }

    using Part = ExpertPart;
    using Location = ExpertLocation;

private:
    ExpertWeights weights_in(const Location& loc, const uint8_t* slot) const;
    // Reads in flight for prefetch hints: each holds a pin on its cache slot until finished here.
    struct Prefetch;
    void finish_prefetch(uint64_t key, bool wait);  // wait (or poll) for one, unpin, drop on error
    void reap_prefetches();                          // finish those already complete

    std::unordered_map<uint64_t, std::shared_ptr<Prefetch>> prefetching_;
    // Recent accuracy of read-ahead guesses (decaying counts): when most guesses go unused, hints are mostly
    // ignored so wrong guesses neither waste the drive nor evict useful experts; a few still go through to notice
    // when guessing works again.
    double guess_used_ = 0, guess_wasted_ = 0;
    std::unordered_map<int64_t, std::vector<int32_t>> guesses_;  // layer -> experts read ahead, not yet judged
    uint64_t hint_calls_ = 0;
    // Empty when the landed bytes match the location's checksum (or it has none), else the error text.
    std::string check_landed(const Location& loc, const uint8_t* slot) const;

    ExpertLayout layout_;
    bool verify_reads_ = false;
    StreamingOptions options_;
    uint64_t slot_bytes_ = 0;
    std::unique_ptr<ExpertCache> cache_;
    std::unique_ptr<io::DirectReader> reader_;
    std::vector<io::AlignedBuffer> staging_;
    ExpertIoStats stats_;
};

}  // namespace sluice
