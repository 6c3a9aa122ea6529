// The schema automaton (see json_automaton.h). Each frame is a value being read: its node and phase. A value that
// ends on its own last byte (a string's quote, a closing bracket, the last byte of the only literal left) is popped
// at once; one that ends only when a byte that cannot extend it arrives (a number, a literal that is a prefix of
// another) is popped then, and that byte goes to the parent.
#include "runtime/json_automaton.h"

#include <utility>

namespace sluice::schema {

namespace {

using Kind = SchemaNode::Kind;

enum Phase : uint8_t {
    kValue,      // before a value (whitespace, then its first byte)
    kLiteral,    // inside one of the node's literals
    kString,     // inside a string
    kMinus,      // number: after '-'
    kZero,       // number: the integer part is "0"
    kInt,        // number: integer digits
    kDot,        // number: after '.'
    kFrac,       // number: fraction digits
    kExp,        // number: after 'e' / 'E'
    kExpSign,    // number: after the exponent's sign
    kExpDigits,  // number: exponent digits
    kObjOpen,    // after '{'
    kKey,        // inside a key
    kColon,      // after a key
    kObjAfter,   // after a property's value
    kObjComma,   // after ','
    kArrOpen,    // after '['
    kArrAfter,   // after an item
    kSequence,   // a sequence: off = the parts begun
};

bool is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
bool accepting_number(uint8_t phase) {
    return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits;
}

// Bounded integers (SchemaNode::has_min / has_max): the frame keeps the magnitude read so far in lo (low half) and
// hi (high half), and in off bit 0 a minus sign, bit 1 a magnitude past 10^19 (beyond every bound). A prefix is
// taken only while some integer that starts with it is within the bounds, so every accepted prefix can end well.
uint64_t magnitude(const Frame& f) { return uint64_t(f.hi) << 32 | f.lo; }

bool bounded(const SchemaNode& n) { return n.kind == Kind::integer && (n.has_min || n.has_max); }

// Whether an integer with this prefix can lie within n's bounds: `digits` (any read yet), `more` (more may follow).
bool int_feasible(const SchemaNode& n, const Frame& f, bool digits, bool more) {
    using i128 = __int128;
    const bool neg = f.off & 1, huge = f.off & 2;
    const i128 lo = n.has_min ? i128(n.min_int) : -(i128(1) << 100), hi = n.has_max ? i128(n.max_int) : i128(1) << 100;
    if (!digits) return lo <= std::min<i128>(0, hi);  // "-": any of 0, -1, -2, ...
    if (huge) return neg ? !n.has_min : !n.has_max;
    const i128 v = i128(magnitude(f));
    i128 scale = 1;
    for (int j = 0; j <= (more && v > 0 ? 19 : 0); ++j, scale *= 10) {  // the integers v, v0-v9, v00-v99, ...
        const i128 a = v * scale, b = j == 0 ? v : v * scale + scale - 1;
        const i128 x = neg ? -b : a, y = neg ? -a : b;
        if (x <= hi && y >= lo) return true;
    }
    return more && v > 0 && (neg ? !n.has_min : !n.has_max);
}

// Appends digit d to a bounded integer's magnitude; false when no integer with the new prefix is within bounds.
bool int_digit(const SchemaNode& n, Frame& f, uint8_t d) {
    const __int128 v = __int128(magnitude(f)) * 10 + (d - '0');
    if (v > __int128(10000000000000000000ull)) f.off |= 2;
    const uint64_t m = f.off & 2 ? 0 : uint64_t(v);
    f.lo = uint32_t(m), f.hi = uint32_t(m >> 32);
    return int_feasible(n, f, true, !(m == 0 && !(f.off & 2)));
}

// A whitespace run may indent one line of pretty-printed JSON at this depth (two bytes a level), no more: weak
// models otherwise spend their tokens on spaces.
bool more_ws(Frame& f, int32_t depth) {
    if (f.ws >= max_whitespace(depth)) return false;
    ++f.ws;
    return true;
}

// Narrows [lo, hi) of sorted strings sharing their first `off` bytes to those whose next byte is b.
bool narrow(const std::vector<std::string>& v, Frame& f, uint8_t b) {
    uint32_t lo = f.lo;
    while (lo < f.hi && (v[lo].size() <= f.off || uint8_t(v[lo][f.off]) < b)) ++lo;
    uint32_t hi = lo;
    while (hi < f.hi && v[hi].size() > f.off && uint8_t(v[hi][f.off]) == b) ++hi;
    if (lo == hi) return false;
    f.lo = lo, f.hi = hi, ++f.off;
    return true;
}

}  // namespace

Automaton::Automaton(Grammar g) : g_(std::move(g)), dispatch_(g_.nodes.size(), -1) {
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
        if (g_.nodes[n].kind != Kind::choice) continue;
        dispatch_[n] = int32_t(choice_.size());
        std::array<int32_t, 256>& row = choice_.emplace_back();
        row.fill(-1);
        for (int b = 0; b < 256; ++b)
            for (int32_t a : g_.nodes[n].alts)
                if (starts_value(g_, a, uint8_t(b))) row[size_t(b)] = a;
    }
}

