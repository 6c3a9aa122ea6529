// The byte automaton of a compiled JSON schema (runtime/json_schema.h): a pushdown machine whose stack holds one
// frame per open value, fed one byte at a time. It accepts exactly the JSON texts that are instances of the schema,
// with these limits on form: whitespace runs of at most max_whitespace(depth) bytes (a newline and two spaces per
// open value: pretty-printed JSON fits, a model stuck on spaces cannot loop), only where JSON allows them and not
// after the top-level value; object keys without escapes; no \u escapes of surrogates; at most kMaxStack values
// open at once (deeper nesting of a recursive schema is not generated). Bytes >= 0x80 inside strings are taken as
// they come (the tokenizer's decoder repairs invalid UTF-8).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/json_schema.h"

namespace sluice::schema {

constexpr int kMaxStack = 48;
constexpr int max_whitespace(int32_t open_values) { return 1 + 2 * open_values; }

struct Frame {
    int32_t node = 0;
    uint8_t phase = 0;
    uint8_t ws = 0;      // whitespace bytes in the current run
    int16_t prop = -1;   // object: the property whose value is read (-1: another key)
    uint32_t lo = 0, hi = 0;  // literals / keys: the candidates that still match; string: \\u flag or the range of a
                              // UTF-8 character's second byte, characters begun
    uint32_t off = 0;    // literals / keys: bytes matched; string: escape progress (1-5) or a UTF-8 character's
                         // continuation bytes still to come (8 + n); array: items begun
    uint64_t seen = 0;   // object: the properties already written
};

struct State {
    int32_t depth = 0;
    std::array<Frame, kMaxStack> frames;
    void copy_from(const State& o) {
        depth = o.depth;
        for (int32_t i = 0; i < depth; ++i) frames[size_t(i)] = o.frames[size_t(i)];
    }
};

// A UTF-8 decoder's states inside a JSON string (Automaton::plain_string_state's): 0 between characters; 1, 2, 3:
// that many continuation bytes to come; 4 (after E0), 5 (ED): two to come, the first in A0..BF / 80..9F; 6 (F0),
// 7 (F4): three, the first in 90..BF / 80..8F. The state after byte b, or -1 where a string cannot hold b there
// (a quote, backslash or control byte between characters, or a byte UTF-8 does not allow).
inline int utf8_next(int q, uint8_t b) {
    if (q == 0) {
        if (b == '"' || b == '\\' || b < 0x20) return -1;
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if (b == 0xED) return 5;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b == 0xF4) return 7;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        return -1;
    }
    if ((b & 0xC0) != 0x80) return -1;
    if ((q == 4 && b < 0xA0) || (q == 5 && b > 0x9F) || (q == 6 && b < 0x90) || (q == 7 && b > 0x8F)) return -1;
    return q == 1 ? 0 : q == 2 || q == 4 || q == 5 ? 1 : 2;
}

class Automaton {
public:
    explicit Automaton(Grammar g);
    State start() const;
    // Feeds one byte; false when it may not come next (s is then unusable).
    bool step(State& s, uint8_t b) const;
    // The text so far is a complete instance (it may still continue, e.g. a top-level number).
    bool can_end(const State& s) const;
    // Complete, and nothing may follow.
    static bool done(const State& s) { return s.depth == 0; }
    // Inside a string without maxLength, with no escape pending: the UTF-8 decoder's state there (0 between
    // characters; 1-3 continuation bytes to come; 4/5: two to come, the first in A0..BF / 80..9F (after E0 / ED);
    // 6/7: three, the first in 90..BF / 80..8F (after F0 / F4)), else -1. From there any valid UTF-8 without '"',
    // '\\' and controls leaves the state as it is but for the decoder (the character count only maxLength reads).
    int plain_string_state(const State& s) const;
    const Grammar& grammar() const { return g_; }

private:
    Grammar g_;
    std::vector<int32_t> dispatch_;                // per node: its row in choice_ (choice nodes), else -1
    std::vector<std::array<int32_t, 256>> choice_;  // first byte -> the alternative it starts (-1: none)
    bool begin_value(Frame& f, uint8_t b) const;
    bool push_value(State& s, int32_t node) const;
    bool literal_step(Frame& f, uint8_t b) const;
    bool key_step(Frame& f, uint8_t b) const;
    bool step_inner(State& s, uint8_t b) const;
    void settle(State& s) const;  // pops sequences whose last part is complete
};

}  // namespace sluice::schema
