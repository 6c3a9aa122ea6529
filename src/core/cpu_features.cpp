// cpuid/xgetbv probing for CpuFeatures. Leaf 1 gives fma/f16c/osxsave, leaf 7 gives avx2/avx512*/amx,
// leaf 7 sub-leaf 1 gives avx512_bf16; XCR0 says whether the OS saves ymm (bits 1-2), zmm (bits 5-7) and AMX
// tiles (bits 17-18). On AArch64 Linux the HWCAP words from getauxval.
#include "core/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SLUICE_X86 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
// The bits from <asm/hwcap.h>, spelled here so an older header does not hide them.
#define SLUICE_HWCAP_ASIMD (1UL << 1)
#define SLUICE_HWCAP_ASIMDHP (1UL << 10)
#define SLUICE_HWCAP_ASIMDDP (1UL << 20)
#define SLUICE_HWCAP_SVE (1UL << 22)
#define SLUICE_HWCAP2_I8MM (1UL << 13)
#define SLUICE_HWCAP2_BF16 (1UL << 14)
#endif

namespace sluice {

namespace {

#ifdef SLUICE_X86
uint64_t read_xcr0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
    CpuFeatures f;
#ifdef SLUICE_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = read_xcr0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;
    const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
    if (!os_ymm) return f;
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.fma = fma;
    f.f16c = f16c;
    f.avx2 = (b >> 5) & 1;
    if (os_zmm) {
        f.avx512f = (b >> 16) & 1;
        f.avx512dq = (b >> 17) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        f.avx512_vnni = (c >> 11) & 1;
        f.avx512_vbmi = (c >> 1) & 1;
    }
    // AMX needs the OS to save tile state too (XCR0 bits 17-18); Linux also wants a per-process request.
    f.amx_bf16 = os_zmm && (xcr0 & 0x60000) == 0x60000 && ((d >> 22) & 1) && ((d >> 24) & 1);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    if (os_zmm) f.avx512_bf16 = (a1 >> 5) & 1;
#elif defined(__aarch64__) && defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f.asimd = hw & SLUICE_HWCAP_ASIMD;
    f.asimdhp = hw & SLUICE_HWCAP_ASIMDHP;
    f.asimddp = hw & SLUICE_HWCAP_ASIMDDP;
    f.sve = hw & SLUICE_HWCAP_SVE;
    f.i8mm = hw2 & SLUICE_HWCAP2_I8MM;
    f.bf16 = hw2 & SLUICE_HWCAP2_BF16;
#elif defined(__aarch64__)
    f.asimd = true;  // every AArch64 ABI (Apple's, Windows') requires Advanced SIMD
#endif
    return f;
}

}  // namespace

std::string CpuFeatures::describe() const {
    std::string s;
    auto add = [&](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ' ';
        s += name;
    };
    add(avx2, "avx2");
    add(fma, "fma");
    add(f16c, "f16c");
    add(avx512f, "avx512f");
    add(avx512bw, "avx512bw");
    add(avx512vl, "avx512vl");
    add(avx512dq, "avx512dq");
    add(avx512_bf16, "avx512_bf16");
    add(avx512_vnni, "avx512_vnni");
    add(avx512_vbmi, "avx512_vbmi");
    add(amx_bf16, "amx_bf16");
    add(asimd, "asimd");
    add(asimdhp, "asimdhp");
    add(asimddp, "asimddp");
    add(bf16, "bf16");
    add(i8mm, "i8mm");
    add(sve, "sve");
    return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

}  // namespace sluice
