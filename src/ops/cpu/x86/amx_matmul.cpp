// AMX-BF16 matmul for BF16, MXFP4 and INT4_G32 weights, used for every n so a row's output never depends on the
// batch. Exactness: the tile unit multiplies bf16 pairs exactly and accumulates in f32, so both operands are made
// exact bf16 values: weights are (BF16 as is; MXFP4 E2M1 times a power of two; INT4 q * scale rounded to bf16, which
// is the format's value: see ref::dequantize_range),
// and each f32 activation is split by truncation into hi + mid + lo bf16 parts that sum to it exactly, held in
// three B-tile columns whose f32 sums are added at the end. Subnormal parts are flushed by the hardware, so
// products below ~2^-110 are lost (far under the f32 rounding of any real activation). Per output element the
// order is fixed: one f32 accumulator per (row, activation part), fed every 32-column k-tile in order, whatever n,
// the thread split or the tile a row lands in. Needs amx-tile/amx-bf16 +
// avx512-bf16 and Linux's XTILEDATA permission.
// GCC 12 warns about the _mm512_undefined_* inside its own intrinsic headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "ops/cpu/kernels.h"
#include "ops/reference/dequantize_detail.h"

namespace sluice::ops::cpu::amx {

namespace {

constexpr int64_t kPanelRows = 16;     // weight rows per A tile
constexpr int64_t kBlockCols = 32;     // columns per tile product (one MXFP4/INT4 scale block)
constexpr int64_t kTileCols = 16;      // B-tile columns: each input takes 3 (hi, mid, lo), packed densely
// Panels sharing each B tile load (one C tile each, tmm4 + p; up to 4 fit). 4 halves the B traffic again but its
// two decode buffers no longer fit in L1 at a useful chunk size, which cost more than it saved here.
constexpr int64_t kSetPanels = 2;
constexpr int64_t kChunkBlocks = 16;  // most k-tiles a decoder is asked for at once
constexpr int64_t kTileBytes = 1024;
// B tiles of a column range (see matmul_panels), for the 2 MB L2 of every AMX core so far: all columns in one range
// while their B tiles fit kWholeRangeBytes, else equal ranges of at most kBRangeBytes. (Was 512 KB, with a short
// last range: 2 threads from DRAM, 2048 x 7168 MXFP4, now 16 rows +12%, 32 +7%, 64 +7%, 128 +14%.)
constexpr int64_t kWholeRangeBytes = 1536 << 10, kBRangeBytes = 1152 << 10;
constexpr int64_t kPrefetchChunks = 2;  // decoders prefetch each row this many chunks ahead (the hardware
                                        // prefetchers lose track of 32 rows read a few lines at a time)

constexpr float kInt4Table[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Thread-local buffer grown on demand (no std::vector here: see kernels.h).
struct Buffer {
    uint8_t* p = nullptr;
    size_t bytes = 0;
    uint8_t* get(size_t need) {
        if (need > bytes) {
            std::free(p);
            bytes = (need + 4095) / 4096 * 4096;
            p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
            if (!p) {
                bytes = 0;
                throw std::bad_alloc();
            }
            // NaN everywhere: bytes a kernel leaves unwritten must never reach an output (see build_xpanel), and
            // if they did, every test would see it.
            std::memset(p, 0xFF, bytes);
        }
        return p;
    }
    ~Buffer() { std::free(p); }
};
thread_local Buffer t_xpanel, t_abuf, t_cbuf;
struct XpanelKey {  // what t_xpanel holds: the packing of x for one ops::matmul call (call 0: none)
    uint64_t call = 0;
    const float* x = nullptr;
    int64_t n = 0, cols = 0, width = 0;
    bool paired = false;
    bool operator==(const XpanelKey&) const = default;
};
thread_local XpanelKey t_xpanel_key;

inline float bits_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
inline float e8m0(uint8_t v) { return bits_f32(v == 0 ? 0x00400000u : v == 0xFF ? 0x7fc00000u : uint32_t(v) << 23); }
inline uint16_t rne_bf16(float f) {  // finite f: round to nearest even bf16 (core/dtype.h's, kept local: kernels.h)
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// Column of word j (0..31) of k-tile t. Natural order: 32t + j. Paired order (nibble formats): tiles 2P and 2P+1
// hold the even and odd columns of the 64 columns of scale blocks 2P and 2P+1 (the low and high nibbles of those
// 32 bytes), so a decoder turns 32 bytes into two tiles with no shuffling; with an odd block count the last pair's
// missing half is zero on both sides.
inline int64_t ktiles(int64_t cols, bool paired) {
    const int64_t kbs = cols / kBlockCols;
    return paired ? (kbs + 1) / 2 * 2 : kbs;
}

// Transposes 16 vectors of 16 dwords in place: afterwards r[k] holds dword k of every input vector, in order.
inline void transpose16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
            t[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xDD);
        }
    for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xDD);
    }
}

// The three B-tile columns of one input for k-tile t: dword kp of out[part] is the bf16 pair (part of x at word
// 2kp, part of x at word 2kp + 1), the parts being hi, mid and lo.
struct XColumns {
    __m512i odd, ev, od, top;
    XColumns() {
        alignas(64) uint16_t odd_words[32];
        alignas(64) int32_t even_floats[16], odd_floats[16];
        for (int w = 0; w < 32; ++w) odd_words[w] = uint16_t(2 * w + 1);
        for (int r = 0; r < 16; ++r) {
            even_floats[r] = 2 * r;
            odd_floats[r] = 2 * r + 1;
        }
        odd = _mm512_load_si512(odd_words);
        ev = _mm512_load_si512(even_floats);
        od = _mm512_load_si512(odd_floats);
        top = _mm512_set1_epi32(int(0xFFFF0000u));
    }
    [[gnu::always_inline]] void get(const float* xi, int64_t cols, bool paired, int64_t t, __m512i out[3]) const {
        __m512 v[2];  // the tile's 32 x values in word order
        if (!paired) {
            v[0] = _mm512_loadu_ps(xi + t * kBlockCols);
            v[1] = _mm512_loadu_ps(xi + t * kBlockCols + 16);
        } else {
            const int64_t c0 = (t / 2) * 64;
            __m512 q[4];
            for (int h = 0; h < 4; ++h) {
                const int64_t c = c0 + 16 * h;
                q[h] = c < cols ? _mm512_loadu_ps(xi + c) : _mm512_setzero_ps();
            }
            const __m512i sel = t % 2 ? od : ev;
            v[0] = _mm512_permutex2var_ps(q[0], sel, q[1]);
            v[1] = _mm512_permutex2var_ps(q[2], sel, q[3]);
        }
        __m512 hi[2], mid[2], lo[2];
        for (int h = 0; h < 2; ++h) {
            hi[h] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v[h]), top));
            // x - hi is exact; Inf/NaN keep everything in hi.
            const __mmask16 finite = __mmask16(~_mm512_fpclass_ps_mask(v[h], 0x99));
            const __m512 r = _mm512_maskz_sub_ps(finite, v[h], hi[h]);
            mid[h] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r), top));
            lo[h] = _mm512_sub_ps(r, mid[h]);
        }
        const __m512 parts[3][2] = {{hi[0], hi[1]}, {mid[0], mid[1]}, {lo[0], lo[1]}};
        for (int p = 0; p < 3; ++p)
            out[p] = _mm512_permutex2var_epi16(_mm512_castps_si512(parts[p][0]), odd, _mm512_castps_si512(parts[p][1]));
    }
};