State Automaton::start() const {
    State s;
    s.depth = 1;
    s.frames[0] = Frame{};
    s.frames[0].node = g_.root;
    s.frames[0].phase = kValue;
    return s;
}

bool Automaton::push_value(State& s, int32_t node) const {
    if (s.depth >= kMaxStack) return false;
    Frame& f = s.frames[size_t(s.depth++)];
    f = Frame{};
    f.node = node;
    f.phase = kValue;
    return true;
}

// The first byte of the value of f's node: chooses the alternative and enters the value.
bool Automaton::begin_value(Frame& f, uint8_t b) const {
    if (dispatch_[size_t(f.node)] >= 0) {
        const int32_t a = choice_[size_t(dispatch_[size_t(f.node)])][b];
        if (a < 0) return false;
        f.node = a;
    }
    const SchemaNode& n = g_.nodes[size_t(f.node)];
    f.ws = 0;
    switch (n.kind) {
        case Kind::object:
            f.phase = kObjOpen;
            return b == '{';
        case Kind::array:
            f.phase = kArrOpen;
            return b == '[';
        case Kind::string:
            f.phase = kString;
            f.off = 0, f.lo = 0, f.hi = 0;
            return b == '"';
        case Kind::number:
        case Kind::integer:
            f.phase = b == '-' ? kMinus : b == '0' ? kZero : kInt;
            f.off = 0, f.lo = 0, f.hi = 0;
            if (!(b == '-' || is_digit(b))) return false;
            if (!bounded(n)) return true;
            if (b == '-') {
                f.off = 1;
                return int_feasible(n, f, false, true);
            }
            return int_digit(n, f, b);
        case Kind::literals:
            f.phase = kLiteral;
            f.lo = 0, f.hi = uint32_t(n.literals.size()), f.off = 0;
            return narrow(n.literals, f, b);
        case Kind::sequence:
            f.phase = kSequence;
            f.off = 0;
            return true;  // b is not consumed: step() hands it to the first part
        case Kind::choice:
            break;
    }
    return false;
}

bool Automaton::key_step(Frame& f, uint8_t b) const {
    const SchemaNode& n = g_.nodes[size_t(f.node)];
    const auto seen = [&](uint32_t k) { return (f.seen >> k & 1) != 0; };
    if (b == '"') {
        if (f.ws != 0) return false;  // inside a character
        const bool exact = f.lo < f.hi && n.keys[f.lo].size() == f.off;
        if (exact && seen(f.lo)) return false;  // a property written twice
        if (exact) f.prop = int16_t(f.lo);
        else if (n.additional >= 0) f.prop = -1;
        else return false;
        f.phase = kColon;
        f.ws = 0;
        return true;
    }
    if (b == '\\' || b < 0x20) return false;
    const int q = utf8_next(f.ws, b);  // a key is valid UTF-8 too (f.ws: the decoder's state; no whitespace in a key)
    if (q < 0) return false;
    f.ws = uint8_t(q);
    if (f.lo < f.hi && !narrow(n.keys, f, b)) {
        f.lo = f.hi;  // no property starts so: another key, if those are allowed
        ++f.off;
    } else if (f.lo == f.hi) {
        ++f.off;
    }
    if (n.additional >= 0) return true;
    for (uint32_t k = f.lo; k < f.hi; ++k)
        if (!seen(k)) return true;
    return false;
}

bool Automaton::literal_step(Frame& f, uint8_t b) const {
    const std::vector<std::string>& lits = g_.nodes[size_t(f.node)].literals;
    return narrow(lits, f, b);
}

