// The tokenizers kept in tests/data/tokenizers, for tests and benchmarks: the full-size tokenizer.json files are
// stored gzipped (tokenizer.json.gz), the small ones as they are. Users link zlib.
#pragma once

#include <zlib.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::test {

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The whole of a gzipped file; empty when it cannot be read.
inline std::string gunzip(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return {};
    std::string out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    gzclose(f);
    return out;
}

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// tests/data/tokenizers/<name>, gunzipping tokenizer.json.gz where that is how it is kept. Missing files throw.
inline std::unique_ptr<tok::Tokenizer> open_tokenizer(const std::string& name) {
    const std::string dir = std::string(SLUICE_TEST_DATA_DIR) + "/tokenizers/" + name;
    const std::string gz = dir + "/tokenizer.json.gz";
    if (!file_exists(gz)) return tok::load_tokenizer(dir);
    const std::string text = gunzip(gz);
    SLUICE_CHECK(!text.empty(), gz, ": cannot be read or is empty");
    return tok::load_hf_tokenizer(text, read_file(dir + "/tokenizer_config.json"), gz);
}

}  // namespace sluice::test
