// Experts are handles (layer, expert), not pointers: their bytes may be on SSD. An ExpertSource turns a set of
// handles into resident weights, calling back as each one becomes available so compute can start on the first
// expert while later ones are still being read. The resident source serves views of memory-mapped tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/function_ref.h"
#include "ops/weight.h"

namespace sluice {

// One routed expert's matrices: gate [I, H], up [I, H], down [H, I] (SwiGLU: down(silu(gate x) * up x)).
// gpt-oss: `gate` is the fused gate_up [2I, H] (rows interleaved: 2i gate, 2i+1 up) and `up` is empty (no data).
struct ExpertWeights {
    Weight gate, up, down;
    uint64_t size_bytes() const;
};

// An expert whose weights are resident now: experts[i] of a fetch.
struct ReadyExpert {
    size_t i;
    ExpertWeights w;
};

class ExpertSource {
public:
    virtual ~ExpertSource() = default;
    // Calls on_ready(ready) with the experts[i] (distinct ids) of `layer` that are resident at that moment, each
    // exactly once over the calls, on the calling thread: the cached ones together, then those whose bytes arrived
    // since the last call, so the caller computes every ready expert in one go (ops::expert_group) while later
    // ones are still being read. The weights are valid only during the call. while_reading (optional) runs once on
    // the calling thread after the reads are issued: work that needs no expert (the shared expert) overlaps I/O.
    virtual void fetch_groups(int64_t layer, std::span<const int32_t> experts,
                              FunctionRef<void(std::span<const ReadyExpert>)> on_ready,
                              FunctionRef<void()> while_reading = {}) = 0;
    // The same an expert at a time: on_ready(i, weights) once for each experts[i].
    void fetch(int64_t layer, std::span<const int32_t> experts,
               FunctionRef<void(size_t i, const ExpertWeights&)> on_ready, FunctionRef<void()> while_reading = {}) {
        fetch_groups(layer, experts, [&](std::span<const ReadyExpert> ready) {
            for (const ReadyExpert& r : ready) on_ready(r.i, r.w);
        }, while_reading);
    }
    // A hint that these experts of `layer` are likely needed soon: a streaming source starts reading them now.
    // Never changes results; a wrong guess only costs bandwidth.
    virtual void prefetch(int64_t layer, std::span<const int32_t> experts) {}
    // How many token rows were routed to each of experts[i] (called before the fetch that serves them), and the
    // experts each row chose (row_choices [rows, top_k]); a streaming source keeps these as usage statistics and,
    // when tracing (--trace-experts), records them with that fetch. Never changes results.
    virtual void note_use(int64_t layer, std::span<const int32_t> experts, std::span<const uint32_t> rows,
                          std::span<const int32_t> row_choices = {}, int64_t top_k = 0) {}
};

// Every expert's weights are already addressable (memory-mapped checkpoint).
class ResidentExpertSource : public ExpertSource {
public:
    // experts[layer][e]; layers without routed experts have empty vectors.
    explicit ResidentExpertSource(std::vector<std::vector<ExpertWeights>> experts) : experts_(std::move(experts)) {}
    void fetch_groups(int64_t layer, std::span<const int32_t> experts,
                      FunctionRef<void(std::span<const ReadyExpert>)> on_ready,
                      FunctionRef<void()> while_reading = {}) override;
    const std::vector<std::vector<ExpertWeights>>& all() const { return experts_; }

private:
    std::vector<std::vector<ExpertWeights>> experts_;
};

}  // namespace sluice
