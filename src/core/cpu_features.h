// x86 CPU features that select kernel paths at run time, read once with cpuid and checked against the
// registers the OS saves (xgetbv), so an AVX-512 kernel is never chosen where the OS would not preserve zmm state.
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

    std::string describe() const;  // e.g. "avx2 fma f16c avx512f ..."
};

// Detected once (thread-safe); all false on non-x86 builds.
const CpuFeatures& cpu_features();

}  // namespace sluice
