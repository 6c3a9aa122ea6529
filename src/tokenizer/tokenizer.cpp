// Factory, shared decoding helpers and the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace sluice::tok {

namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    SLUICE_CHECK(in, "tokenizer: cannot open ", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    SLUICE_CHECK(!in.bad(), "tokenizer: cannot read ", path.string());
    return ss.str();
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    return utf8_lossy(decode_bytes(ids, skip_special));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path root(dir);
    SLUICE_CHECK(fs::is_directory(root), "tokenizer: model folder ", dir, " does not exist or is not a folder");
    const fs::path config_path = root / "tokenizer_config.json";
    const std::string config = fs::exists(config_path) ? read_file(config_path) : std::string();
    const fs::path hf_path = root / "tokenizer.json";
    if (fs::exists(hf_path)) return load_hf_tokenizer(read_file(hf_path), config, hf_path.string());
    const fs::path tt_path = root / "tiktoken.model";
    if (fs::exists(tt_path)) {
        SLUICE_CHECK(!config.empty(), "tokenizer: ", tt_path.string(), " needs tokenizer_config.json beside it");
        return load_tiktoken_tokenizer(read_file(tt_path), config, tt_path.string());
    }
    fail("tokenizer: ", dir, " has neither tokenizer.json nor tiktoken.model");
}

std::string StreamDecoder::push(int32_t id) {
    pending_ += tok_.decode_bytes({id}, skip_special_);
    const size_t stable = utf8_stable_prefix(pending_);
    std::string out = utf8_lossy(std::string_view(pending_).substr(0, stable));
    pending_.erase(0, stable);
    return out;
}

std::string StreamDecoder::finish() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

}  // namespace sluice::tok
