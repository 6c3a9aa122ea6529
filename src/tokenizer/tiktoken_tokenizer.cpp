// Kimi's tiktoken tokenizer: tiktoken.model (base64 token bytes + rank per line), the pat_str of
// tokenization_kimi.py, special tokens at ids num_base .. num_base + 257 named from tokenizer_config.json
// added_tokens_decoder (others "<|reserved_token_{id}|>"), always recognised in text (allowed_special="all"), and
// Kimi's pre-chunking (400,000 characters, runs of over 25,000 space / non-space characters).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/config_util.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sluice::tok {

namespace {

using nlohmann::json;

constexpr const char* k_kimi_pattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

constexpr int k_num_special = 256 + 2;  // tokenization_kimi.py: num_reserved_special_tokens + 2
constexpr size_t k_max_encode_chars = 400000;
constexpr size_t k_max_run_chars = 25000;

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

std::optional<std::string> base64_decode(std::string_view s) {
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < s.size() && s[i] != '='; ++i) {
        const int v = base64_value(s[i]);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xFF));
        }
    }
    for (; i < s.size(); ++i)
        if (s[i] != '=') return std::nullopt;
    if (s.size() % 4 != 0) return std::nullopt;
    return out;
}

class TiktokenTokenizer final : public Tokenizer {
public:
    TiktokenTokenizer(std::string_view model, const json& config, const std::string& origin);

    std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
    std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const override;
    std::optional<int32_t> token_to_id(std::string_view token) const override {
        if (auto it = special_ids_.find(std::string(token)); it != special_ids_.end()) return it->second;
        const int32_t id = bpe_.find(token);
        return id < 0 ? std::nullopt : std::optional<int32_t>(id);
    }
    std::optional<std::string> id_to_token(int32_t id) const override {
        if (id < 0 || id >= vocab_size()) return std::nullopt;
        return id_bytes_[id];
    }
    bool is_special(int32_t id) const override { return id >= num_base_ && id < vocab_size(); }
    int32_t vocab_size() const override { return static_cast<int32_t>(id_bytes_.size()); }

private:
    void encode_chunk(std::string_view text, std::vector<int32_t>& out) const;

    std::string origin_;
    int32_t num_base_ = 0;
    BpeModel bpe_;
    std::unique_ptr<RegexSplitter> splitter_;
    AddedTokenMatcher specials_;
    std::unordered_map<std::string, int32_t> special_ids_;
    std::vector<std::string> id_bytes_;
    bool add_bos_ = false, add_eos_ = false;
};

TiktokenTokenizer::TiktokenTokenizer(std::string_view model, const json& config, const std::string& origin)
    : origin_(origin) {
    std::vector<std::pair<std::string, int32_t>> tokens;
    size_t line_no = 0;
    for (size_t pos = 0; pos < model.size();) {
        size_t eol = model.find('\n', pos);
        if (eol == std::string_view::npos) eol = model.size();
        std::string_view line = model.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const size_t sp = line.find(' ');
        SLUICE_CHECK(sp != std::string_view::npos, origin, ":", line_no, ": expected \"base64 rank\"");
        auto bytes = base64_decode(line.substr(0, sp));
        SLUICE_CHECK(bytes && !bytes->empty(), origin, ":", line_no, ": bad base64 token");
        const std::string rank_text(line.substr(sp + 1));
        char* end = nullptr;
        const long rank = std::strtol(rank_text.c_str(), &end, 10);
        SLUICE_CHECK(end && *end == '\0' && !rank_text.empty() && rank >= 0 && rank < (1 << 24), origin, ":",
                     line_no, ": bad rank \"", rank_text, "\"");
        tokens.emplace_back(std::move(*bytes), static_cast<int32_t>(rank));
    }
    SLUICE_CHECK(!tokens.empty(), origin, ": no tokens");
    num_base_ = static_cast<int32_t>(tokens.size());
    id_bytes_.assign(num_base_ + k_num_special, std::string());
    std::vector<uint8_t> seen(num_base_, 0);
    for (auto& [bytes, rank] : tokens) {
        SLUICE_CHECK(rank < num_base_ && !seen[rank], origin, ": ranks are not 0..", num_base_ - 1,
                     " each used once (rank ", rank, ")");
        seen[rank] = 1;
        id_bytes_[rank] = bytes;
        bpe_.add_token(bytes, rank);
    }
    // tiktoken merges the adjacent pair whose concatenation has the lowest rank: every split of a token into two
    // tokens is a merge at that token's rank.
    for (int32_t id = 0; id < num_base_; ++id) {
        const std::string& t = id_bytes_[id];
        for (size_t k = 1; k < t.size(); ++k) {
            const int32_t l = bpe_.find(std::string_view(t).substr(0, k));
            if (l < 0) continue;
            const int32_t r = bpe_.find(std::string_view(t).substr(k));
            if (r >= 0) bpe_.add_merge(l, r, id, static_cast<uint32_t>(id));
        }
    }
    bpe_.finalize(true);
    for (int b = 0; b < 256; ++b)
        SLUICE_CHECK(bpe_.byte_id(static_cast<uint8_t>(b)) >= 0, origin, ": byte ", b, " has no token");

    std::unordered_map<int32_t, std::string> named;
    if (auto it = config.find("added_tokens_decoder"); it != config.end()) {
        SLUICE_CHECK(it->is_object(), "tokenizer_config.json: added_tokens_decoder is not an object");
        for (const auto& [key, value] : it->items()) {
            char* end = nullptr;
            const long id = std::strtol(key.c_str(), &end, 10);
            SLUICE_CHECK(end && *end == '\0' && value.is_object() && value.contains("content") &&
                             value["content"].is_string(),
                         "tokenizer_config.json: added_tokens_decoder entry \"", key, "\" is malformed");
            named[static_cast<int32_t>(id)] = value["content"].get<std::string>();
        }
    }
    for (int32_t id = num_base_; id < num_base_ + k_num_special; ++id) {
        auto it = named.find(id);
        std::string content = it != named.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
        special_ids_[content] = id;
        specials_.add({content, id, true, false, false, false});
        id_bytes_[id] = std::move(content);
    }
    splitter_ = std::make_unique<RegexSplitter>(k_kimi_pattern, false, SplitBehavior::Isolated);

    for (auto [key, slot] : {std::pair{"bos_token", &bos_id_}, std::pair{"eos_token", &eos_id_}}) {
        if (auto name = config_token(config, key)) {
            auto id = token_to_id(*name);
            SLUICE_CHECK(id, "tokenizer_config.json: ", key, " \"", *name, "\" is not a token of ", origin_);
            *slot = *id;
        }
    }
    add_bos_ = config_flag(config, "add_bos_token", false);
    add_eos_ = config_flag(config, "add_eos_token", false);
    SLUICE_CHECK(!add_bos_ || bos_id_, "tokenizer_config.json: add_bos_token is true but bos_token is missing");
    SLUICE_CHECK(!add_eos_ || eos_id_, "tokenizer_config.json: add_eos_token is true but eos_token is missing");
}

