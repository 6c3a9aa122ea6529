// Hugging Face tokenizer.json with a byte-level BPE model: normalizer (NFC or none), added tokens (raw pass, then
// normalized pass), pre_tokenizer Sequence/Split/ByteLevel, BPE, post_processor (ByteLevel, TemplateProcessing;
// tokenizer_config.json add_bos_token/add_eos_token override it the way LlamaTokenizerFast does) and the
// ByteLevel decoder. Anything else in the file fails at load time with the field named.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/config_util.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace sluice::tok {

namespace {

using nlohmann::json;
using VocabEntries = std::vector<std::pair<std::string, json>>;

constexpr const char* k_gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Normalizer { None, Nfc };

// Byte-level string -> raw bytes; nullopt if a code point is outside the byte alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view s) {
    std::string out;
    size_t i = 0;
    char32_t cp;
    while (i < s.size()) {
        if (!utf8_next(s, i, cp)) return std::nullopt;
        const int b = unicode_to_byte(cp);
        if (b < 0) return std::nullopt;
        out.push_back(static_cast<char>(b));
    }
    return out;
}

const json& field(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    SLUICE_CHECK(it != j.end(), "tokenizer.json: ", where, " has no field \"", key, "\"");
    return *it;
}

// Ids index dense tables, so one stray large id costs memory in proportion (an id near 2^24 took ~1 GB; found by
// fuzz_tokenizer_files). 2^21 is far above real vocabularies (a few hundred thousand ids).
constexpr int64_t kMaxIds = int64_t(1) << 21;

// A token id field: an integer in [0, kMaxIds) (a float or a huge number was undefined behaviour to convert).
int32_t token_id(const json& j, const std::string& what) {
    SLUICE_CHECK(j.is_number_integer(), "tokenizer.json: ", what, " is not an integer");
    const bool in_range = j.is_number_unsigned() ? j.get<uint64_t>() < uint64_t(kMaxIds)
                                                 : j.get<int64_t>() >= 0 && j.get<int64_t>() < kMaxIds;
    SLUICE_CHECK(in_range, "tokenizer.json: ", what, " = ", j.dump(), " is out of range [0, ", kMaxIds, ")");
    return int32_t(j.get<int64_t>());
}

std::string type_of(const json& j, const std::string& where) {
    const json& t = field(j, "type", where);
    SLUICE_CHECK(t.is_string(), "tokenizer.json: ", where, ".type is not a string");
    return t.get<std::string>();
}

class HfTokenizer final : public Tokenizer {
public:
    // vocab: model.vocab's entries, which the parse keeps out of the DOM (tokenizer_json.h)
    HfTokenizer(const json& root, const VocabEntries& vocab, const json& config, const std::string& origin);

    std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
    std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const override;
    std::optional<int32_t> token_to_id(std::string_view token) const override {
        auto it = token_ids_.find(token);
        return it == token_ids_.end() ? std::nullopt : std::optional<int32_t>(it->second);
    }
    std::optional<std::string> id_to_token(int32_t id) const override {
        if (id < 0 || id >= vocab_size() || !present_[id]) return std::nullopt;
        return id_token_[id];
    }
    bool is_special(int32_t id) const override { return id >= 0 && id < vocab_size() && special_[id]; }
    int32_t vocab_size() const override { return static_cast<int32_t>(id_token_.size()); }

private:
    struct Stage {
        std::unique_ptr<RegexSplitter> splitter;  // null for a pure ByteLevel mapping stage
    };
    void load_normalizer(const json& j);
    void load_pre_tokenizer(const json& j, const std::string& where);
    void load_model(const json& model, const VocabEntries& vocab);
    void add_vocab_entry(const std::string& token, const json& idj);
    void load_added(const json& added);
    void load_post_processor(const json& j, const std::string& where);
    void load_decoder(const json& j, const std::string& where);
    // Returns whether the token maps through the ByteLevel alphabet (its bytes are then id_bytes_[id]).
    // map_text: also map the token's text to the id (the vocabulary's entries map it themselves)
    bool set_token(int32_t id, const std::string& token, bool special, bool map_text = true);
    void encode_text(std::string_view text, std::vector<int32_t>& out) const;

