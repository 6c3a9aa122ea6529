// Fuzzes loading a model folder whose config.json (or shard index) is the input. Byte 0 picks one of the committed
// fixtures (every architecture sluice runs) and, with its top bit set, a sharded one's
// model.safetensors.index.json instead of the config; the rest of the input replaces that file, the weights stay.
// This reaches every architecture's config validation, the shard index, and the binding of the checkpoint's
// tensors to the shapes the config claims, then one token through the model when it loads. Bad input must end in
// sluice::Error, never a crash, an out-of-memory or a hang (libFuzzer reports all three).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_model_util.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kIndex = "model.safetensors.index.json";

std::string read_all(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const char* data, size_t size) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(data, std::streamsize(size));
}

// One scratch folder per fixture: links to its weights; config.json and the index written per input.
struct Folders {
    sluice::fuzz::ScratchDir scratch{"fuzz_model_config"};
    std::vector<std::string> dirs, configs;
    std::vector<size_t> sharded;       // fixtures with an index
    std::vector<std::string> indexes;  // their index text, same order
    Folders() {
        const fs::path root = scratch.path;
        for (const auto& fx : sluice::fuzz::fixtures_with("config.json")) {
            const fs::path d = root / fx.filename();
            fs::create_directory(d);
            for (const auto& f : fs::directory_iterator(fx))
                if (f.path().filename() != "config.json" && f.path().filename() != kIndex)
                    fs::create_symlink(f.path(), d / f.path().filename());
            if (fs::exists(fx / kIndex)) {
                sharded.push_back(dirs.size());
                indexes.push_back(read_all(fx / kIndex));
            }
            dirs.push_back(d.string());
            configs.push_back(read_all(fx / "config.json"));
        }
        if (dirs.empty() || sharded.empty()) std::abort();
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Folders folders;
    if (size < 1) return 0;
    const char* rest = reinterpret_cast<const char*>(data + 1);
    std::string dir;
    if (data[0] & 0x80) {  // the index of a sharded fixture, its config as committed
        const size_t s = (data[0] & 0x7F) % folders.sharded.size(), i = folders.sharded[s];
        dir = folders.dirs[i];
        write_all(dir + "/config.json", folders.configs[i].data(), folders.configs[i].size());
        write_all(dir + "/" + kIndex, rest, size - 1);
    } else {
        const size_t i = data[0] % folders.dirs.size();
        dir = folders.dirs[i];
        write_all(dir + "/config.json", rest, size - 1);
        for (size_t s = 0; s < folders.sharded.size(); ++s)
            if (folders.sharded[s] == i)
                write_all(dir + "/" + kIndex, folders.indexes[s].data(), folders.indexes[s].size());
    }
    sluice::fuzz::load_and_run_one_token(dir);
    return 0;
}
