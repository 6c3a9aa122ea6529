// Experts streamed from SSD: each (layer, expert) is located as byte extents in the checkpoint files (no
// conversion needed) or in a packed expert store (one aligned read per expert), read with the DirectReader
// (O_DIRECT + io_uring when the system allows) into slots of the byte-budgeted ExpertCache, or into a small
// staging pool when the cache is full of pinned experts. One fetch issues every miss at once and hands experts to
// the caller as their bytes land; cache hits are handed out first so compute overlaps the reads. With a usage
// statistics file, the most-used experts are preloaded and held at construction, and this run's use is merged
// back into the file when the source is destroyed (streaming_usage.cpp).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "experts/expert_cache.h"
#include "experts/expert_location.h"
#include "experts/expert_trace.h"
#include "experts/expert_source.h"
#include "experts/usage_stats.h"
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
    // Usage statistics file (empty: none). Read at construction when it exists: if it parses and its fingerprint
    // matches, its most-used experts (at most pin_share of the cache slots) are preloaded and held; anything wrong
    // gives one warning and the run goes on unpinned. Held experts whose live use over the last pin_check_fetches
    // fetches of their layer is below half the mean of that layer's unheld residents are released. At destruction
    // (outside of exception unwinding) the old counts, halved, plus this run's are written back atomically.
    std::string usage_stats_path;
    ModelFingerprint fingerprint;  // architecture and hashes; the layout's shape fills in the rest
    double pin_share = 0.5;
    int64_t pin_check_fetches = 64;
    // Expert trace file (empty: none; experts/expert_trace.h): every fetch's routing, hits and read-aheads are
    // written to it, tied to `fingerprint`; the file is closed (end marker) when the source is destroyed.
    std::string trace_path;
};

struct UsagePinStats {
    bool file_used = false;        // the file existed, parsed and matched this model
    std::string warning;           // why an existing file was ignored (empty if it was not)
    uint64_t pinned_at_load = 0;   // experts preloaded and held from the file
    uint64_t preload_bytes = 0;    // bytes those preloads read (not in ExpertIoStats)
    uint64_t released = 0;         // held experts released because live use did not justify them
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

    void fetch_groups(int64_t layer, std::span<const int32_t> experts,
                      FunctionRef<void(std::span<const ReadyExpert>)> on_ready,
                      FunctionRef<void()> while_reading = {}) override;
    void prefetch(int64_t layer, std::span<const int32_t> experts) override;
    void note_use(int64_t layer, std::span<const int32_t> experts, std::span<const uint32_t> rows,
                  std::span<const int32_t> row_choices = {}, int64_t top_k = 0) override;

    const ExpertIoStats& stats() const { return stats_; }
    const UsagePinStats& pin_stats() const { return pin_stats_; }
    const StreamingOptions& options() const { return options_; }
    // Token rows routed to each expert in this run, [layer][expert] (from note_use).
    const std::vector<std::vector<uint64_t>>& live_use() const { return use_rows_; }
    // Merges this run's use into the usage statistics file now (the destructor does it too, once more use was
    // noted since). Throws Error when the file cannot be written; does nothing without a file or without use.
    void save_usage();
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
    // Issues read-aheads of layer's experts in order, each into a cache slot; returns the index of the first that
    // found no free slot, or experts.size(). hints: the trace's record of each outcome, or null.
    size_t issue_read_aheads(int64_t layer, std::span<const int32_t> experts,
                             std::vector<std::pair<uint16_t, uint8_t>>* hints);
    // The part of the last hint that found no free slot: a fetch that computes its experts unpins them one group at
    // a time and reads these ahead into the slots that frees (a prefill's layer pins nearly every slot while the
    // next layer's hint arrives, and without this the drive idled until the next layer asked).
    int64_t deferred_layer_ = -1;
    std::vector<int32_t> deferred_;
    void resume_deferred(int64_t fetching_layer);
    // The experts a hint found resident, pinned until their layer's fetch (or the next hint): else the hint's own
    // read-aheads, taking the least recently used slots, evicted them first (they were used a layer-pass ago).
    std::vector<ExpertKey> hint_pins_;
    void release_hint_pins(int64_t layer);  // those of `layer`; -1: all

    std::unordered_map<uint64_t, std::shared_ptr<Prefetch>> prefetching_;
    // Recent accuracy of each layer's read-ahead guesses (decaying counts): when most of a layer's guesses go unused,
    // its hints are mostly ignored so wrong guesses neither waste the drive nor evict useful experts; a few still go
    // through to notice when guessing works again. Per layer: a guess made from the layer just before (a MoE
    // layer's input) and one made from a dense layer's (the first MoE layer's hint) are not equally good.
    struct GuessRecord {
        double used = 0, wasted = 0;
        uint64_t hints = 0;
    };
    std::vector<GuessRecord> guess_;  // [layer]
    std::unordered_map<int64_t, std::vector<int32_t>> guesses_;  // layer -> experts read ahead, not yet judged
    // Tracing (--trace-experts): the row choices noted for the coming fetch, and the look-ahead's hints per layer.
    std::unique_ptr<ExpertTraceWriter> trace_;
    int64_t trace_layer_ = -1, trace_top_k_ = 0;
    std::vector<int32_t> trace_choices_;
    std::unordered_map<int64_t, std::vector<std::pair<uint16_t, uint8_t>>> trace_hints_;
    void trace_fetch(int64_t layer, std::span<const int32_t> experts, const std::vector<uint8_t>& hit,
                     const std::vector<int32_t>& read_ahead);
    // Empty when the landed bytes match the location's checksum (or it has none), else the error text.
    std::string check_landed(const Location& loc, const uint8_t* slot) const;

    // Usage statistics and pinning (streaming_usage.cpp).
    void load_usage();                                // constructor: read the file, preload and hold the top experts
    void preload(const std::vector<ExpertKey>& keys);  // read keys into the cache and hold them
    void recheck_holds(int64_t layer);                // release held experts that live use does not justify
    std::vector<std::vector<uint64_t>> use_rows_;     // [layer][expert] rows this run
    std::vector<std::vector<uint64_t>> window_rows_;  // ... since the layer's last re-check
    std::vector<uint64_t> layer_fetches_;
    uint64_t unsaved_rows_ = 0;                       // rows noted since the last save
    std::optional<UsageStats> usage_file_;            // the accepted file (rows sized like the layout)
    UsagePinStats pin_stats_;

    ExpertLayout layout_;
    bool verify_reads_ = false;
    StreamingOptions options_;
    uint64_t slot_bytes_ = 0;
    std::unique_ptr<ExpertCache> cache_;
    std::unique_ptr<io::DirectReader> reader_;
    std::vector<io::AlignedBuffer> staging_;
    std::vector<ops::PinnedRegion> staging_pins_;  // after staging_: unpinned before the buffers are freed
    ExpertIoStats stats_;
};

}  // namespace sluice