    std::string origin_;
    Normalizer normalizer_ = Normalizer::None;
    std::vector<Stage> stages_;
    BpeModel bpe_;
    AddedTokenMatcher raw_added_, normalized_added_;
    std::vector<std::string> id_token_, id_bytes_;
    std::vector<uint8_t> present_, special_;
    std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>> token_ids_;
    std::vector<int32_t> prefix_ids_, suffix_ids_;
};

HfTokenizer::HfTokenizer(const json& root, const VocabEntries& vocab, const json& config,
                         const std::string& origin)
    : origin_(origin) {
    load_normalizer(root.value("normalizer", json()));
    load_pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer");
    load_model(field(root, "model", "the file"), vocab);
    load_added(root.value("added_tokens", json::array()));
    load_decoder(root.value("decoder", json()), "decoder");
    load_post_processor(root.value("post_processor", json()), "post_processor");

    for (auto [key, slot] : {std::pair{"bos_token", &bos_id_}, std::pair{"eos_token", &eos_id_}}) {
        if (auto name = config_token(config, key)) {
            auto id = token_to_id(*name);
            SLUICE_CHECK(id, "tokenizer_config.json: ", key, " \"", *name, "\" is not in ", origin_);
            *slot = *id;
        }
    }
    // LlamaTokenizerFast rebuilds the post-processor from these flags when the config carries them.
    if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
        prefix_ids_.clear();
        suffix_ids_.clear();
        if (config_flag(config, "add_bos_token", false)) {
            SLUICE_CHECK(bos_id_, "tokenizer_config.json: add_bos_token is true but bos_token is missing");
            prefix_ids_.push_back(*bos_id_);
        }
        if (config_flag(config, "add_eos_token", false)) {
            SLUICE_CHECK(eos_id_, "tokenizer_config.json: add_eos_token is true but eos_token is missing");
            suffix_ids_.push_back(*eos_id_);
        }
    }
}

void HfTokenizer::load_normalizer(const json& j) {
    if (j.is_null()) return;
    const std::string type = type_of(j, "normalizer");
    if (type == "NFC") {
        normalizer_ = Normalizer::Nfc;
    } else if (type == "Sequence") {
        for (const json& n : field(j, "normalizers", "normalizer")) {
            const std::string t = type_of(n, "normalizer.normalizers[]");
            SLUICE_CHECK(t == "NFC", "tokenizer.json: normalizer type ", t, " is not supported (only NFC)");
            normalizer_ = Normalizer::Nfc;
        }
    } else {
        fail("tokenizer.json: normalizer type ", type, " is not supported (only NFC)");
    }
}

void HfTokenizer::load_pre_tokenizer(const json& j, const std::string& where) {
    if (j.is_null()) return;
    const std::string type = type_of(j, where);
    if (type == "Sequence") {
        for (const json& p : field(j, "pretokenizers", where)) load_pre_tokenizer(p, where + ".pretokenizers[]");
    } else if (type == "Split") {
        const json& pattern = field(j, "pattern", where);
        SLUICE_CHECK(!j.value("invert", false), "tokenizer.json: ", where, ".invert = true is not supported");
        const std::string behavior = field(j, "behavior", where).get<std::string>();
        SplitBehavior b;
        if (behavior == "Isolated") b = SplitBehavior::Isolated;
        else if (behavior == "Removed") b = SplitBehavior::Removed;
        else fail("tokenizer.json: ", where, ".behavior ", behavior, " is not supported (Isolated, Removed)");
        if (pattern.contains("Regex")) {
            stages_.push_back({std::make_unique<RegexSplitter>(pattern["Regex"].get<std::string>(), false, b)});
        } else if (pattern.contains("String")) {
            stages_.push_back({std::make_unique<RegexSplitter>(pattern["String"].get<std::string>(), true, b)});
        } else {
            fail("tokenizer.json: ", where, ".pattern has neither Regex nor String");
        }
    } else if (type == "ByteLevel") {
        SLUICE_CHECK(!j.value("add_prefix_space", false), "tokenizer.json: ", where,
                     ".add_prefix_space = true is not supported");
        if (j.value("use_regex", true))
            stages_.push_back({std::make_unique<RegexSplitter>(k_gpt2_pattern, false, SplitBehavior::Isolated)});
    } else {
        fail("tokenizer.json: pre_tokenizer type ", type, " is not supported (Sequence, Split, ByteLevel)");
    }
}

