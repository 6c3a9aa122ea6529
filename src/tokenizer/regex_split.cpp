// PCRE2-backed splitting and the pattern translation described in regex_split.h.
#include "tokenizer/regex_split.h"

#include <cctype>

#include "core/error.h"

#ifdef SLUICE_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace sluice::tok {

namespace {

// Unicode White_Space, which is what \s means in Oniguruma and Rust regex (PCRE2's \s lacks U+0085).
constexpr const char* k_white_space_items =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

bool is_general_category(std::string_view name) {
    static const char* const cats[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "M",  "Mn", "Mc", "Me",
                                       "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
                                       "Po", "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",
                                       "Cc", "Cf", "Cs", "Co", "Cn", "Any"};
    for (const char* c : cats)
        if (name == c) return true;
    return false;
}

// Copies one escape starting at p[i] == '\\' into out (translating \s, \S, \p{Script}); returns chars consumed.
size_t translate_escape(std::string_view p, size_t i, bool in_class, std::string& out) {
    SLUICE_CHECK(i + 1 < p.size(), "tokenizer regex: pattern ends with a backslash");
    const char c = p[i + 1];
    if (c == 's') {
        out += in_class ? std::string(k_white_space_items) : std::string("[") + k_white_space_items + "]";
        return 2;
    }
    if (c == 'S') {
        SLUICE_CHECK(!in_class, "tokenizer regex: \\S inside a character class is not supported");
        out += std::string("[^") + k_white_space_items + "]";
        return 2;
    }
    if ((c == 'p' || c == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 3);
        SLUICE_CHECK(close != std::string_view::npos, "tokenizer regex: unterminated \\p{ at offset ", i);
        const std::string_view name = p.substr(i + 3, close - i - 3);
        out += '\\';
        out += c;
        out += '{';
        if (!is_general_category(name) && name.find(':') == std::string_view::npos &&
            name.find('=') == std::string_view::npos)
            out += "sc:";
        out += name;
        out += '}';
        return close - i + 1;
    }
    out.append(p.substr(i, 2));
    return 2;
}

// Translates a character class starting at p[i] == '['; returns the index just past it.
size_t translate_class(std::string_view p, size_t i, std::string& out) {
    std::string body;
    size_t j = i + 1;
    if (j < p.size() && p[j] == '^') {
        body += '^';
        ++j;
    }
    if (j < p.size() && p[j] == ']') {  // a leading ']' is a literal
        body += "\\]";
        ++j;
    }
    std::string intersect;  // the B of [A&&[^B]]
    while (j < p.size() && p[j] != ']') {
        if (p[j] == '\\') {
            j += translate_escape(p, j, true, body);
        } else if (p.compare(j, 2, "&&") == 0) {
            SLUICE_CHECK(body.empty() || body[0] != '^', "tokenizer regex: && in a negated class is not supported");
            SLUICE_CHECK(p.compare(j, 4, "&&[^") == 0, "tokenizer regex: only [A&&[^B]] intersection is supported");
            j += 4;
            while (j < p.size() && p[j] != ']') {
                if (p[j] == '\\') j += translate_escape(p, j, true, intersect);
                else intersect += p[j++];
            }
            SLUICE_CHECK(j + 1 < p.size() && p[j + 1] == ']', "tokenizer regex: malformed class intersection");
            ++j;  // now at the outer ']'
        } else if (p[j] == '[') {
            SLUICE_CHECK(p.compare(j, 2, "[:") == 0, "tokenizer regex: nested class at offset ", j, " is not supported");
            body += p[j++];
        } else {
            body += p[j++];
        }
    }
    SLUICE_CHECK(j < p.size(), "tokenizer regex: unterminated character class at offset ", i);
    if (intersect.empty()) {
        out += '[' + body + ']';
    } else {
        out += "(?:(?![" + intersect + "])[" + body + "])";
    }
    return j + 1;
}

}  // namespace

std::string translate_pattern(std::string_view p) {
    std::string out;
    for (size_t i = 0; i < p.size();) {
        if (p[i] == '\\') {
            i += translate_escape(p, i, false, out);
        } else if (p[i] == '[') {
            i = translate_class(p, i, out);
        } else {
            out += p[i++];
        }
    }
    return out;
}

#ifdef SLUICE_HAVE_PCRE2

struct RegexSplitter::Impl {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Impl() {
        if (code) pcre2_code_free(code);
    }
};

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, SplitBehavior behavior)
    : impl_(std::make_unique<Impl>()), behavior_(behavior) {
    const std::string translated = literal ? std::string(pattern) : translate_pattern(pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                                &err_off, nullptr);
    if (!impl_->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail("tokenizer regex: cannot compile /", std::string(pattern), "/ at offset ", err_off, ": ",
             reinterpret_cast<const char*>(msg));
    }
    impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view text, Span span, std::vector<Span>& out) const {
    // Repeated lookahead groups (Kimi's class intersections) need more JIT stack than the 32 KiB default.
    struct MatchData {
        pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
        pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
        pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
        MatchData() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
        ~MatchData() {
            pcre2_match_context_free(ctx);
            pcre2_jit_stack_free(stack);
            pcre2_match_data_free(md);
        }
    };
    thread_local MatchData data;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + span.begin);
    const size_t len = span.end - span.begin;
    size_t pos = 0;
    size_t gap_start = 0;
    auto emit = [&](size_t a, size_t b) {
        if (b > a) out.push_back({span.begin + a, span.begin + b});
    };
    while (pos <= len) {
        int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, len, pos, 0, data.md, data.ctx)
                            : pcre2_match(impl_->code, subject, len, pos, PCRE2_NO_UTF_CHECK, data.md, data.ctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking state on the heap
            rc = pcre2_match(impl_->code, subject, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.md, data.ctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        SLUICE_CHECK(rc >= 0, "tokenizer regex: match failed with PCRE2 error ", rc);
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
        const size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) {  // empty match: step over one code point
            pos = m0 + 1;
            while (pos < len && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        emit(gap_start, m0);
        if (behavior_ == SplitBehavior::Isolated) emit(m0, m1);
        gap_start = m1;
        pos = m1;
    }
    emit(gap_start, len);
}

#else

struct RegexSplitter::Impl {};
RegexSplitter::RegexSplitter(std::string_view, bool, SplitBehavior) {
    fail("tokenizer: this build has no PCRE2, so regex pre-tokenizers are unavailable");
}
RegexSplitter::~RegexSplitter() = default;
void RegexSplitter::split(std::string_view, Span, std::vector<Span>&) const {}

#endif

}  // namespace sluice::tok