bool Automaton::step(State& s, uint8_t b) const {
    if (!step_inner(s, b)) return false;
    settle(s);
    return true;
}

bool Automaton::step_inner(State& s, uint8_t b) const {
    while (s.depth > 0) {
        Frame& f = s.frames[size_t(s.depth - 1)];
        const SchemaNode& n = g_.nodes[size_t(f.node)];
        switch (f.phase) {
            case kValue:
                if (n.kind == Kind::sequence) {
                    begin_value(f, b);
                    continue;
                }
                // whitespace before a value, unless it begins a literal (a tool-call prefix may start with a space)
                if (is_ws(b) && !(n.kind == Kind::literals && starts_value(g_, f.node, b))) return more_ws(f, s.depth);
                if (!begin_value(f, b)) return false;
                break;
            case kSequence:
                if (f.off >= n.parts.size()) {
                    --s.depth;
                    continue;
                }
                if (!push_value(s, n.parts[f.off++])) return false;
                continue;
            case kLiteral:
                if (literal_step(f, b)) break;
                if (n.literals[f.lo].size() != f.off) return false;
                --s.depth;  // a literal that is complete: b belongs to the parent
                continue;
            case kString:
                if (f.off == 0) {  // f.hi counts the characters begun
                    if (b == '"') {
                        if (f.hi < n.min_length) return false;
                        --s.depth;
                        return true;
                    }
                    if (b < 0x20) return false;
                    if (f.hi >= n.max_length) return false;
                    if (b >= 0x80) {  // a character of 2 to 4 bytes: its continuation bytes follow (f.off 8 + count)
                        const uint8_t need = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2
                                             : b >= 0xF0 && b <= 0xF4 ? 3 : 0;
                        if (need == 0) return false;  // a continuation byte without its lead, or no UTF-8 byte
                        // the second byte's narrower range after E0 (overlong), ED (surrogates), F0, F4 (> U+10FFFF)
                        f.lo = b == 0xE0 ? 1 : b == 0xED ? 2 : b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0;
                        f.off = 8u + need;
                        ++f.hi;
                        return true;
                    }
                    ++f.hi;
                    if (b == '\\') f.off = 1;
                    return true;
                }
                if (f.off >= 8) {  // inside a multi-byte character: only its continuation bytes, in UTF-8's ranges
                    if ((b & 0xC0) != 0x80) return false;
                    if ((f.lo == 1 && b < 0xA0) || (f.lo == 2 && b > 0x9F) || (f.lo == 3 && b < 0x90) ||
                        (f.lo == 4 && b > 0x8F))
                        return false;
                    f.lo = 0;
                    f.off = f.off == 9 ? 0 : f.off - 1;
                    return true;
                }
                if (f.off == 1) {
                    if (b == 'u') {
                        f.off = 2;
                        return true;
                    }
                    f.off = 0;
                    return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
                           b == 't';
                }
                if (!is_hex(b)) return false;
                if (f.off == 2) f.lo = (b == 'd' || b == 'D');
                else if (f.off == 3 && f.lo && !is_digit(b)) return false;       // \uD8..: a surrogate
                else if (f.off == 3 && f.lo && b >= '8') return false;
                f.off = f.off == 5 ? 0 : f.off + 1;
                return true;
            case kMinus:
                if (!is_digit(b)) return false;
                f.phase = b == '0' ? kZero : kInt;
                return !bounded(n) || int_digit(n, f, b);
            case kZero:
            case kInt:
            case kFrac:
            case kExpDigits:
                if (is_digit(b) && f.phase != kZero) return !bounded(n) || int_digit(n, f, b);
                if (bounded(n) && !int_feasible(n, f, true, false)) return false;  // ends out of bounds
                if (n.kind == Kind::number && (f.phase == kZero || f.phase == kInt) && b == '.') {
                    f.phase = kDot;
                    return true;
                }
                if (n.kind == Kind::number && f.phase != kExpDigits && (b == 'e' || b == 'E')) {
                    f.phase = kExp;
                    return true;
                }
                --s.depth;  // the number ended before b
                continue;
            case kDot:
                if (!is_digit(b)) return false;
                f.phase = kFrac;
                return true;
            case kExp:
                if (b == '+' || b == '-') {
                    f.phase = kExpSign;
                    return true;
                }
                [[fallthrough]];
            case kExpSign:
                if (!is_digit(b)) return false;
                f.phase = kExpDigits;
                return true;
            case kObjOpen:
            case kObjComma:
                if (is_ws(b)) return more_ws(f, s.depth);
                f.ws = 0;
                if (b == '"' && (n.additional >= 0 || !n.keys.empty())) {
                    f.phase = kKey;
                    f.lo = 0, f.hi = uint32_t(n.keys.size()), f.off = 0;
                    return true;
                }
                if (b == '}' && f.phase == kObjOpen && (f.seen & n.required) == n.required) {
                    --s.depth;
                    return true;
                }
                return false;
            case kKey:
                return key_step(f, b);
            case kColon:
                if (is_ws(b)) return more_ws(f, s.depth);
                if (b != ':') return false;
                f.phase = kObjAfter;
                f.ws = 0;
                if (f.prop >= 0) f.seen |= uint64_t(1) << f.prop;
                return push_value(s, f.prop >= 0 ? n.key_nodes[size_t(f.prop)] : n.additional);
            case kObjAfter:
                if (is_ws(b)) return more_ws(f, s.depth);
                f.ws = 0;
                if (b == '}') {
                    if ((f.seen & n.required) != n.required) return false;
                    --s.depth;
                    return true;
                }
                if (b != ',') return false;
                f.phase = kObjComma;
                if (n.additional >= 0) return true;
                return n.keys.size() < 64 ? f.seen != (uint64_t(1) << n.keys.size()) - 1 : ~f.seen != 0;
            case kArrOpen:
                if (is_ws(b)) return more_ws(f, s.depth);
                f.ws = 0;
                if (b == ']') {
                    if (n.min_items > 0) return false;
                    --s.depth;
                    return true;
                }
                if (n.items < 0) return false;
                f.phase = kArrAfter;
                f.off = 1;
                if (!push_value(s, n.items)) return false;
                continue;  // b starts the first item
            case kArrAfter:
                if (is_ws(b)) return more_ws(f, s.depth);
                f.ws = 0;
                if (b == ']') {
                    if (f.off < n.min_items) return false;
                    --s.depth;
                    return true;
                }
                if (b != ',' || f.off >= n.max_items) return false;
                ++f.off;
                return push_value(s, n.items);
            default:
                return false;
        }
        // a value entered or extended by b: a literal whose only candidate is now complete ends here (or goes on
        // with the node that follows it)
        Frame& t = s.frames[size_t(s.depth - 1)];
        if (t.phase == kLiteral) {
            const SchemaNode& ln = g_.nodes[size_t(t.node)];
            if (t.hi - t.lo == 1 && ln.literals[t.lo].size() == t.off) {
                const int32_t next = ln.then.empty() ? -1 : ln.then[t.lo];
                --s.depth;
                if (next >= 0) return push_value(s, next);
            }
        }
        return true;
    }
    return false;  // the top-level value is complete: nothing may follow
}