// Activations as B tiles. Column 3i + part of the whole panel is part (hi, mid, lo) of input i, and tile (g, t) holds
// columns [16g, 16g + 16) of k-tile t: its row kp, column j is the bf16 pair (part of x at word 2kp, part of x at
// word 2kp + 1) of column 16g + j. An input's three columns may fall in two groups. Tiles are `width` columns wide:
// 3n for n <= 5 (so one input reads 192-byte B tiles that stay in L1), each input's columns scattered into place;
// or 16, where a group's columns are transposed into whole 64-byte rows (scattering them was ~9% of a 32-input
// matmul). Packing the columns densely needs ceil(3n / 16) groups: 6 products per weight tile at 32 inputs, not 7
// as with five inputs per group.
void build_xpanel(const float* x, int64_t n, int64_t cols, bool paired, int64_t width, uint32_t* panel) {
    static const XColumns xc;
    const int64_t kts = ktiles(cols, paired);
    if (width < 16) {
        alignas(64) int32_t row_offsets[16];
        for (int r = 0; r < 16; ++r) row_offsets[r] = int32_t(width * r);
        const __m512i rows = _mm512_load_si512(row_offsets);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t t = 0; t < kts; ++t) {
                __m512i c[3];
                xc.get(x + i * cols, cols, paired, t, c);
                uint32_t* tile = panel + t * 16 * width + 3 * i;
                for (int p = 0; p < 3; ++p) _mm512_i32scatter_epi32(tile + p, rows, c[p], 4);
            }
        return;
    }
    // Per k-tile and group, the three columns of each input the group touches (at most 7, an input straddling two
    // groups is done for each) into a scratch that stays in L1, then the group's 16 transposed. (The same through
    // a called function, once per column, was ~9% of a 32-input matmul; all 3n columns of a k-tile at once no
    // longer fit in L1 at a few hundred inputs.)
    constexpr int64_t kMostInputs = kTileCols / 3 + 2;
    __m512i c[3 * kMostInputs];
    for (int64_t g = 0; g * kTileCols < 3 * n; ++g) {
        const int64_t i0 = g * kTileCols / 3, i1e = (g * kTileCols + kTileCols + 2) / 3;
        const int64_t i1 = i1e < n ? i1e : n, skip = g * kTileCols - 3 * i0;  // columns of input i0 in group g - 1
        for (int64_t j = 3 * (i1 - i0); j < 3 * kMostInputs; ++j) c[j] = _mm512_setzero_si512();
        for (int64_t t = 0; t < kts; ++t) {
            for (int64_t i = i0; i < i1; ++i) xc.get(x + i * cols, cols, paired, t, c + 3 * (i - i0));
            __m512i r[kTileCols];
            for (int64_t j = 0; j < kTileCols; ++j) r[j] = c[skip + j];
            transpose16x16(r);
            uint32_t* tile = panel + (g * kts + t) * 256;
            for (int kp = 0; kp < 16; ++kp) _mm512_store_si512(tile + kp * 16, r[kp]);
        }
    }
}

// Decoders write A tiles for rows [r, r + mrows) and k-tiles [t0, t0 + tc) (t0 even): abuf[(t - t0) * kParts +
// part] is a 16 x 32 bf16 tile (rows past mrows are left as they are; their outputs are never read).

// Prefetches `bytes` of a row from p into L1 (past the row's end it reaches the next row, also needed soon), and
// the line of scales at s.
inline void prefetch_row(const uint8_t* p, int64_t bytes, const uint8_t* s) {
    for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
    if (s) _mm_prefetch(reinterpret_cast<const char*>(s), _MM_HINT_T0);
}

// 32 bytes of a pair of blocks (fewer at the end of a row) as 32 words.
inline __m512i pair_bytes(const uint8_t* q, int64_t bytes) {
    if (bytes >= 32) return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(__mmask32((1u << bytes) - 1u), q));
}

// Byte indices for the table lookups of decode_pair. A pair table's word j = 2v + b sits at bytes 2j and 2j + 1, so a
// nibble v of block b becomes index bytes 4v + 2b and 4v + 2b + 1 of one word, looked up by vpermb: vpermw takes
// ports 0 and 5 on Sapphire Rapids, vpermb port 5 only (one-row MXFP4: ~12% faster, same bits).
struct PairIndex {
    __m512i dup;  // byte i: i / 2 (each source byte into both bytes of its word)
    __m512i c3c;  // 0x3C3C words: four times a nibble, in both bytes
    __m512i cb;   // words 0x0100 (block 0, the lower 16) or 0x0302 (block 1): + 2b, and + 1 in the high byte
    PairIndex() {
        alignas(64) uint8_t d[64];
        alignas(64) uint16_t c[32];
        for (int i = 0; i < 64; ++i) d[i] = uint8_t(i / 2);
        for (int w = 0; w < 32; ++w) c[w] = w < 16 ? 0x0100 : 0x0302;
        dup = _mm512_load_si512(d);
        c3c = _mm512_set1_epi16(0x3C3C);
        cb = _mm512_load_si512(c);
    }
};

