// Chooses the CPU kernel path at run time (cpuid on x86, HWCAP on AArch64, or SLUICE_CPU_PATH / set_cpu_path) and
// runs ops::cpu::matmul and ops::dequantize_row on it; ops::matmul sends a context's calls here or to the card.
// Threads take the output rows in ranges of whole kRowBlock blocks (whichever thread is free takes the next range);
// every output element is computed by one thread in a fixed order that does not depend on the range, so y is the
// same for any thread count or split.
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/phase_times.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_call.h"
#include "ops/cuda/backend.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace cpu {
thread_local uint64_t t_matmul_call = 0;
}

namespace {

constexpr int kUnset = -1;
constexpr int64_t kMinDynamicBlocks = 256 / cpu::kRowBlock;  // 256 rows
std::atomic<int> g_path{kUnset};
std::atomic<int> g_vbmi{kUnset};

// The paths this build has, portable first, best last; a CPU has a prefix of them (cpu_path_available).
#if defined(SLUICE_CPU_X86)
constexpr CpuPath kBuiltPaths[] = {CpuPath::Portable, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Amx};
#elif defined(SLUICE_CPU_ARM64)
constexpr CpuPath kBuiltPaths[] = {CpuPath::Portable, CpuPath::Neon};
#else
constexpr CpuPath kBuiltPaths[] = {CpuPath::Portable};
#endif
constexpr CpuPath kAllPaths[] = {CpuPath::Portable, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Amx, CpuPath::Neon};

CpuPath best_path() {
    const auto& f = cpu_features();
#if defined(SLUICE_CPU_X86)
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) {
        if (f.avx512_bf16 && f.avx512_vbmi && cpu::amx::enable(f.amx_bf16)) return CpuPath::Amx;
        return CpuPath::Avx512;
    }
    if (f.avx2 && f.fma && f.f16c) return CpuPath::Avx2;
#elif defined(SLUICE_CPU_ARM64)
    if (f.asimd) return CpuPath::Neon;
#endif
    (void)f;
    return CpuPath::Portable;
}

int built_index(CpuPath p) {
    for (size_t i = 0; i < std::size(kBuiltPaths); ++i)
        if (kBuiltPaths[i] == p) return int(i);
    return -1;
}

CpuPath initial_path() {
    const char* env = std::getenv("SLUICE_CPU_PATH");
    if (!env || !*env) return best_path();
    const auto p = cpu_path_from_name(env);
    SLUICE_CHECK(p.has_value(), "SLUICE_CPU_PATH=", env, ": expected portable, avx2, avx512, amx or neon");
    SLUICE_CHECK(cpu_path_available(*p), "SLUICE_CPU_PATH=", env, ": this CPU lacks it (has ",
                 cpu_features().describe(), ")");
    return *p;
}

struct PathFns {
    cpu::MatmulRowsFn matmul_rows;
    cpu::DequantRangeFn dequantize_range;
};

PathFns path_fns(CpuPath p) {
    switch (p) {
#if defined(SLUICE_CPU_X86)
        case CpuPath::Amx: return {cpu::amx::matmul_rows, cpu::avx512::dequantize_range};
        case CpuPath::Avx512: return {cpu::avx512::matmul_rows, cpu::avx512::dequantize_range};
        case CpuPath::Avx2: return {cpu::avx2::matmul_rows, cpu::avx2::dequantize_range};
#elif defined(SLUICE_CPU_ARM64)
        case CpuPath::Neon: return {cpu::neon::matmul_rows, cpu::neon::dequantize_range};
#endif
        default: break;  // set_cpu_path admits only this build's paths
    }
    return {cpu::portable::matmul_rows, cpu::portable::dequantize_range};
}

}  // namespace

std::string_view cpu_path_name(CpuPath p) {
    switch (p) {
        case CpuPath::Portable: return "portable";
        case CpuPath::Avx2: return "avx2";
        case CpuPath::Avx512: return "avx512";
        case CpuPath::Amx: return "amx";
        case CpuPath::Neon: return "neon";
    }
    return "?";
}

std::optional<CpuPath> cpu_path_from_name(std::string_view name) {
    for (CpuPath p : kAllPaths)
        if (cpu_path_name(p) == name) return p;
    return std::nullopt;
}

bool cpu_path_available(CpuPath p) {
    const int i = built_index(p);
    return i >= 0 && i <= built_index(best_path());
}

std::vector<CpuPath> available_cpu_paths() {
    std::vector<CpuPath> out;
    for (CpuPath p : kBuiltPaths)
        if (cpu_path_available(p)) out.push_back(p);
    return out;
}

bool cpu_path_matches_portable(CpuPath p) { return p == CpuPath::Portable || p == CpuPath::Neon; }

CpuPath cpu_path() {
    int p = g_path.load(std::memory_order_relaxed);
    if (p == kUnset) {
        int expected = kUnset;
        g_path.compare_exchange_strong(expected, int(initial_path()));
        p = g_path.load();
    }
    return CpuPath(p);
}

