// The CUDA backend's host interface (no CUDA headers here: every target includes it, and a build without nvcc
// links ops/cuda_off.cpp instead, where compiled() is false and the rest throws).
//
// What runs on the card today: every weight matmul, every group of routed experts (gate, up, activation, down) and
// attention (ops::matmul, ops::expert_group and ops::attention dispatch here when their ExecContext's backend is
// Cuda), checked against their reference twins by tests/ops/op_harness.cpp. Norms, routing, the MLA absorption and
// KDA's elementwise ops stay on the CPU for now (KDA's delta rule runs here: kda_recurrent); activations go up and
// results come back per call.
//
// Exactness: the weights of BF16, MXFP4, INT4 and FP8 are exact bf16 values (FP8's per-tile scale is applied to each
// 128-column chunk's partial sum), and each f32 activation is split into three bf16 parts hi + mid + lo that sum to
// it, so the tensor cores' bf16 products are exact and accumulate in f32. A row's output depends only on that row and
// the weights: the k order, and the fixed split of k into parts (chosen from the weight's shape alone, partial sums
// added in a fixed order) do not depend on the batch, so batching, chunking and speculation stay bit-identical on
// the GPU as they are on the CPU. F32 and F16 weights use plain f32 FMAs in column order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ops/weight.h"

namespace sluice {
class ThreadPool;
}