// The fast paths of the nibble decoders: the 32 bytes of a pair of blocks at src become k-tiles 2P (low nibbles) and
// 2P + 1 (high nibbles) of one row, at dst and dst + kTileBytes, through a 32-word table whose word 2v + b is code
// v of block b (paired order, see ktiles).
inline void decode_pair(const uint8_t* src, __m512i tab, __m512i dup, __m512i c3c, __m512i cb, uint8_t* dst) {
    const __m512i v = _mm512_permutexvar_epi8(
        dup, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
    const __m512i il = _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 2), c3c, cb, 0xEA);
    const __m512i ih = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 2), c3c, cb, 0xEA);
    _mm512_store_si512(dst, _mm512_permutexvar_epi8(il, tab));
    _mm512_store_si512(dst + kTileBytes, _mm512_permutexvar_epi8(ih, tab));
}

// True if every scale (one T per 32-column block, as unsigned bits) of rows [r, r + rows), blocks [b0, b1) is in
// [lo, hi]: one min/max pass decides a nibble decoder's route for a whole set.
template <class T>
bool scales_within(const Weight& w, int64_t r, int64_t rows, int64_t b0, int64_t b1, T lo_ok, T hi_ok) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2);
    constexpr int64_t kLanes = 64 / int64_t(sizeof(T));
    const int64_t nb = w.cols / kBlockCols;
    b1 = b1 < nb ? b1 : nb;
    __m512i lo = _mm512_set1_epi8(char(0xFF)), hi = _mm512_setzero_si512();
    for (int64_t m = 0; m < rows; ++m) {
        const uint8_t* s = w.scales + uint64_t(r + m) * uint64_t(nb) * sizeof(T);
        for (int64_t b = b0; b < b1; b += kLanes) {
            const uint64_t mk = b1 - b >= kLanes ? ~uint64_t(0) : (uint64_t(1) << (b1 - b)) - 1;
            if constexpr (sizeof(T) == 1) {
                const __m512i v = _mm512_maskz_loadu_epi8(mk, s + b);
                lo = _mm512_mask_min_epu8(lo, mk, lo, v);
                hi = _mm512_mask_max_epu8(hi, mk, hi, v);
            } else {
                const __m512i v = _mm512_maskz_loadu_epi16(__mmask32(mk), s + 2 * b);
                lo = _mm512_mask_min_epu16(lo, __mmask32(mk), lo, v);
                hi = _mm512_mask_max_epu16(hi, __mmask32(mk), hi, v);
            }
        }
    }
    if constexpr (sizeof(T) == 1)
        return !_mm512_cmplt_epu8_mask(lo, _mm512_set1_epi8(char(lo_ok))) &&
               !_mm512_cmpgt_epu8_mask(hi, _mm512_set1_epi8(char(hi_ok)));
    else
        return !_mm512_cmplt_epu16_mask(lo, _mm512_set1_epi16(short(lo_ok))) &&
               !_mm512_cmpgt_epu16_mask(hi, _mm512_set1_epi16(short(hi_ok)));
}

// The nibble decoders' tables hold their non-zero entries plus this, so that a pair's exponent offsets are just
// its scales' exponents shifted into place (mod 2^16 per word, like the adds).
constexpr uint16_t kTermBias = 129 << 7;

// A nibble decoder's fast path for tc k-tiles, all in whole pairs (tc even, at most 8): the chunk size becomes a
// template argument (a run-time count made the row pass ~10% slower).
template <class D>
void decode_pairs_fast(const Weight& w, int64_t r, int64_t mrows, int64_t t0, int64_t tc, uint8_t* abuf,
                       const typename D::Consts& k) {
    // tc is even and at most the chunk size, so these cases are all there are. (Raising kChunkTiles without adding
    // cases would decode 2 tiles of a larger chunk and leave the rest stale.)
    static_assert(D::kChunkTiles <= 8, "add cases for larger chunks");
    switch (tc) {
        case 8: return D::template decode_fast<8>(w, r, mrows, t0, abuf, k);
        case 6: return D::template decode_fast<6>(w, r, mrows, t0, abuf, k);
        case 4: return D::template decode_fast<4>(w, r, mrows, t0, abuf, k);
        default: return D::template decode_fast<2>(w, r, mrows, t0, abuf, k);  // tc == 2
    }
}

