// Expert routing traces (`--trace-experts FILE`): for each MoE layer of each forward pass, the experts every row
// chose, which of the distinct ones the cache already held, which were read ahead by the look-ahead, and what the
// look-ahead guessed for the layer. The streaming expert source writes it (the only place that knows hits and
// prefetches); tools/routing/analyze_trace.py and read_expert_trace() read it.
//
// File format (little-endian throughout; version 1):
//   header: "SLTRACE1" (8 bytes), u32 version, u32 n_layers (layers of the expert layout, dense ones included),
//           u32 n_experts (routed experts per MoE layer), u32 cache_slots (experts the cache holds),
//           u64 config_xxh3, u64 weights_xxh3 (ModelInfo's fingerprint), u8 prefetch (look-ahead on),
//           u8 len + architecture, u8 len + cache policy name
//   record: u8 'R', u8 top_k, u16 layer, u32 pass, u32 n_rows, u16 n_distinct, u16 n_hints, then
//           n_rows * top_k u16 expert ids (row-major; each row in the routing's combine order, ascending id),
//           n_distinct x (u16 expert, u8 flags) with flags bit 0 = cache hit, bit 1 = read ahead by a look-ahead
//           hint for this layer since its last fetch, n_hints x (u16 expert, u8 outcome): the look-ahead's guess
//           for this layer (made while the previous layer ran), outcome 0 = already cached or in flight,
//           1 = read issued, 2 = hint skipped (recent guesses mostly wrong), 3 = no cache slot
//           (every slot pinned, or the policy did not admit it; the hint's later experts are not tried)
//   end:    u8 'E', u64 n_records, "SLTREND\0" (8 bytes): written when the run finishes; without it the file is
//           truncated.
// A pass begins whenever a layer is not above the previous record's layer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace sluice {

inline constexpr uint32_t k_trace_version = 1;
enum : uint8_t { k_trace_hit = 1, k_trace_read_ahead = 2 };
enum : uint8_t { k_hint_resident = 0, k_hint_read = 1, k_hint_skipped = 2, k_hint_no_slot = 3 };

struct TraceHeader {
    uint32_t version = k_trace_version;
    uint32_t n_layers = 0, n_experts = 0, cache_slots = 0;
    uint64_t config_xxh3 = 0, weights_xxh3 = 0;
    bool prefetch = false;
    std::string architecture, policy;
};

struct TraceRecord {
    uint32_t pass = 0;
    uint16_t layer = 0;
    uint8_t top_k = 0;
    uint32_t n_rows = 0;
    std::vector<uint16_t> choices;                          // [n_rows * top_k]
    std::vector<std::pair<uint16_t, uint8_t>> distinct;     // (expert, k_trace_* flags), ascending expert
    std::vector<std::pair<uint16_t, uint8_t>> hints;        // (expert, k_hint_* outcome)
};

struct ExpertTrace {
    TraceHeader header;
    std::vector<TraceRecord> records;
};

// Writes a trace as the run goes (buffered). Records are validated against the header's shape. close() writes the
// end marker and reports write errors (Error naming the file); the destructor closes quietly when close() was not
// called (a write error then only goes to the log).
class ExpertTraceWriter {
public:
    ExpertTraceWriter(const std::string& path, const TraceHeader& header);
    ~ExpertTraceWriter();
    ExpertTraceWriter(const ExpertTraceWriter&) = delete;
    ExpertTraceWriter& operator=(const ExpertTraceWriter&) = delete;

    // One MoE layer's fetch: pass numbers are assigned here (a new pass when layer <= the previous layer).
    void write(uint16_t layer, uint8_t top_k, uint32_t n_rows, std::span<const int32_t> choices,
               std::span<const std::pair<uint16_t, uint8_t>> distinct,
               std::span<const std::pair<uint16_t, uint8_t>> hints);
    void close();
    uint64_t n_records() const { return n_records_; }
    const std::string& path() const { return path_; }

private:
    void put(const void* p, size_t n);
    std::string path_;
    TraceHeader header_;
    std::FILE* f_ = nullptr;
    bool failed_ = false;
    uint64_t n_records_ = 0;
    uint32_t pass_ = 0;
    int32_t last_layer_ = -1;
    std::vector<uint8_t> buf_;
};

// Reads and checks a whole trace: Error naming the file when it is not a trace, of another version, truncated
// (a record cut short, or no end marker), or inconsistent (ids out of range, distinct set not the rows' union).
ExpertTrace read_expert_trace(const std::string& path);
// Error unless the trace was recorded on the model with these hashes and shape ("trace FILE is for another model:
// config.json hash ... vs ...").
void check_trace_model(const ExpertTrace& t, const std::string& path, uint64_t config_xxh3, uint64_t weights_xxh3,
                       int64_t n_experts);

}  // namespace sluice
