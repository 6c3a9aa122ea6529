// Shared by the fuzz targets that load a model folder: a scratch folder under the system temp directory
// (removed at exit), the committed fixture folders that hold a given file, and loading a folder then running one token through it, where sluice::Error is the only
// acceptable failure (anything else reaches libFuzzer as a crash).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "runtime/batch.h"

namespace sluice::fuzz {

struct ScratchDir {
    std::filesystem::path path;
    explicit ScratchDir(const std::string& name) {
        std::string tmpl = (std::filesystem::temp_directory_path() / (name + ".XXXXXX")).string();
        if (!mkdtemp(tmpl.data())) std::abort();
        path = tmpl;
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

// The folders under tests/data/fixtures that hold `file`, sorted (so byte 0 of an input picks the same one each run).
inline std::vector<std::filesystem::path> fixtures_with(const std::string& file) {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(SLUICE_TEST_DATA_DIR "/fixtures"))
        if (std::filesystem::exists(e.path() / file)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

inline void load_and_run_one_token(const std::string& dir) {
    try {
        LoadOptions opt;
        opt.n_threads = 1;
        opt.max_context_tokens = 16;
        auto model = load_model(dir, opt);
        auto seq = model->new_sequence();
        Batch batch;
        batch.add(int32_t(1 % model->info().vocab_size), 0, 0, true);
        SequenceState* seqs[] = {seq.get()};
        std::vector<float> logits;
        model->forward(*make_exec_context(*model), batch, seqs, logits);
    } catch (const Error&) {
    }
}

}  // namespace sluice::fuzz