struct MxDecoder {  // MXFP4: E2M1 value times the E8M0 scale is an exact bf16
    static int64_t scale_row_bytes(const Weight& w) { return w.cols / kBlockCols; }
    static constexpr int kParts = 1;
    static constexpr bool kPaired = true;
    static constexpr int64_t kChunkTiles = 8;
    // Table word 2v + b is E2M1 code v of block b of the pair, with the sign bit of the non-zero entries flipped
    // (see decode_fast); the scale 2^(e-127) is added to the bf16 exponent of the non-zero entries, exact while e
    // is in [2, 252]; other scales take the f32 route (same values).
    struct Consts {
        __m512i table, c1e, blk, interleave;
        __mmask16 nonzero_dwords;  // codes (dword v: words 2v, 2v + 1) that are not zero
        PairIndex index;
        Consts() {
            alignas(64) uint16_t tab[32], il[32];
            __mmask16 nz = 0;
            for (int k = 0; k < 32; ++k) {
                uint32_t bits;
                std::memcpy(&bits, &ref::kE2M1Values[k / 2], 4);
                const bool zero = (k / 2) % 8 == 0;
                tab[k] = uint16_t(zero ? bits >> 16 : ((bits >> 16) ^ 0x8000u) + kTermBias);
                if (!zero) nz |= __mmask16(1u << (k / 2));
                il[k] = uint16_t(16 * (k % 2) + k / 2);
            }
            table = _mm512_load_si512(tab);
            interleave = _mm512_load_si512(il);
            nonzero_dwords = nz;
            c1e = _mm512_set1_epi16(0x1E);
            blk = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
        }
    };
    // True if every scale of rows [r, r + rows), blocks [b0, b1) is in the fast path's range [2, 252].
    static bool scales_fast(const Weight& w, int64_t r, int64_t rows, int64_t b0, int64_t b1) {
        return scales_within<uint8_t>(w, r, rows, b0, b1, 2, 252);
    }
    // Whole pairs of blocks whose scales scales_fast accepted. A pair's exponent offsets come from its two scale
    // bytes by one pdep: s << 7 in each word. (s + 129) << 7 is (s - 127) << 7 plus 0x8000, and the tables' non-zero
    // entries hold the 0x8000 (as a flipped sign bit) and 129 << 7 already. (A per-chunk vector pass over all 16
    // rows' scales, with its range checks, cost ~10% at one row.)
    template <int64_t TC>
    static void decode_fast(const Weight& w, int64_t r, int64_t mrows, int64_t t0, uint8_t* abuf, const Consts& k) {
        static_assert(TC <= kChunkTiles && TC % 2 == 0);
        const int64_t nb = w.cols / kBlockCols, row_bytes = w.cols / 2;
        const __m512i table = k.table, dup = k.index.dup, c3c = k.index.c3c, cb = k.index.cb;
        const __mmask16 nzd = k.nonzero_dwords;
        const uint8_t* s = w.scales + uint64_t(r) * uint64_t(nb) + uint64_t(t0);
        const uint8_t* src = w.data + uint64_t(r) * uint64_t(row_bytes) + uint64_t(t0) * 16;
        for (int64_t m = 0; m < mrows; ++m, src += row_bytes, s += nb) {
            prefetch_row(src + kPrefetchChunks * TC * 16, 128, nullptr);
            uint8_t* dst = abuf + m * 64;
#pragma GCC unroll 4
            for (int64_t p = 0; p < TC / 2; ++p) {
                uint16_t x;  // the pair's scales
                std::memcpy(&x, s + 2 * p, 2);
                const uint32_t adj = _pdep_u32(x, 0x7F807F80u);
                // The zero codes are whole dwords (v = 0, 8): a zero-masked broadcast spares the copy of `table`
                // that a merge-masked add needs.
                const __m512i tab = _mm512_add_epi16(table, _mm512_maskz_set1_epi32(nzd, int(adj)));
                decode_pair(src + p * 32, tab, dup, c3c, cb, dst + 2 * p * kTileBytes);
            }
        }
    }
    static void decode(const Weight& w, int64_t r, int64_t mrows, int64_t t0, int64_t tc, uint8_t* abuf, bool fast) {
        static const Consts k;
        const int64_t nb = w.cols / kBlockCols, row_bytes = w.cols / 2;
        if (fast && nb - t0 >= tc) return decode_pairs_fast<MxDecoder>(w, r, mrows, t0, tc, abuf, k);
        // The f32 route (same values): a last half pair, or scales whose exponent add would leave bf16's range.
        const __m512 e2m1 = _mm512_loadu_ps(ref::kE2M1Values);
        const __m512i c1e = k.c1e, blk = k.blk;
        for (int64_t m = 0; m < mrows; ++m) {
            const uint8_t* q = w.data + uint64_t(r + m) * uint64_t(row_bytes);
            const uint8_t* s = w.scales + uint64_t(r + m) * uint64_t(nb) + t0;
            uint8_t* dst = abuf + m * 64;
            prefetch_row(q + (t0 + kPrefetchChunks * tc) * 16, tc * 16, s + kPrefetchChunks * tc);
            for (int64_t t = t0; t < t0 + tc; t += 2) {
                const __m512 f0 = _mm512_mul_ps(e2m1, _mm512_set1_ps(e8m0(s[t - t0])));
                const __m512 f1 = t + 1 < nb ? _mm512_mul_ps(e2m1, _mm512_set1_ps(e8m0(s[t - t0 + 1]))) : e2m1;
                const __m512i tab = _mm512_permutexvar_epi16(k.interleave, (__m512i)_mm512_cvtne2ps_pbh(f1, f0));
                const __m512i v = pair_bytes(q + t * 16, row_bytes - t * 16);
                const __m512i il = _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 1), c1e, blk, 0xEA);
                const __m512i ih = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 3), c1e, blk, 0xEA);
                _mm512_store_si512(dst + (t - t0) * kTileBytes, _mm512_permutexvar_epi16(il, tab));
                _mm512_store_si512(dst + (t - t0 + 1) * kTileBytes, _mm512_permutexvar_epi16(ih, tab));
            }
        }
    }
};

