// UTF-8 decoding per the Unicode well-formed byte sequence table, lossy repair, the byte-level alphabet and
// NFC (decompose, canonical reorder, compose; Hangul handled arithmetically).
#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

namespace sluice::tok {

namespace {

// Valid range for the second byte given the lead byte; later continuation bytes are always 80..BF.
bool second_ok(uint8_t lead, uint8_t b) {
    switch (lead) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: return b >= 0x80 && b <= 0xBF;
    }
}

int sequence_length(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

}  // namespace

bool utf8_next(std::string_view s, size_t& i, char32_t& cp) {
    const auto lead = static_cast<uint8_t>(s[i]);
    const int n = sequence_length(lead);
    if (n == 1) {
        cp = lead;
        ++i;
        return true;
    }
    if (n == 0) {
        ++i;
        return false;
    }
    char32_t v = lead & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (int k = 1; k < n; ++k) {
        if (i + k >= s.size()) {
            i += k;
            return false;
        }
        const auto b = static_cast<uint8_t>(s[i + k]);
        const bool ok = k == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            i += k;
            return false;
        }
        v = (v << 6) | (b & 0x3F);
    }
    i += n;
    cp = v;
    return true;
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool utf8_valid(std::string_view s) {
    size_t i = 0;
    char32_t cp;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        if (!utf8_next(s, i, cp)) return false;
    }
    return true;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    char32_t cp;
    while (i < s.size()) {
        const size_t start = i;
        if (utf8_next(s, i, cp)) {
            out.append(s.substr(start, i - start));
        } else {
            out.append("\xEF\xBF\xBD");
        }
    }
    return out;
}

size_t utf8_stable_prefix(std::string_view s) {
    // Only the last 3 bytes can belong to an unfinished sequence.
    const size_t from = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t start = from; start < s.size(); ++start) {
        const auto lead = static_cast<uint8_t>(s[start]);
        const int n = sequence_length(lead);
        if (n < 2 || start + n <= s.size()) continue;
        bool prefix_ok = true;
        for (size_t k = 1; start + k < s.size(); ++k) {
            const auto b = static_cast<uint8_t>(s[start + k]);
            if (!(k == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF))) prefix_ok = false;
        }
        if (prefix_ok) return start;
    }
    return s.size();
}

const std::array<char32_t, 256>& byte_to_unicode() {
    static const std::array<char32_t, 256> table = [] {
        std::array<char32_t, 256> t{};
        char32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            t[b] = printable ? static_cast<char32_t>(b) : next++;
        }
        return t;
    }();
    return table;
}

int unicode_to_byte(char32_t cp) {
    static const std::array<int16_t, 0x144> inverse = [] {
        std::array<int16_t, 0x144> t{};
        t.fill(-1);
        const auto& fwd = byte_to_unicode();
        for (int b = 0; b < 256; ++b) t[fwd[b]] = static_cast<int16_t>(b);
        return t;
    }();
    return cp < inverse.size() ? inverse[cp] : -1;
}