bool HfTokenizer::set_token(int32_t id, const std::string& token, bool special, bool map_text) {
    SLUICE_CHECK(id >= 0 && id < kMaxIds, "tokenizer.json: token id ", id, " of \"", token, "\" is out of range [0, ",
                 kMaxIds, ")");
    if (static_cast<size_t>(id) >= id_token_.size()) {
        id_token_.resize(id + 1);
        id_bytes_.resize(id + 1);
        present_.resize(id + 1, 0);
        special_.resize(id + 1, 0);
    }
    id_token_[id] = token;
    // The ByteLevel decoder maps a token through the byte alphabet, or keeps its UTF-8 if it cannot.
    auto bytes = byte_level_to_bytes(token);
    id_bytes_[id] = bytes ? std::move(*bytes) : token;
    present_[id] = 1;
    special_[id] = special;
    if (map_text) token_ids_.insert_or_assign(token, id);
    return bytes.has_value();
}

void HfTokenizer::add_vocab_entry(const std::string& token, const json& idj) {
    // the entry's name (a string per token) is built only for the error
    const bool plain = idj.is_number_unsigned() && idj.get<uint64_t>() < uint64_t(kMaxIds);
    const int32_t id = plain ? int32_t(idj.get<uint64_t>()) : token_id(idj, "model.vocab[\"" + token + "\"]");
    SLUICE_CHECK(token_ids_.try_emplace(token, id).second, "tokenizer.json: model.vocab has \"", token, "\" twice");
    if (set_token(id, token, false, false)) bpe_.add_token(id_bytes_[id], id);
}

void HfTokenizer::load_model(const json& model, const VocabEntries& vocab) {
    const std::string type = type_of(model, "model");
    SLUICE_CHECK(type == "BPE", "tokenizer.json: model type ", type, " is not supported (only BPE)");
    SLUICE_CHECK(model.value("dropout", json()).is_null(), "tokenizer.json: model.dropout is not supported");
    SLUICE_CHECK(!model.value("byte_fallback", false), "tokenizer.json: model.byte_fallback is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json v = model.value(key, json());
        SLUICE_CHECK(v.is_null() || v == "", "tokenizer.json: model.", key, " is not supported");
    }
    // an object there is always split out of the DOM (which keeps {} in its place): anything else is refused here
    SLUICE_CHECK(field(model, "vocab", "model").is_object(), "tokenizer.json: model.vocab is not an object");
    token_ids_.reserve(vocab.size());
    bpe_.reserve(vocab.size());
    for (const auto& [token, idj] : vocab) add_vocab_entry(token, idj);
    const json& merges = field(model, "merges", "model");
    SLUICE_CHECK(merges.is_array(), "tokenizer.json: model.merges is not an array");
    uint32_t rank = 0;
    std::string ab;  // the merged token's text, reused
    for (const json& m : merges) {
        std::string_view a, b;
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            const size_t sp = s.find(' ');
            SLUICE_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                         "tokenizer.json: merge ", rank, " \"", s, "\" is not two tokens");
            a = std::string_view(s).substr(0, sp);
            b = std::string_view(s).substr(sp + 1);
        } else {
            SLUICE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                         "tokenizer.json: merge ", rank, " is not a pair of strings");
            a = m[0].get_ref<const std::string&>();
            b = m[1].get_ref<const std::string&>();
        }
        ab.assign(a).append(b);
        auto ia = token_ids_.find(a), ib = token_ids_.find(b), im = token_ids_.find(ab);
        SLUICE_CHECK(ia != token_ids_.end() && ib != token_ids_.end() && im != token_ids_.end(),
                     "tokenizer.json: merge ", rank, " (", a, " ", b, ") uses a token missing from the vocab");
        bpe_.add_merge(ia->second, ib->second, im->second, rank);
        ++rank;
    }
    bpe_.finalize(model.value("ignore_merges", false));
}