struct Int4Decoder {  // INT4_G32: q * bf16 scale rounded to bf16 (the format's value) is a bf16 by definition
    static int64_t scale_row_bytes(const Weight& w) { return w.cols / kBlockCols * 2; }
    static constexpr int kParts = 1;
    static constexpr bool kPaired = true;
    static constexpr int64_t kChunkTiles = 8;
    // A scale is 2^(E-127) * (1 + m/128), so bf16(q * scale) is bf16(q * (1 + m/128)) with E - 127 added to its
    // exponent (exact while the result stays normal: E in [1, 251], as |q * (1 + m/128)| is in [1, 16)). Table
    // m holds bf16(q * (1 + m/128)) for the 16 codes at both words 2v and 2v + 1, so a pair's table is one blend of
    // two rows (even words from block 0's, odd from block 1's) plus one exponent add, like MXFP4's (word 2v + b:
    // code v of block b). One 8 KB table, not an even and an odd one: ~4% faster at one row from DRAM.
    struct Consts {
        alignas(64) uint16_t both[128][32];
        __mmask16 nonzero_dwords;  // codes (dword v: words 2v, 2v + 1) that are not zero
        PairIndex index;
        Consts() {
            for (int m = 0; m < 128; ++m)
                for (int v = 0; v < 16; ++v) {
                    // Nonzero entries have the sign bit flipped and 129 << 7 added (see decode_fast).
                    const uint16_t q = rne_bf16(kInt4Table[v] * (1.0f + float(m) / 128.0f));
                    const uint16_t b = uint16_t(v == 8 ? q : (q ^ 0x8000) + kTermBias);
                    both[m][2 * v] = b;
                    both[m][2 * v + 1] = b;
                }
            nonzero_dwords = __mmask16(~(1u << 8));  // code 8 is q = 0
        }
    };
    // True if every scale of rows [r, r + rows), blocks [b0, b1) is positive with E in [1, 251] (the fast path's
    // range): as bf16 bits, in [0x0080, 0x7DFF].
    static bool scales_fast(const Weight& w, int64_t r, int64_t rows, int64_t b0, int64_t b1) {
        return scales_within<uint16_t>(w, r, rows, b0, b1, 0x0080, 0x7DFF);
    }
    // Whole pairs of blocks whose scales scales_fast accepted. A pair's two bf16 scales give its table rows (the
    // mantissas) and exponent offsets E << 7 (their exponent bits, in place); (E + 129) << 7 is (E - 127) << 7 plus
    // 0x8000, and the tables' non-zero entries hold the 0x8000 (as a flipped sign bit) and 129 << 7 already.
    template <int64_t TC>
    static void decode_fast(const Weight& w, int64_t r, int64_t mrows, int64_t t0, uint8_t* abuf, const Consts& k) {
        static_assert(TC <= kChunkTiles && TC % 2 == 0);
        const int64_t nb = w.cols / kBlockCols, row_bytes = w.cols / 2;
        const __m512i dup = k.index.dup, c3c = k.index.c3c, cb = k.index.cb;
        const __mmask16 nzd = k.nonzero_dwords;
        const uint8_t* both = reinterpret_cast<const uint8_t*>(k.both);
        const __mmask32 odd_words = 0xAAAAAAAAu;
        const uint8_t* s = w.scales + (uint64_t(r) * uint64_t(nb) + uint64_t(t0)) * 2;
        const uint8_t* src = w.data + uint64_t(r) * uint64_t(row_bytes) + uint64_t(t0) * 16;
        for (int64_t m = 0; m < mrows; ++m, src += row_bytes, s += nb * 2) {
            prefetch_row(src + kPrefetchChunks * TC * 16, 128, nullptr);
            uint8_t* dst = abuf + m * 64;
#pragma GCC unroll 4
            for (int64_t p = 0; p < TC / 2; ++p) {
                uint32_t x;  // the pair's scales
                std::memcpy(&x, s + 4 * p, 4);
                const uint32_t adj = x & 0x7F807F80u;
                const __m512i row0 = _mm512_load_si512(both + ((x & 0x7Fu) << 6));  // block 0's mantissa
                const __m512i row1 = _mm512_load_si512(both + (((x >> 16) & 0x7Fu) << 6));
                __m512i tab = _mm512_mask_blend_epi16(odd_words, row0, row1);
                tab = _mm512_add_epi16(tab, _mm512_maskz_set1_epi32(nzd, int(adj)));  // as MXFP4's
                decode_pair(src + p * 32, tab, dup, c3c, cb, dst + 2 * p * kTileBytes);
            }
        }
    }
    static void decode(const Weight& w, int64_t r, int64_t mrows, int64_t t0, int64_t tc, uint8_t* abuf, bool fast) {
        static const Consts k;
        const int64_t nb = w.cols / kBlockCols, row_bytes = w.cols / 2;
        if (fast && nb - t0 >= tc) return decode_pairs_fast<Int4Decoder>(w, r, mrows, t0, tc, abuf, k);
        // The f32 route (same values): a last half pair, or scales outside the fast path's range.
        const __m512 table = _mm512_loadu_ps(kInt4Table);
        const __m512i c0f = _mm512_set1_epi16(0x0F);
        const __m512i blk = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(16), 1);
        const int64_t valid = nb - t0 < tc ? nb - t0 : tc;
        const __mmask16 vm = __mmask16((1u << valid) - 1u);
        alignas(64) float sc[kChunkBlocks];
        for (int64_t m = 0; m < mrows; ++m) {
            const uint8_t* q = w.data + uint64_t(r + m) * uint64_t(row_bytes);
            const uint8_t* s = w.scales + (uint64_t(r + m) * uint64_t(nb) + uint64_t(t0)) * 2;
            _mm512_store_ps(sc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(vm, s)), 16)));
            uint8_t* dst = abuf + m * 64;
            prefetch_row(q + (t0 + kPrefetchChunks * tc) * 16, tc * 16, s + kPrefetchChunks * tc * 2);
            for (int64_t t = 0; t < tc; t += 2) {
                // Table word v + 16b: code v of block b. q * scale is exact in f32; the conversion rounds it to
                // bf16 (nearest even) like the reference.
                const __m512 f0 = _mm512_mul_ps(table, _mm512_set1_ps(sc[t]));
                const __m512 f1 = _mm512_mul_ps(table, _mm512_set1_ps(sc[t + 1]));
                const __m512i tab = (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
                const int64_t left = row_bytes - (t0 + t) * 16;
                const __m512i v = left >= 32 ? _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                                                   reinterpret_cast<const __m256i*>(q + (t0 + t) * 16)))
                                             : pair_bytes(q + (t0 + t) * 16, left);
                const __m512i il = _mm512_ternarylogic_epi32(v, c0f, blk, 0xEA);
                const __m512i ih = _mm512_or_si512(_mm512_srli_epi16(v, 4), blk);
                _mm512_store_si512(dst + t * kTileBytes, _mm512_permutexvar_epi16(il, tab));
                _mm512_store_si512(dst + (t + 1) * kTileBytes, _mm512_permutexvar_epi16(ih, tab));
            }
        }
    }
};

// BF16 weights are A tiles as they are. With one group of inputs (n <= 5), sets of whole panels load them in place
// (rows a weight row apart) and decode only prefetches; otherwise rows are copied block by block into the L1
// buffer (zeroed past the last row). Measured on a Sapphire Rapids-class Xeon, 2 threads from DRAM, old and new
// builds alternating: in place, one row went from 15.6-16.1 to 17.4-19.8 GB/s (5 pairs), same bits.
// With many inputs each A tile is loaded once per pair of groups, and in place those strided reloads were slower
// than the copy (32 rows 5.4-6.3 against 6.2-7.0 GB/s; 512 rows 194-259 against 279-296 GFLOP/s).
struct Bf16Decoder {
    static int64_t scale_row_bytes(const Weight&) { return 0; }
    static constexpr int kParts = 1;
    static constexpr bool kPaired = false;
    static constexpr int64_t kChunkTiles = 8;
    static bool scales_fast(const Weight&, int64_t, int64_t, int64_t, int64_t) { return true; }
    // Row r's bytes from k-tile kb0 on.
    static const uint8_t* row(const Weight& w, int64_t r, int64_t kb0) {
        return w.data + (uint64_t(r) * uint64_t(w.cols) + uint64_t(kb0 * kBlockCols)) * 2;
    }
    // What decode does for the prefetchers, without the copy (the products read these rows in place).
    static void prefetch(const Weight& w, int64_t r, int64_t mrows, int64_t kb0, int64_t kc) {
        for (int64_t m = 0; m < mrows; ++m)
            prefetch_row(row(w, r + m, kb0) + kPrefetchChunks * kc * 64, kc * 64, nullptr);
    }
    static void decode(const Weight& w, int64_t r, int64_t mrows, int64_t kb0, int64_t kc, uint8_t* abuf, bool) {
        for (int64_t m = 0; m < mrows; ++m) {
            const uint8_t* p = row(w, r + m, kb0);
            prefetch_row(p + kPrefetchChunks * kc * 64, kc * 64, nullptr);
            for (int64_t b = 0; b < kc; ++b)
                _mm512_store_si512(abuf + b * kTileBytes + m * 64, _mm512_loadu_si512(p + b * 64));
        }
    }
};