bool py_isspace(char32_t cp) {
    if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    switch (cp) {
        case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
            return true;
        default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

// ---- NFC ----

namespace {

struct CccRange {
    char32_t first, last;
    uint8_t ccc;
};
struct Decomposition {
    char32_t cp, a, b;
};
struct Composition {
    char32_t a, b, cp;
};

#include "tokenizer/nfc_tables.inc"

constexpr char32_t k_sbase = 0xAC00, k_lbase = 0x1100, k_vbase = 0x1161, k_tbase = 0x11A7;
constexpr char32_t k_lcount = 19, k_vcount = 21, k_tcount = 28, k_ncount = k_vcount * k_tcount,
                   k_scount = k_lcount * k_ncount;

uint8_t ccc_of(char32_t cp) {
    if (cp < 0x300) return 0;
    auto it = std::upper_bound(std::begin(k_ccc_ranges), std::end(k_ccc_ranges), cp,
                               [](char32_t v, const CccRange& r) { return v < r.first; });
    if (it == std::begin(k_ccc_ranges)) return 0;
    --it;
    return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
    if (cp >= k_sbase && cp < k_sbase + k_scount) {
        const char32_t s = cp - k_sbase;
        out.push_back(k_lbase + s / k_ncount);
        out.push_back(k_vbase + (s % k_ncount) / k_tcount);
        if (s % k_tcount) out.push_back(k_tbase + s % k_tcount);
        return;
    }
    if (cp >= 0xC0) {
        auto it = std::lower_bound(std::begin(k_decompositions), std::end(k_decompositions), cp,
                                   [](const Decomposition& d, char32_t v) { return d.cp < v; });
        if (it != std::end(k_decompositions) && it->cp == cp) {
            decompose(it->a, out);
            if (it->b) decompose(it->b, out);
            return;
        }
    }
    out.push_back(cp);
}

char32_t compose_pair(char32_t a, char32_t b) {
    if (a >= k_lbase && a < k_lbase + k_lcount && b >= k_vbase && b < k_vbase + k_vcount)
        return k_sbase + ((a - k_lbase) * k_vcount + (b - k_vbase)) * k_tcount;
    if (a >= k_sbase && a < k_sbase + k_scount && (a - k_sbase) % k_tcount == 0 && b > k_tbase &&
        b < k_tbase + k_tcount)
        return a + (b - k_tbase);
    auto it = std::lower_bound(std::begin(k_compositions), std::end(k_compositions), std::pair{a, b},
                               [](const Composition& c, const std::pair<char32_t, char32_t>& v) {
                                   return c.a != v.first ? c.a < v.first : c.b < v.second;
                               });
    if (it != std::end(k_compositions) && it->a == a && it->b == b) return it->cp;
    return 0;
}

}  // namespace

namespace {

std::string nfc_full(std::string_view s) {
    std::vector<char32_t> cps;
    cps.reserve(s.size());
    size_t i = 0;
    char32_t cp;
    while (i < s.size()) {
        if (utf8_next(s, i, cp)) decompose(cp, cps);
        else decompose(0xFFFD, cps);
    }
    // Canonical ordering: stable sort each run of non-starters by combining class.
    std::vector<uint8_t> ccc(cps.size());
    for (size_t k = 0; k < cps.size(); ++k) ccc[k] = ccc_of(cps[k]);
    for (size_t k = 0; k < cps.size();) {
        if (ccc[k] == 0) {
            ++k;
            continue;
        }
        size_t end = k;
        while (end < cps.size() && ccc[end] != 0) ++end;
        for (size_t a = k + 1; a < end; ++a) {
            for (size_t b = a; b > k && ccc[b - 1] > ccc[b]; --b) {
                std::swap(ccc[b - 1], ccc[b]);
                std::swap(cps[b - 1], cps[b]);
            }
        }
        k = end;
    }
    // Canonical composition.
    std::vector<char32_t> out;
    std::vector<uint8_t> out_ccc;
    out.reserve(cps.size());
    long starter = -1;
    for (size_t k = 0; k < cps.size(); ++k) {
        const char32_t c = cps[k];
        const uint8_t cc = ccc[k];
        if (starter >= 0) {
            const uint8_t last_cc = out_ccc.back();
            const bool adjacent = static_cast<size_t>(starter) == out.size() - 1;
            if (adjacent || (last_cc != 0 && last_cc < cc)) {
                if (const char32_t comp = compose_pair(out[starter], c)) {
                    out[starter] = comp;
                    continue;
                }
            }
        }
        out.push_back(c);
        out_ccc.push_back(cc);
        if (cc == 0) starter = static_cast<long>(out.size()) - 1;
    }
    std::string result;
    result.reserve(s.size());
    for (char32_t c : out) utf8_append(result, c);
    return result;
}

}  // namespace

std::string nfc(std::string_view s) {
    // Nothing below U+0300 (UTF-8 lead byte < 0xCC) decomposes, and such a character never combines with the one
    // before it, so only stretches of characters >= U+0300, plus the character before each, need the full
    // algorithm.
    std::string out;
    size_t copied = 0, i = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0xCC) {
            ++i;
            continue;
        }
        size_t start = i;
        if (start > copied) {
            do --start;
            while (start > copied && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80);
        }
        size_t end = i;
        while (end < s.size()) {
            const auto b = static_cast<uint8_t>(s[end]);
            if (b < 0x80 || (b >= 0xC2 && b < 0xCC)) break;
            ++end;
            while (end < s.size() && (static_cast<uint8_t>(s[end]) & 0xC0) == 0x80) ++end;
        }
        out.append(s.substr(copied, start - copied));
        out += nfc_full(s.substr(start, end - start));
        copied = i = end;
    }
    if (copied == 0) return std::string(s);
    out.append(s.substr(copied));
    return out;
}

}  // namespace sluice::tok