void HfTokenizer::load_added(const json& added) {
    SLUICE_CHECK(added.is_array(), "tokenizer.json: added_tokens is not an array");
    for (const json& a : added) {
        AddedToken t;
        t.content = field(a, "content", "added_tokens[]").get<std::string>();
        t.id = token_id(field(a, "id", "added_tokens[]"), "added_tokens[\"" + t.content + "\"].id");
        t.special = a.value("special", false);
        t.normalized = a.value("normalized", !t.special);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        SLUICE_CHECK(!a.value("single_word", false), "tokenizer.json: added token \"", t.content,
                     "\" uses single_word, which is not supported");
        set_token(t.id, t.content, t.special);
        if (t.normalized) {
            if (normalizer_ == Normalizer::Nfc) t.content = nfc(t.content);
            normalized_added_.add(t);
        } else {
            raw_added_.add(t);
        }
    }
}

void HfTokenizer::load_post_processor(const json& j, const std::string& where) {
    if (j.is_null()) return;
    const std::string type = type_of(j, where);
    if (type == "ByteLevel") return;  // only adjusts offsets
    if (type == "Sequence") {
        for (const json& p : field(j, "processors", where)) load_post_processor(p, where + ".processors[]");
        return;
    }
    SLUICE_CHECK(type == "TemplateProcessing", "tokenizer.json: post_processor type ", type, " is not supported");
    const json& specials = field(j, "special_tokens", where);
    bool seen_sequence = false;
    for (const json& item : field(j, "single", where)) {
        if (item.contains("Sequence")) {
            seen_sequence = true;
            continue;
        }
        SLUICE_CHECK(item.contains("SpecialToken"), "tokenizer.json: ", where, ".single has an unknown item");
        const std::string name = item["SpecialToken"]["id"].get<std::string>();
        SLUICE_CHECK(specials.contains(name), "tokenizer.json: ", where, " special token ", name, " is undefined");
        auto& ids = seen_sequence ? suffix_ids_ : prefix_ids_;
        for (const json& id : specials[name]["ids"]) ids.push_back(token_id(id, where + " special " + name + " id"));
    }
}

void HfTokenizer::load_decoder(const json& j, const std::string& where) {
    SLUICE_CHECK(!j.is_null(), "tokenizer.json: no decoder (a ByteLevel decoder is required)");
    const std::string type = type_of(j, where);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
        for (const json& d : field(j, "decoders", where)) load_decoder(d, where + ".decoders[]");
        return;
    }
    fail("tokenizer.json: decoder type ", type, " is not supported (only ByteLevel)");
}

void HfTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<Span> pieces{{0, text.size()}}, next;
    for (const Stage& st : stages_) {
        next.clear();
        for (const Span& p : pieces) st.splitter->split(text, p, next);
        pieces.swap(next);
    }
    for (const Span& p : pieces) bpe_.encode_word(text.substr(p.begin, p.end - p.begin), out);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view input, bool add_special) const {
    std::string repaired;
    if (!utf8_valid(input)) {
        repaired = utf8_lossy(input);
        input = repaired;
    }
    std::vector<int32_t> out;
    if (add_special) out = prefix_ids_;
    std::vector<Segment> raw_segments, norm_segments;
    raw_added_.split(input, {0, input.size()}, raw_segments);
    for (const Segment& seg : raw_segments) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        std::string_view gap = input.substr(seg.span.begin, seg.span.end - seg.span.begin);
        std::string normalized;
        if (normalizer_ == Normalizer::Nfc) {
            normalized = nfc(gap);
            gap = normalized;
        }
        norm_segments.clear();
        normalized_added_.split(gap, {0, gap.size()}, norm_segments);
        for (const Segment& s : norm_segments) {
            if (s.id >= 0) out.push_back(s.id);
            else encode_text(gap.substr(s.span.begin, s.span.end - s.span.begin), out);
        }
    }
    if (add_special) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
    return out;
}

std::string HfTokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids) {
        SLUICE_CHECK(id >= 0 && id < vocab_size() && present_[id], "tokenizer: token id ", id,
                     " is out of range for ", origin_, " (vocab size ", vocab_size(), ")");
        if (skip_special && special_[id]) continue;
        out += id_bytes_[id];
    }
    return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                             const std::string& origin) {
    const TokenizerJson parsed = parse_tokenizer_json(tokenizer_json, origin);
    const json config = parse_json(config_json, "tokenizer_config.json");
    try {
        return std::make_unique<HfTokenizer>(parsed.root, parsed.vocab, config, origin);
    } catch (const json::exception& e) {
        fail("tokenizer: ", origin, " has an unexpected structure: ", e.what());
    }
}

}  // namespace sluice::tok