// Tiles: A (decoded weights) alternates between tmm0 and tmm1, B (activations) between tmm2 and tmm3 by k-tile
// parity, so a load never waits for the product still reading its tile; panel p of a set accumulates in tmm4 + p
// (several independent accumulation chains, so the products' latency overlaps). Each output element has ONE f32
// accumulator, fed every (k-tile, part) product in order, whatever n, the set a row lands in, or whether the C
// tile stays in a register (one group of inputs) or goes through memory between chunks (several groups).
// Tile numbers must be literals (GCC's tile intrinsics paste them into the asm), hence the macros.
#define SLUICE_AMX_PANEL(p, atile, ctile, btile)                                                   \
    if (np > (p)) {                                                                                \
        if constexpr (kInPlace)                                                                    \
            _tile_loadd(atile, a + (p) * kPanelRows * stride + kt * 64, stride);                   \
        else                                                                                       \
            _tile_loadd(atile, a + (((p) * kc + kt) * D::kParts + part) * kTileBytes, 64);         \
        _tile_dpbf16ps(ctile, atile, btile);                                                       \
    }

// Products of k-slices [j0, j1) (slice j: k-tile kt0 + j / kParts, part j % kParts) of the decoded chunk `a`
// for one group of inputs (B tiles at xg), accumulating into tmm4 + panel. kInPlace: `a` is the chunk's first
// column in the weight's first row of the set, rows `stride` bytes apart (BF16 only: one part).
template <class D, bool kInPlace = false>
void run_slices(const uint8_t* a, int64_t kc, int64_t np, const uint8_t* xg, int64_t bbytes, int64_t kt0, int64_t j0,
                int64_t j1, int64_t stride = 0) {
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t kt = j / D::kParts, part = j % D::kParts;
        const uint8_t* b = xg + (kt0 + kt) * bbytes;
        if ((kt0 + kt) % 2 == 0) {
            if (part == 0) _tile_loadd(2, b, bbytes / 16);
            SLUICE_AMX_PANEL(0, 0, 4, 2)
            SLUICE_AMX_PANEL(1, 1, 5, 2)
            SLUICE_AMX_PANEL(2, 0, 6, 2)
            SLUICE_AMX_PANEL(3, 1, 7, 2)
        } else {
            if (part == 0) _tile_loadd(3, b, bbytes / 16);
            SLUICE_AMX_PANEL(0, 0, 4, 3)
            SLUICE_AMX_PANEL(1, 1, 5, 3)
            SLUICE_AMX_PANEL(2, 0, 6, 3)
            SLUICE_AMX_PANEL(3, 1, 7, 3)
        }
    }
}
#undef SLUICE_AMX_PANEL

// The same for two groups of inputs at once (B tiles at xg in tmm2 and at xg2 in tmm3; C tiles tmm4 + p and tmm6 + p),
// so that each A tile load serves two groups: with several groups the tile loads, not the products, bound the
// kernel (an A and half a B tile per product before, an A and a B tile per two products now). The B tiles are no
// longer double-buffered; measured, the loads saved count for more.
template <class D>
void run_slices_2g(const uint8_t* a, int64_t kc, int64_t np, const uint8_t* xg, const uint8_t* xg2, int64_t bbytes,
                   int64_t kt0, int64_t j0, int64_t j1) {
    static_assert(kSetPanels <= 2, "C tiles tmm4-7 hold two panels of two groups");
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t kt = j / D::kParts, part = j % D::kParts;
        if (part == 0) {
            _tile_loadd(2, xg + (kt0 + kt) * bbytes, bbytes / 16);
            _tile_loadd(3, xg2 + (kt0 + kt) * bbytes, bbytes / 16);
        }
        _tile_loadd(0, a + (kt * D::kParts + part) * kTileBytes, 64);
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(6, 0, 3);
        if (np > 1) {
            _tile_loadd(1, a + ((kc + kt) * D::kParts + part) * kTileBytes, 64);
            _tile_dpbf16ps(5, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
        }
    }
}

// C tiles of one group: panel p at cb + 256 p, in tmm4 + p; with cb2, a second group's at cb2 + 256 p, in tmm6 + p.
void load_c(int64_t np, bool zero, const float* cb, const float* cb2 = nullptr) {
#define SLUICE_AMX_C(p, t, base)                   \
    if (np > (p)) {                                \
        if (zero)                                  \
            _tile_zero(t);                         \
        else                                       \
            _tile_loadd(t, base + (p) * 256, 64);  \
    }
    if (!cb2) {
        SLUICE_AMX_C(0, 4, cb) SLUICE_AMX_C(1, 5, cb) SLUICE_AMX_C(2, 6, cb) SLUICE_AMX_C(3, 7, cb)
    } else {
        SLUICE_AMX_C(0, 4, cb) SLUICE_AMX_C(1, 5, cb) SLUICE_AMX_C(0, 6, cb2) SLUICE_AMX_C(1, 7, cb2)
    }
#undef SLUICE_AMX_C
}

void store_c(int64_t np, float* cb, float* cb2 = nullptr) {
#define SLUICE_AMX_C(p, t, base) \
    if (np > (p)) _tile_stored(t, base + (p) * 256, 64);
    if (!cb2) {
        SLUICE_AMX_C(0, 4, cb) SLUICE_AMX_C(1, 5, cb) SLUICE_AMX_C(2, 6, cb) SLUICE_AMX_C(3, 7, cb)
    } else {
        SLUICE_AMX_C(0, 4, cb) SLUICE_AMX_C(1, 5, cb) SLUICE_AMX_C(0, 6, cb2) SLUICE_AMX_C(1, 7, cb2)
    }
#undef SLUICE_AMX_C
}