void Automaton::settle(State& s) const {
    while (s.depth > 0) {
        const Frame& t = s.frames[size_t(s.depth - 1)];
        if (t.phase != kSequence || t.off < g_.nodes[size_t(t.node)].parts.size()) return;
        --s.depth;
    }
}

bool Automaton::can_end(const State& s) const {
    if (s.depth == 0) return true;
    if (s.depth != 1) return false;
    const Frame& f = s.frames[0];
    if (f.phase == kLiteral) return g_.nodes[size_t(f.node)].literals[f.lo].size() == f.off;
    const SchemaNode& n = g_.nodes[size_t(f.node)];
    return accepting_number(f.phase) && (!bounded(n) || int_feasible(n, f, true, false));
}

int Automaton::plain_string_state(const State& s) const {
    if (s.depth == 0) return -1;
    const Frame& f = s.frames[size_t(s.depth - 1)];
    if (f.phase != kString || g_.nodes[size_t(f.node)].max_length != UINT32_MAX) return -1;
    switch (f.off) {
        case 0: return 0;
        case 9: return 1;
        case 10: return f.lo == 1 ? 4 : f.lo == 2 ? 5 : 2;
        case 11: return f.lo == 3 ? 6 : f.lo == 4 ? 7 : 3;
        default: return -1;  // an escape
    }
}

}  // namespace sluice::schema
