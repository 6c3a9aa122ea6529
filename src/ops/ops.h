// The op set the model files call. Each op has a plain reference twin in ops::ref (ops/reference/) that is the
// test oracle. The ops that have a CUDA side (matmul, attention, and ops/kda.h's kda_recurrent_heads) take the
// ExecContext they run in (ops/exec_context.h) and dispatch on its backend; their CPU halves, ops::cpu::matmul and
// ops::cpu::attention, take a thread pool and always run on the CPU, for code that has no context (kernel probes,
// tests). On the CPU the fastest available path runs (ops/cpu/). Activations are f32, row-major, rows = token rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "ops/weight.h"

namespace sluice {

class ExecContext;  // ops/exec_context.h

struct AttentionParams {
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;      // heads share kv head h / (n_heads / n_kv_heads); 1 = multi-query
    int64_t head_dim_k = 0;      // q and k width per head
    int64_t head_dim_v = 0;      // v width per head
    float scale = 1.0f;          // multiplies q.k
    const float* sinks = nullptr;  // [n_heads] learned sink logits (gpt-oss), or null
    int64_t window = 0;          // >0: a row at position p sees keys (p - window, p]; 0 = full causal
};

namespace ops {

// CPU kernel paths. The active one is the best the CPU supports unless SLUICE_CPU_PATH=portable|avx2|avx512|amx|neon
// names another (read on first use) or set_cpu_path() overrides it; tests use this to run every path. Amx is
// Avx512 with AMX-BF16 tile products for BF16/MXFP4/INT4 weights (exact: see ops/cpu/x86/amx_matmul.cpp). Neon
// (AArch64 builds, ops/cpu/arm) gives the portable path's bits exactly (cpu_path_matches_portable).
enum class CpuPath : uint8_t { Portable, Avx2, Avx512, Amx, Neon };
std::string_view cpu_path_name(CpuPath p);
std::optional<CpuPath> cpu_path_from_name(std::string_view name);  // any path's name, built here or not
bool cpu_path_available(CpuPath p);
std::vector<CpuPath> available_cpu_paths();  // portable first, best last
// Whether the path's matmul and dequantize_row give the portable path's bits for every input (the op harness
// checks it): Portable and Neon. The x86 paths fuse multiply-adds the portable path (x86-64's baseline) cannot,
// and meet the reference within a bound instead.
bool cpu_path_matches_portable(CpuPath p);
CpuPath cpu_path();
void set_cpu_path(CpuPath p);  // throws sluice::Error if the CPU lacks it
// Whether the Avx512 path's few-row MXFP4/INT4 decoders use VBMI (vpermb): on a CPU that has it, yes unless
// SLUICE_AVX512_VBMI=0 (read on first use) or set_avx512_vbmi(false). Off runs the decoders of AVX-512 CPUs without
// VBMI (Skylake-SP, Cascade Lake) on one that has it, to test and measure them; the bits are the same either way.
bool avx512_vbmi();
void set_avx512_vbmi(bool on);  // throws sluice::Error if on and the CPU lacks VBMI
// Where the dispatching ops run: each ExecContext has its backend, chosen when it is made (ops/exec_context.h). On
// Cuda every weight matmul and every attention whose head sizes fit the kernel's tiles run on the card
// (ops/cuda/backend.h), and KDA's delta rule (ops/kda.h kda_recurrent_heads); the other ops stay on the CPU for now.
enum class Backend : uint8_t { Cpu, Cuda };
std::string_view backend_name(Backend b);
// The process default: the backend a context takes when it is made without one (the engine's, a draft model's),
// and what decides PinnedRegion's page-locking. Cpu unless SLUICE_DEVICE=cpu|cuda|auto (read on first use) or
// select_backend() (the CLI's --device) picks another. Changing it does not move contexts already made.
Backend backend();
Backend select_backend(std::string_view name);  // "auto" (CUDA when usable), "cuda" (throws if not), "cpu"
void set_backend(Backend b);                     // throws if Cuda is not usable
// Returns b; throws sluice::Error ("<what>: <why not>") when b is Cuda and no CUDA device is usable here.
Backend check_usable(Backend b, std::string_view what);
// Host memory that weights are read into and then copied to a device: page-locked while the process default
// backend is Cuda (ops/cuda/backend.h pin_host), nothing on the CPU. Destroy it before freeing the memory.
class PinnedRegion {
public:
    PinnedRegion() = default;
    PinnedRegion(void* p, uint64_t bytes);
    ~PinnedRegion() { reset(); }
    PinnedRegion(PinnedRegion&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    PinnedRegion& operator=(PinnedRegion&& o) noexcept {
        if (this != &o) reset(), p_ = o.p_, o.p_ = nullptr;
        return *this;
    }
    void reset();

private:
    void* p_ = nullptr;  // set while pinned
};
// The compute probe beside the memory probes (bench_kernels): `iterations` rounds of independent f32 FMA chains on
// the calling thread with the active path's widest vectors; returns the flops done.
double fma_probe(int64_t iterations);

// y[n, w.rows] = x[n, w.cols] . W^T, on ctx's backend (the CPU side over its pool). Deterministic for a given
// thread count.
void matmul(const Weight& w, const float* x, int64_t n, float* y, ExecContext& ctx);

// Dequantise row r of w into out[w.cols].
void dequantize_row(const Weight& w, int64_t r, float* out);

// y[n, dim] = x / sqrt(mean(x^2) + eps) * weight (weight may be null = 1). In-place allowed.
void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y);

// out[i] = silu(gate[i]) * up[i] for i < n.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// The rows of a per-token cache: row t at pages[t >> page_shift] + (t & (2^page_shift - 1)) * stride. A contiguous
// buffer is one page (state/caches.h keeps caches in pages of PagedRows::k_page_rows rows).
struct RowView {
    const float* const* pages = nullptr;  // null: contiguous from `first`
    const float* first = nullptr;
    int64_t page_shift = 0, stride = 0;
    const float* row(int64_t t) const {
        return pages ? pages[t >> page_shift] + (t & ((int64_t(1) << page_shift) - 1)) * stride : first + t * stride;
    }
    static RowView contiguous(const float* p, int64_t stride) { return {nullptr, p, 0, stride}; }
};

// Causal attention of query rows over one sequence's keys/values.
//   q:   [n_rows, n_heads, head_dim_k]
//   k:   key t, kv head g at k.row(t) + g*head_dim_k ; v likewise with head_dim_v
//   pos: [n_rows] position of each query row; row r sees keys t <= pos[r] (and t > pos[r]-window)
//   out: [n_rows, n_heads, head_dim_v]
// On ctx's backend: on Cuda where the head sizes fit the card's tiles (a property of the layer alone), else over
// ctx's pool on the CPU.
void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, RowView k, RowView v,
               float* out, ExecContext& ctx);

}  // namespace ops

// The CPU halves of the dispatching ops: on the CPU whatever the backend (ops/cpu/dispatch.cpp, attention.cpp).
namespace ops::cpu {
void matmul(const Weight& w, const float* x, int64_t n, float* y, ThreadPool& pool);
void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, RowView k, RowView v,
               float* out, ThreadPool& pool);
inline void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, const float* k,
                      int64_t k_stride, const float* v, int64_t v_stride, float* out, ThreadPool& pool) {
    attention(p, q, n_rows, pos, RowView::contiguous(k, k_stride), RowView::contiguous(v, v_stride), out, pool);
}
}  // namespace ops::cpu

namespace ops::ref {
void matmul(const Weight& w, const float* x, int64_t n, float* y);
void dequantize_row(const Weight& w, int64_t r, float* out);
void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, const float* k,
               int64_t k_stride, const float* v, int64_t v_stride, float* out);
}  // namespace ops::ref

}  // namespace sluice
