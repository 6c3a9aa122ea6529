// UTF-8 and Unicode helpers for the tokenizers: strict decoding, lossy repair with U+FFFD (one per maximal
// invalid subpart, as Python's errors="replace" and Rust's from_utf8_lossy do), streaming boundaries, the GPT-2
// byte-level alphabet, Python str.isspace, and NFC normalization (tables generated into nfc_tables.inc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::tok {

// Decodes one code point at s[i]. On success returns true, stores cp and advances i past it. On an invalid
// sequence returns false and advances i past its maximal subpart (at least one byte).
bool utf8_next(std::string_view s, size_t& i, char32_t& cp);

void utf8_append(std::string& out, char32_t cp);

bool utf8_valid(std::string_view s);

// s with every maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view s);

// Length of the longest prefix of s that does not end inside a sequence that more bytes could still complete.
size_t utf8_stable_prefix(std::string_view s);

// GPT-2 bytes_to_unicode: byte -> printable code point, and the inverse (-1 for code points outside the map).
const std::array<char32_t, 256>& byte_to_unicode();
int unicode_to_byte(char32_t cp);

// The two-character JSON escape of c (\" \\ \n \r \t \b \f), or nullptr where JSON has none.
inline const char* json_short_escape(char32_t c) {
    switch (c) {
        case '"': return "\\\"";
        case '\\': return "\\\\";
        case '\n': return "\\n";
        case '\r': return "\\r";
        case '\t': return "\\t";
        case '\b': return "\\b";
        case '\f': return "\\f";
        default: return nullptr;
    }
}

// Python's str.isspace() for one code point.
bool py_isspace(char32_t cp);

// Canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view s);

}  // namespace sluice::tok
