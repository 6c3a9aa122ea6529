// CPU features that select kernel paths at run time. x86: read once with cpuid and checked against the registers
// the OS saves (xgetbv), so an AVX-512 kernel is never chosen where the OS would not preserve zmm state. AArch64:
// the kernel's HWCAP/HWCAP2 words (getauxval), which list only what the OS enables.
#pragma once

#include <string>

namespace sluice {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512dq = false;
    bool avx512_bf16 = false;
    bool avx512_vnni = false;
    bool avx512_vbmi = false;  // vpermb (byte permutes across the register)
    bool amx_bf16 = false;  // amx-tile + amx-bf16 with OS tile state (ops ask Linux for permission on use)
    // AArch64 (HWCAP names). asimd (NEON) is what the neon path needs; the others are reported, not used: the
    // kernels keep the portable path's bits, which the int8 dot products and the bf16 dot/matrix products cannot
    // give (docs/arm64.md).
    bool asimd = false;
    bool asimdhp = false;  // f16 arithmetic
    bool asimddp = false;  // sdot/udot
    bool bf16 = false;     // bfdot/bfmmla/bfcvt
    bool i8mm = false;     // smmla
    bool sve = false;

    std::string describe() const;  // e.g. "avx2 fma f16c avx512f ..."
};

// Detected once (thread-safe); all false on other processors.
const CpuFeatures& cpu_features();

}  // namespace sluice