namespace sluice::cuda {

bool compiled();  // this build has the CUDA backend
// A device can be used; `why` gets the reason when not (no driver, no device, compute capability below 8.0).
bool usable(std::string* why = nullptr);

struct DeviceInfo {
    std::string name;
    int cc_major = 0, cc_minor = 0, sm_count = 0;
    uint64_t total_bytes = 0, free_bytes = 0;
};
DeviceInfo device_info();  // throws Error when !usable()

// Device memory the backend may hold (weight copies and workspace). 0: 90% of what is free at first use.
void set_memory_budget(uint64_t bytes);
uint64_t memory_budget();

bool supports(WeightFormat f);  // F32, F16, BF16, FP8_E4M3_B128, MXFP4, INT4_G32

// y[n, w.rows] = x[n, w.cols] . W^T; w's bytes, x and y in host memory. Bytes inside a stable range
// (core/stable_memory.h: the memory-mapped checkpoint; expert cache slots and spine-streaming slots, registered by
// the content they hold) keep a device copy within the budget: the card is the tier above the host's expert cache,
// and a copy outlives the host slot it was made from. Content-keyed copies are evicted least recently used first;
// copies of the memory map (the resident spine, used by every pass in the same order) are never evicted for new copies,
// only for the work buffers, so a spine larger than the budget keeps the part that fits instead of cycling through
// it. Other bytes (read staging when the host cache has no room) are copied for the call.
void matmul(const Weight& w, const float* x, int64_t n, float* y);

// A group of routed experts (ops::expert_group's contract, ops/moe_ops.h) with x and y in host memory: x's rows go
// up once, each expert's rows are gathered on the card, every expert's gate and up products run in one launch, the
// activation on the card, the down products in a second launch, and the outputs come back once, to their slots. A
// matrix's product has the bits ops::matmul gives it on the card (the same tiles and k split), and the activation
// is computed on the card for every group, so an expert's output for a row does not depend on the other experts or
// rows of the group. The weights are placed as matmul() places them; when the card cannot hold all of a group's at
// once, the group runs in waves of experts. The experts' matrices must have one shape (gate and up [inter, hidden],
// down [hidden, inter]).
struct GroupMember {
    const Weight* gate = nullptr;
    const Weight* up = nullptr;
    const Weight* down = nullptr;
    const int64_t* slots = nullptr;  // host; slot s reads row s / top_k of x and writes y + s * hidden
    int64_t m = 0;
};
struct GroupActivation {
    int kind = 0;  // 0: silu(g) u; 1: SiTU (beta, linear_beta); 2: gpt-oss's clamped SwiGLU (alpha, limit)
    float beta = 4.0f, linear_beta = 25.0f, alpha = 1.702f, limit = 7.0f;
};
// pool (may be null): the threads that copy the outputs to their slots (a prefill chunk's group brings back GBs).
void expert_group(const GroupActivation& act, const GroupMember* experts, int64_t count, const float* x,
                  int64_t top_k, int64_t hidden, float* y, ThreadPool* pool = nullptr);

// Causal attention (ops::attention's contract, ops/ops.h) with q, pos, the key/value rows and out in host memory.
// The rows a call reads go up (keys and values: from the first key any row sees to the last), queries in bounded
// pieces; scores, an online softmax and the weighted values in f32 FMAs, the keys walked in tiles at fixed absolute
// positions (multiples of 32), so a row's bits depend on its own query, position and keys alone: not on the other
// rows of the call, how they are split, or the chunking of a prompt.
struct AttentionShape {
    int64_t n_heads = 0, n_kv_heads = 0, head_dim_k = 0, head_dim_v = 0;
    float scale = 1.0f;
    const float* sinks = nullptr;  // [n_heads] host, or null
    int64_t window = 0;
};
struct Rows {  // ops::RowView's fields: row t at pages[t >> page_shift] + (t & mask) * stride, or first + t * stride
    const float* const* pages = nullptr;
    const float* first = nullptr;
    int64_t page_shift = 0, stride = 0;
    const float* row(int64_t t) const {
        return pages ? pages[t >> page_shift] + (t & ((int64_t(1) << page_shift) - 1)) * stride : first + t * stride;
    }
    bool same(const Rows& o) const {
        return pages == o.pages && first == o.first && page_shift == o.page_shift && stride == o.stride;
    }
};
// Whether attention() takes these head sizes (its tiles must fit a multiprocessor's shared memory): a function of
// the shape alone, so the same layer always runs on the same side.
bool attention_supports(const AttentionShape& a, const Rows& k, const Rows& v);
void attention(const AttentionShape& a, const float* q, int64_t n_rows, const int64_t* pos, const Rows& k,
               const Rows& v, float* out);

// KDA's gated delta rule, recurrent form (ops/kda.h), for `heads` heads of one sequence over T rows in host memory:
// head h's q, k, v of row t at q + t * stride + h * D (and so on), its decays exp(g) at decay + t * decay_stride +
// h * D, beta at beta + t * beta_stride + h, its state [D, D] (k-major) at S + h * D * D, read and updated; o strided
// like q, or null (a replay needs only the state). The same bits as the CPU's kda_recurrent given the same exp(g).
bool kda_supports(int64_t D);  // head sizes up to 128 (a thread holds a state column in registers)
void kda_recurrent(const float* q, const float* k, const float* v, const float* decay, int64_t decay_stride,
                   const float* beta, float* o, int64_t stride, int64_t beta_stride, int64_t heads, int64_t T, int64_t D,
                   float* S);

// Page-locks host memory that weights are read into (the expert cache, read staging, spine slots), so copies from it
// run at the link's full rate instead of through the driver's small pageable bounce buffer. false (and nothing
// changes) when the driver refuses, e.g. over the locked-memory limit.
bool pin_host(void* p, uint64_t bytes);
void unpin_host(void* p);

struct Stats {
    uint64_t calls = 0;
    uint64_t h2d_bytes = 0, d2h_bytes = 0;      // activations and weights up, results down
    uint64_t weight_upload_bytes = 0;           // part of h2d_bytes: weight bytes copied
    uint64_t weight_hits = 0, weight_misses = 0;  // device copies reused / made
    uint64_t resident_weight_bytes = 0;         // device copies held now
    uint64_t workspace_bytes = 0;               // work buffers held now (filled in by stats())
    double busy_ms = 0;                         // host time inside matmul calls (copies, kernels, waits)
    // The device's timeline of matmul calls (events around each step): placing the weight (a kept copy's allocation
    // and first upload, or the per-call copy), the activations' copies up and the results' down, the kernels.
    double place_ms = 0, activation_copy_ms = 0, kernel_ms = 0;
    uint64_t attention_calls = 0;
    uint64_t attention_kv_bytes = 0;            // keys and values copied up (part of h2d_bytes)
    double attention_ms = 0;                    // host time inside attention calls
    uint64_t kda_calls = 0;
    double kda_ms = 0;                          // host time inside KDA delta-rule calls
    uint64_t group_calls = 0, group_waves = 0;  // expert groups run on the card, and the waves they took
    uint64_t group_weights = 0;                 // matrices computed in them (not counted in calls)
    uint64_t group_serial_stages = 0;           // their stages whose k splits ran one launch each (no room to keep
                                                // the partial sums apart)
    double group_ms = 0;                        // host time inside expert-group calls (its placing and kernels are
                                                // also in place_ms and kernel_ms)
};
Stats stats();
void reset_stats();

// Device-side entry points for the op harness and the benchmark. A DeviceWeight's data/scales are device pointers.
void* device_alloc(uint64_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, uint64_t bytes);
void copy_to_host(void* dst, const void* src, uint64_t bytes);
void synchronize();
// The same product as matmul() with everything already on the device (asynchronous on the backend's stream).
void matmul_device(const Weight& w_dev, const float* x_dev, int64_t n, float* y_dev);
// How many parts k is split into for a weight of this shape (the same for every n).
int k_splits(int64_t rows, int64_t cols);

// The card's read rate (GB/s, median of 5) over a buffer of `bytes`: the ceiling one-row matmuls are measured against.
double measure_read_gbps(uint64_t bytes);

// Timing with device events on the backend's stream: milliseconds between the two marks.
struct EventPair {
    void* start = nullptr;
    void* stop = nullptr;
};
EventPair event_pair();
void record(void* event);
float elapsed_ms(const EventPair& e);  // synchronizes on e.stop
void destroy(EventPair& e);
// Milliseconds per call of `body` (device work on the backend's stream, no allocation or synchronisation inside),
// captured `reps` times into one CUDA graph and timed over its replays (median of 5): the kernels' own time, free of
// the host's launch overhead. Call `body` once before, so its buffers exist.
double graph_ms_per_call(const std::function<void()>& body, int reps);
// Pinned host memory (page-locked: full-rate, asynchronous copies).
void* host_alloc_pinned(uint64_t bytes);
void host_free_pinned(void* p);
void copy_to_device_async(void* dst, const void* src, uint64_t bytes);
void device_copy_async(void* dst, const void* src, uint64_t bytes);

}  // namespace sluice::cuda