void set_cpu_path(CpuPath p) {
    SLUICE_CHECK(cpu_path_available(p), "CPU path ", cpu_path_name(p), " is not available on this CPU (has ",
                 cpu_features().describe(), ")");
    g_path.store(int(p));
}

bool avx512_vbmi() {
    int v = g_vbmi.load(std::memory_order_relaxed);
    if (v == kUnset) {
        const char* env = std::getenv("SLUICE_AVX512_VBMI");
        const bool off = env && std::string_view(env) == "0";
        int expected = kUnset;
        g_vbmi.compare_exchange_strong(expected, int(cpu_features().avx512_vbmi && !off));
        v = g_vbmi.load();
    }
    return v == 1;
}

void set_avx512_vbmi(bool on) {
    SLUICE_CHECK(!on || cpu_features().avx512_vbmi, "AVX-512 VBMI is not available on this CPU (has ",
                 cpu_features().describe(), ")");
    g_vbmi.store(int(on));
}

double fma_probe(int64_t iterations) {
    switch (cpu_path()) {
#if defined(SLUICE_CPU_X86)
        case CpuPath::Amx:
        case CpuPath::Avx512: return cpu::avx512::fma_probe(iterations);
        case CpuPath::Avx2: return cpu::avx2::fma_probe(iterations);
#elif defined(SLUICE_CPU_ARM64)
        case CpuPath::Neon: return cpu::neon::fma_probe(iterations);
#endif
        default: break;
    }
    float acc[16] = {};
    for (int64_t i = 0; i < iterations; ++i)
        for (float& a : acc) a = a * 1.0f + 0.0f;
    volatile float sink = acc[0];
    (void)sink;
    return double(iterations) * 16 * 2;
}

void dequantize_row(const Weight& w, int64_t r, float* out) {
    w.check();
    SLUICE_CHECK(r >= 0 && r < w.rows, "dequantize_row: row ", r, " outside [0, ", w.rows, ")");
    path_fns(cpu_path()).dequantize_range(w, r, 0, w.cols, out);
}

cpu::MatmulRowsFn cpu::active_matmul_rows() { return path_fns(cpu_path()).matmul_rows; }

uint64_t cpu::reserve_matmul_calls(uint64_t count) {
    static std::atomic<uint64_t> g_calls{0};
    return g_calls.fetch_add(count) + 1;
}

float* cpu::thread_matmul_scratch(int64_t cols) {
    constexpr uintptr_t kAlign = 64;
    thread_local std::vector<float> scratch;
    const auto need = size_t(cpu::matmul_scratch_floats(cols)) + kAlign / sizeof(float);
    if (scratch.size() < need) scratch.resize(need);
    const uintptr_t at = reinterpret_cast<uintptr_t>(scratch.data());
    return reinterpret_cast<float*>((at + kAlign - 1) & ~(kAlign - 1));
}

namespace {
// Checks a matmul's arguments; false when there is nothing to compute (no rows, or a matrix of none).
bool matmul_has_work(const Weight& w, int64_t n) {
    w.check();
    SLUICE_CHECK(n >= 0, "matmul: negative row count ", n);
    return n > 0 && w.rows > 0;
}
}  // namespace

void matmul(const Weight& w, const float* x, int64_t n, float* y, ExecContext& ctx) {
    if (n > 0) phase_times::add_matmul_flops(2.0 * double(n) * double(w.rows) * double(w.cols));
    phase_times::Scope timed(phase_times::kMatmul);
    if (ctx.backend() != Backend::Cuda) return cpu::matmul(w, x, n, y, ctx.pool());
    if (matmul_has_work(w, n)) cuda::matmul(w, x, n, y);
}

void cpu::matmul(const Weight& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
    if (!matmul_has_work(w, n)) return;
    if (w.cols == 0) {
        for (int64_t i = 0; i < n * w.rows; ++i) y[i] = 0.0f;
        return;
    }
    const uint64_t call = cpu::reserve_matmul_calls(1);
    const auto fn = cpu::active_matmul_rows();
    const int64_t blocks = (w.rows + cpu::kRowBlock - 1) / cpu::kRowBlock;
    // Ranges of about a quarter of a thread's share (at least 256 rows, whole 32-row AMX sets) go to whichever
    // thread is free: with an even split the call waits for the slower half, and on a shared machine the halves
    // of a memory-bound decode matmul often finish tens of microseconds apart. Rows do not depend on the split.
    const int64_t share = (blocks + pool.n_threads() * 4 - 1) / (pool.n_threads() * 4);
    const int64_t grain = std::max(kMinDynamicBlocks, (share + 1) / 2 * 2);
    pool.parallel_for_dynamic(blocks, grain, [&](int64_t b0, int64_t b1) {
        float* const scratch64 = cpu::thread_matmul_scratch(w.cols);
        const int64_t r0 = b0 * cpu::kRowBlock, r1 = std::min(w.rows, b1 * cpu::kRowBlock);
        cpu::MatmulCallMark mark(call);
        fn(w, x, n, y, r0, r1, scratch64);
    });
}

}  // namespace sluice::ops
