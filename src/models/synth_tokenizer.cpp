#include "models/synth_tokenizer.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/error.h"

namespace sluice::synth {

namespace {

using nlohmann::ordered_json;

const char* const kSpecials[] = {"<|bos|>", "<|eos|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"};
constexpr int kNumSpecials = 6;

// Merges in rank order, written in the byte-level alphabet ("Ġ" is a space). Each side must already exist.
const std::pair<const char*, const char*> kMerges[] = {
    {"h", "e"},    {"Ġ", "t"},   {"Ġ", "a"},    {"i", "n"},    {"r", "e"},   {"o", "n"},   {"Ġt", "he"},
    {"e", "r"},    {"Ġ", "s"},   {"a", "t"},    {"Ġ", "w"},    {"Ġ", "o"},   {"e", "n"},   {"Ġ", "c"},
    {"i", "s"},    {"i", "t"},   {"o", "r"},    {"e", "s"},    {"a", "n"},   {"Ġ", "b"},   {"e", "d"},
    {"Ġ", "f"},    {"in", "g"},  {"Ġ", "p"},    {"o", "u"},    {"Ġa", "n"},  {"a", "l"},   {"a", "r"},
    {"Ġt", "o"},   {"Ġ", "m"},   {"Ġo", "f"},   {"Ġ", "i"},    {"Ġ", "d"},   {"Ġan", "d"}, {"Ġ", "h"},
    {"Ġ", "l"},    {"l", "l"},   {"Ġi", "n"},   {"a", "s"},    {"Ġw", "as"},   {"Ġ", "n"},
    {"Ġi", "s"},   {"Ġ", "Ġ"},   {"Ġt", "h"},   {"Ġth", "at"}, {"l", "e"},   {"Ġ", "e"},   {"Ġ", "g"},
};

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100 + n in byte order.
std::vector<std::string> byte_symbols() {
    std::vector<std::string> out(256);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        const uint32_t cp = printable ? uint32_t(b) : uint32_t(0x100 + extra++);
        std::string s;
        if (cp < 0x80) {
            s += char(cp);
        } else {
            s += char(0xc0 | (cp >> 6));
            s += char(0x80 | (cp & 0x3f));
        }
        out[size_t(b)] = s;
    }
    return out;
}

struct Vocab {
    ordered_json vocab = ordered_json::object();
    ordered_json merges = ordered_json::array();
    int64_t size = 0;
};

const Vocab& vocab() {
    static const Vocab v = [] {
        Vocab v;
        for (int i = 0; i < kNumSpecials; ++i) v.vocab[kSpecials[i]] = v.size++;
        for (const auto& s : byte_symbols()) v.vocab[s] = v.size++;
        for (const auto& [a, b] : kMerges) {
            SLUICE_ASSERT(v.vocab.contains(a) && v.vocab.contains(b), "synth tokenizer merge ", a, " ", b);
            const std::string merged = std::string(a) + b;
            SLUICE_ASSERT(!v.vocab.contains(merged), "synth tokenizer duplicate merge ", merged);
            v.merges.push_back(std::string(a) + " " + b);
            v.vocab[merged] = v.size++;
        }
        // Fill up to 512 ids with letter pairs (most frequent letters first) so that a model whose vocabulary is
        // this size decodes every id it can produce to visible text.
        const std::string letters = "etaoinsrhldcumfpgwybvkxjqz";
        for (char a : letters)
            for (char b : letters) {
                if (v.size >= 512) return v;
                const std::string sa(1, a), sb(1, b);
                if (v.vocab.contains(sa + sb)) continue;
                v.merges.push_back(sa + " " + sb);
                v.vocab[sa + sb] = v.size++;
            }
        return v;
    }();
    return v;
}

ordered_json byte_level(bool trim_offsets, bool use_regex) {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", trim_offsets},
            {"use_regex", use_regex}};
}

}  // namespace

int64_t synth_tokenizer_vocab_size() { return vocab().size; }

std::string synth_tokenizer_json() {
    const Vocab& v = vocab();
    ordered_json added = ordered_json::array();
    for (int i = 0; i < kNumSpecials; ++i)
        added.push_back({{"id", i}, {"content", kSpecials[i]}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}});
    ordered_json j;
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = added;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = byte_level(true, true);
    j["post_processor"] = byte_level(false, true);
    j["decoder"] = byte_level(true, true);
    j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                  {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", v.vocab}, {"merges", v.merges}};
    return j.dump(2) + "\n";
}

std::string synth_tokenizer_config_json() {
    ordered_json decoder = ordered_json::object();
    for (int i = 0; i < kNumSpecials; ++i)
        decoder[std::to_string(i)] = {{"content", kSpecials[i]}, {"lstrip", false}, {"normalized", false},
                                      {"rstrip", false}, {"single_word", false}, {"special", true}};
    ordered_json j;
    j["add_bos_token"] = false;
    j["add_eos_token"] = false;
    j["added_tokens_decoder"] = decoder;
    j["bos_token"] = kSpecials[kSynthBosId];
    j["chat_template"] =
        "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|eos|>"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
    j["clean_up_tokenization_spaces"] = false;
    j["eos_token"] = kSpecials[kSynthEosId];
    j["model_max_length"] = 131072;
    j["pad_token"] = kSpecials[kSynthPadId];
    j["tokenizer_class"] = "PreTrainedTokenizerFast";
    j["unk_token"] = nullptr;
    return j.dump(2) + "\n";
}

}  // namespace sluice::synth