// Rows go in sets of up to kSetPanels 16-row panels (each B tile load serves the whole set: batched calls read
// the activations from L2 half as often) and columns in chunks of kc k-tiles, decoded into two L1 buffers in
// turn: chunk c is decoded panel by panel with the products of chunk c - 1 issued in between, so the tile loads
// read A tiles stored long before (they wait for recent stores to drain) and the tile unit overlaps the decoder.
// With several groups of inputs, columns also go in ranges whose B tiles (all groups) fit the L2, and every
// set of the call is done for one range before the next: each set reads every B tile, so they must stay in L2
// while the weights stream past (the C tiles of every set wait in memory between ranges).
// Measured, no better (one row unless said; single thread with weights in L2, or 2 threads from DRAM): products
// issued between decoded rows (slower, at 1 row much slower), three decode buffers instead of two, four A tile
// registers loaded in one burst, decode buffers staggered against 4K aliasing, scale terms precomputed per 32
// k-tiles, 8-tile chunks at n <= 8, 4-panel sets, software prefetch of the next set's weights (slower) or of the
// next B tiles at 32 rows. Also, at one row from DRAM: an extra prefetcht1 per row a few chunks further ahead; chunks
// of 2 or 6 k-tiles; a prefetch distance of 3 chunks; sets of alternate rows (one weight stream per 4 KB page);
// weights laid out chunk by chunk (one sequential stream: slower); scale terms made per set and broadcast from
// memory (MXFP4 +5% in L2, nothing from DRAM; INT4 slower). And weights as the B operand with the activations as
// a 3-row A: the product takes ~11 cycles instead of ~18, but each 16-row B tile load takes ~18.
// At one row in L2 (~4 GHz): the decode alone ~50 ns per KB of MXFP4, tile loads alone ~23 (an A tile load is ~8
// vector uops on ports 0/5, a 12-byte-row B tile load ~9.5), products alone ~19; together ~70-76. Also no better
// there: MXFP4 tables precomputed per scale and blended per pair (7-8 port 0/5 uops a pair instead of 9: same or
// slower in L2 and from DRAM, so those uops are not the bound); vpermi2b on two per-block tables (2 uops on port 5);
// sets of 3 or 4 panels at 4-tile chunks (fewer B tile loads, 3-15% slower); two rows per decode loop iteration;
// INT4 table-row offsets by pdep and scale terms by a broadcast AND from memory (within noise); weights repacked
// so a set's chunks form one sequential stream, prefetched 0.5-8 KB ahead (no better: 20.0 vs 19.7 GB/s at best).
// The decode alone, data in L1: without its stores ~15% faster, with constant scales (no table work) ~20%. One
// thread from DRAM (huge pages) runs at ~80% of its L2 speed for MXFP4 and ~94% for INT4: INT4 is compute-bound.
template <class D, int64_t kc = D::kChunkTiles>
void matmul_panels(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
    static_assert(kc <= D::kChunkTiles && kc <= kChunkBlocks && kc % 2 == 0);
    constexpr int64_t kSetRows = kSetPanels * kPanelRows, kSetFloatsPerGroup = kSetPanels * 256;
    const int64_t cols = w.cols, kbs = ktiles(cols, D::kPaired), groups = (3 * n + kTileCols - 1) / kTileCols;
    const int64_t width = 3 * n < kTileCols ? 3 * n : kTileCols, bbytes = 64 * width;
    const XpanelKey key{t_matmul_call, x, n, cols, width, D::kPaired};
    const bool reuse = key.call != 0 && key == t_xpanel_key;  // a later range of the same ops::matmul call
    if (!reuse) t_xpanel_key = XpanelKey{};
    uint8_t* xp = t_xpanel.get(size_t(groups * kbs * bbytes));
    if (!reuse) {
        build_xpanel(x, n, cols, D::kPaired, width, reinterpret_cast<uint32_t*>(xp));
        t_xpanel_key = key;
    }
    constexpr bool kInPlaceFormat = std::is_same_v<D, Bf16Decoder>;
    const int64_t chunk_bytes = kSetPanels * kc * D::kParts * kTileBytes;
    uint8_t* abuf = t_abuf.get(size_t(2 * chunk_bytes));
    // With one or two groups of inputs (n <= 10) the set's C tiles stay in registers (tmm4-7) for the whole set.
    const bool resident = groups <= 2;
    const int64_t nsets = (r1 - r0 + kSetRows - 1) / kSetRows, set_floats = groups * kSetFloatsPerGroup;
    float* cbuf = reinterpret_cast<float*>(t_cbuf.get(size_t((resident ? 1 : nsets) * set_floats * 4)));
    int64_t range_tiles = kbs;
    if (!resident) {
        // Most k-tiles a range may take, in whole chunks (at least one); the ranges then share the columns evenly,
        // which rounded up to whole chunks stays within that.
        const int64_t fit = kBRangeBytes / (groups * bbytes) / kc * kc, most = fit < kc ? kc : fit;
        const int64_t ranges = groups * bbytes * kbs <= kWholeRangeBytes ? 1 : (kbs + most - 1) / most;
        range_tiles = ((kbs + ranges - 1) / ranges + kc - 1) / kc * kc;
    }

    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = uint16_t(t < 2 ? 64 : 4 * width);
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    for (int64_t k0 = 0; k0 < kbs; k0 += range_tiles) {
        const int64_t k1 = kbs - k0 < range_tiles ? kbs : k0 + range_tiles;
        const int64_t nchunks = (k1 - k0 + kc - 1) / kc;
        for (int64_t s = 0; s < nsets; ++s) {
            const int64_t r = r0 + s * kSetRows, set_rows = r1 - r < kSetRows ? r1 - r : kSetRows;
            const int64_t np = (set_rows + kPanelRows - 1) / kPanelRows;
            float* cset = cbuf + (resident ? 0 : s * set_floats);
            if (set_rows % kPanelRows) std::memset(abuf, 0, size_t(2 * chunk_bytes));  // rows past the end stay 0
            if (resident) load_c(np, true, cset, groups == 2 ? cset + kSetFloatsPerGroup : nullptr);
            const bool fast = D::scales_fast(w, r, set_rows, k0, k1);
            // One group of inputs (n <= 5) and whole panels: BF16 A tiles load in place (see Bf16Decoder).
            const bool in_place = kInPlaceFormat && groups == 1 && set_rows % kPanelRows == 0;
            // The next set's scales (contiguous rows) are prefetched a few lines per chunk, so the next scales_fast
            // pass does not stall on them (1-5% at one row from DRAM). Resident only: otherwise every set is
            // visited once per column range, not in order.
            const uint8_t* next_scales = nullptr;
            int64_t next_scale_bytes = 0;
            if (resident && s + 1 < nsets && D::scale_row_bytes(w) > 0) {
                const int64_t next_rows = r1 - (r + kSetRows) < kSetRows ? r1 - (r + kSetRows) : kSetRows;
                next_scales = w.scales + uint64_t(r + kSetRows) * uint64_t(D::scale_row_bytes(w));
                next_scale_bytes = next_rows * D::scale_row_bytes(w);
            }
            const int64_t scale_bytes_per_chunk = (next_scale_bytes / (nchunks + 1) + 127) / 64 * 64;
            // Iteration c decodes chunk c (if any) and issues the products of chunk c - 1 (if any): with one
            // group, its k-slices split evenly between the panels' decode steps; with several, its groups.
            for (int64_t c = 0; c <= nchunks; ++c) {
                const int64_t t0 = k0 + c * kc, tc = k1 - t0 < kc ? k1 - t0 : kc;
                const int64_t pt0 = t0 - kc;
                for (int64_t b = c * scale_bytes_per_chunk; b < (c + 1) * scale_bytes_per_chunk && b < next_scale_bytes;
                     b += 64)
                    _mm_prefetch(reinterpret_cast<const char*>(next_scales + b), _MM_HINT_T0);
                uint8_t* dec = abuf + (c % 2) * chunk_bytes;
                const uint8_t* prev = !in_place ? abuf + ((c + 1) % 2) * chunk_bytes
                                      : c == 0  ? nullptr
                                                : Bf16Decoder::row(w, r, pt0);
                for (int64_t p = 0; p < kSetPanels; ++p) {
                    if (c < nchunks && p < np) {
                        const int64_t pr = r + p * kPanelRows, mrows = set_rows - p * kPanelRows;
                        const int64_t m = mrows < kPanelRows ? mrows : kPanelRows;
                        if (in_place)
                            Bf16Decoder::prefetch(w, pr, m, t0, tc);
                        else
                            D::decode(w, pr, m, t0, tc, dec + p * kc * D::kParts * kTileBytes, fast);
                    }
                    if (c == 0) continue;
                    const int64_t last_tc = k1 - pt0 < kc ? k1 - pt0 : kc;
                    if (resident) {
                        const int64_t ps = last_tc * D::kParts;
                        const int64_t j0 = ps * p / kSetPanels, j1 = ps * (p + 1) / kSetPanels;
                        if (in_place)
                            run_slices<D, true>(prev, kc, np, xp, bbytes, pt0, j0, j1, cols * 2);
                        else if (groups == 1)
                            run_slices<D>(prev, kc, np, xp, bbytes, pt0, j0, j1);
                        else
                            run_slices_2g<D>(prev, kc, np, xp, xp + kbs * bbytes, bbytes, pt0, j0, j1);
                    } else {
                        // Whole pairs of groups to each panel step, so only an odd last group goes alone.
                        const int64_t pairs = (groups + 1) / 2, g0 = 2 * (pairs * p / kSetPanels);
                        const int64_t g1p = 2 * (pairs * (p + 1) / kSetPanels), g1 = g1p < groups ? g1p : groups;
                        for (int64_t g = g0; g < g1; g += 2) {
                            float* cb = cset + g * kSetFloatsPerGroup;
                            const uint8_t* xg = xp + g * kbs * bbytes;
                            if (g + 1 < g1) {
                                load_c(np, pt0 == 0, cb, cb + kSetFloatsPerGroup);
                                run_slices_2g<D>(prev, kc, np, xg, xg + kbs * bbytes, bbytes, pt0, 0, last_tc * D::kParts);
                                store_c(np, cb, cb + kSetFloatsPerGroup);
                            } else {
                                load_c(np, pt0 == 0, cb);
                                run_slices<D>(prev, kc, np, xg, bbytes, pt0, 0, last_tc * D::kParts);
                                store_c(np, cb);
                            }
                        }
                    }
                }
            }
            if (resident) store_c(np, cset, groups == 2 ? cset + kSetFloatsPerGroup : nullptr);
            if (k1 < kbs) continue;
            for (int64_t i = 0; i < n; ++i) {
                const float* part[3];  // columns 3i, 3i + 1, 3i + 2, possibly in two groups
                for (int64_t k = 0; k < 3; ++k)
                    part[k] = cset + (3 * i + k) / kTileCols * kSetFloatsPerGroup + (3 * i + k) % kTileCols;
                for (int64_t m = 0; m < set_rows; ++m) {
                    const int64_t at = (m / kPanelRows) * 256 + (m % kPanelRows) * 16;
                    y[i * w.rows + r + m] = (part[0][at] + part[1][at]) + part[2][at];
                }
            }
        }
    }
    _tile_release();
}

