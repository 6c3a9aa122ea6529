// The chunk hook of the few-row fused kernels (x86/avx2_matvec.cpp, x86/avx512_fused.h): a decoder with
// begin_chunk(c0) -> bool prepares each kChunkCols-column chunk before the column loop and says whether the chunk
// takes its fast form (load<true>; else load<false>). The loop is compiled once per form, so no per-block test sits
// inside it: given one, GCC moved the code loads into general registers (whose broadcasts take the shuffle port the
// lookups need) and kept the accumulators on the stack. Unnamed namespace: each ISA's file compiles its own copy.
#pragma once

#include <concepts>
#include <cstdint>

namespace sluice::ops::cpu {
namespace {

// V: the ISA's vector type (__m256, __m512).
template <class D, class V>
concept ChunkedDecoder = requires(D& d, int64_t c, V* v) {
    { d.begin_chunk(c) } -> std::same_as<bool>;
    d.template load<true>(c, v);
};

// Prepares the chunk at c0 in each of the n decoders (every one, whatever the others say); true when all of them
// take the fast form. Decoders without the hook take the one form there is (false).
template <class V, class D>
bool begin_chunks(D* dec, int n, int64_t c0) {
    if constexpr (!ChunkedDecoder<D, V>) {
        return false;
    } else {
        bool fast = true;
        for (int j = 0; j < n; ++j) fast = dec[j].begin_chunk(c0) && fast;
        return fast;
    }
}

// p + n_bytes, for prefetching only: a decoder prefetches the same row of the next row group, which past a weight's
// last group points beyond it; a prefetch may (it never faults), so the address is computed as an integer.
inline const uint8_t* prefetch_address(const uint8_t* p, uint64_t n_bytes) {
    return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) + n_bytes);
}

// Columns [c, c + width) of decoder d in the chunk's form.
template <bool kFast, class V, class D>
inline void load_form(D& d, int64_t c, V* v) {
    if constexpr (ChunkedDecoder<D, V>)
        d.template load<kFast>(c, v);
    else
        d.load(c, v);
}

}  // namespace
}  // namespace sluice::ops::cpu
