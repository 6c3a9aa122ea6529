// The tokenizer interface used by the engine and the CLI, with the factory that picks the implementation from a
// model folder: tokenizer.json (Hugging Face byte-level BPE) or tiktoken.model + tokenizer_config.json (Kimi).
// Encoding recognises special-token strings in the text; add_special only controls the BOS/EOS the
// post-processor adds. Decoding is lossy UTF-8 (U+FFFD for invalid bytes), as the references decode.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tok {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    // text may be any bytes; invalid UTF-8 is first repaired to U+FFFD.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
    // Raw concatenated bytes of the tokens (may end inside a UTF-8 sequence). Throws on an id out of range.
    virtual std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

    // The token's text in the vocabulary's own form (byte-level string for tokenizer.json, raw bytes for tiktoken).
    virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
    virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
    virtual bool is_special(int32_t id) const = 0;

    virtual int32_t vocab_size() const = 0;  // one past the largest id
    std::optional<int32_t> bos_id() const { return bos_id_; }
    std::optional<int32_t> eos_id() const { return eos_id_; }

protected:
    std::optional<int32_t> bos_id_, eos_id_;
};

// Loads dir/tokenizer.json (preferred) or dir/tiktoken.model, each with dir/tokenizer_config.json if present.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

// From in-memory file contents; config_json may be empty.
std::unique_ptr<Tokenizer> load_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                             const std::string& origin);
std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(std::string_view tiktoken_model, std::string_view config_json,
                                                   const std::string& origin);

// Incremental detokenizer: push ids as they are generated; each call returns only complete UTF-8, holding back a
// trailing partial sequence. The concatenation of all push() results and finish() equals decode(all ids).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false) : tok_(tok), skip_special_(skip_special) {}
    std::string push(int32_t id);
    std::string finish();

private:
    const Tokenizer& tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace sluice::tok