bool request_permission() {
#if defined(__linux__)
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
}

}  // namespace

bool enable(bool cpu_has_amx) {
    static const bool ok = cpu_has_amx && request_permission();
    return ok;
}

bool covers(const Weight& w) {
    switch (w.format) {
        case WeightFormat::MXFP4:
        case WeightFormat::INT4_G32: return true;
        case WeightFormat::BF16: return w.cols % kBlockCols == 0;
        default: return false;
    }
}

void matmul_rows(const Weight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, float* scratch) {
    switch (covers(w) ? w.format : WeightFormat::F32) {
        // Chunks change no bits (each output's accumulator still takes the k-tiles in order). Half-size chunks were
        // 5-15% faster at 1 and 8 rows from DRAM on 2 threads here (half the L1 buffer, products interleaved with
        // decoding more finely) and ~10% slower at 32 rows.
        case WeightFormat::MXFP4:
            return n <= 8 ? matmul_panels<MxDecoder, 4>(w, x, n, y, r0, r1)
                          : matmul_panels<MxDecoder>(w, x, n, y, r0, r1);
        case WeightFormat::INT4_G32:
            return n <= 8 ? matmul_panels<Int4Decoder, 4>(w, x, n, y, r0, r1)
                          : matmul_panels<Int4Decoder>(w, x, n, y, r0, r1);
        case WeightFormat::BF16: return matmul_panels<Bf16Decoder>(w, x, n, y, r0, r1);
        default: return avx512::matmul_rows(w, x, n, y, r0, r1, scratch);
    }
}

}  // namespace sluice::ops::cpu::amx