void TiktokenTokenizer::encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<Segment> segments;
    specials_.split(text, {0, text.size()}, segments);
    std::vector<Span> pieces;
    for (const Segment& seg : segments) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        pieces.clear();
        splitter_->split(text, seg.span, pieces);
        for (const Span& p : pieces) bpe_.encode_word(text.substr(p.begin, p.end - p.begin), out);
    }
}

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view input, bool add_special) const {
    std::string repaired;
    if (!utf8_valid(input)) {
        repaired = utf8_lossy(input);
        input = repaired;
    }
    std::vector<int32_t> out;
    if (add_special && add_bos_) out.push_back(*bos_id_);
    // Reproduce tokenization_kimi.py: chunks of 400,000 code points, each cut wherever a run of space (or of
    // non-space) characters, by Python's str.isspace, would exceed 25,000.
    size_t chars_in_chunk = 0, slice_start = 0, run = 0;
    bool run_is_space = false;
    size_t i = 0;
    char32_t cp;
    while (i < input.size()) {
        const size_t at = i;
        utf8_next(input, i, cp);
        if (chars_in_chunk == k_max_encode_chars) {
            encode_chunk(input.substr(slice_start, at - slice_start), out);
            slice_start = at;
            chars_in_chunk = 0;
        }
        const bool space = py_isspace(cp);
        if (chars_in_chunk == 0) {
            run_is_space = space;
            run = 0;
        }
        ++chars_in_chunk;
        if (space != run_is_space) {
            run_is_space = space;
            run = 1;
        } else if (++run > k_max_run_chars) {
            encode_chunk(input.substr(slice_start, at - slice_start), out);
            slice_start = at;
            run = 1;
        }
    }
    encode_chunk(input.substr(slice_start), out);
    if (add_special && add_eos_) out.push_back(*eos_id_);
    return out;
}

std::string TiktokenTokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids) {
        SLUICE_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " is out of range for ", origin_,
                     " (vocab size ", vocab_size(), ")");
        if (skip_special && id >= num_base_) continue;
        out += id_bytes_[id];
    }
    return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(std::string_view tiktoken_model, std::string_view config_json,
                                                   const std::string& origin) {
    const json config = parse_json(config_json, "tokenizer_config.json");
    try {
        return std::make_unique<TiktokenTokenizer>(tiktoken_model, config, origin);
    } catch (const json::exception& e) {
        fail("tokenizer: tokenizer_config.json beside ", origin, " has an unexpected structure: ", e.what());
    }
}

}  // namespace sluice::tok
