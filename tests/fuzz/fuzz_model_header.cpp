// Fuzzes a model folder whose model.safetensors header is the input: byte 0 picks one of the committed
// single-file fixtures, the rest is the JSON header written in front of that fixture's own data section. Tensor
// names, dtypes, shapes and offsets then disagree with the config and with each other in every way (scales whose
// shape does not fit the weight, a weight in another dtype, offsets into the wrong bytes), and loading plus one
// token must end in sluice::Error or run, never crash, exhaust memory or hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_model_util.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
    std::string dir;   // scratch folder: a link to the config, model.safetensors written per input
    std::string data;  // the fixture's data section (the bytes after its header)
};

struct Fixtures {
    sluice::fuzz::ScratchDir scratch{"fuzz_model_header"};
    std::vector<Fixture> all;
    Fixtures() {
        const fs::path root = scratch.path;
        for (const auto& fx : sluice::fuzz::fixtures_with("model.safetensors")) {
            std::ifstream f(fx / "model.safetensors", std::ios::binary);
            const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            uint64_t header_bytes = 0;
            if (bytes.size() < 8) std::abort();
            std::memcpy(&header_bytes, bytes.data(), 8);
            const fs::path d = root / fx.filename();
            fs::create_directory(d);
            fs::create_symlink(fx / "config.json", d / "config.json");
            all.push_back({d.string(), bytes.substr(8 + header_bytes)});
        }
        if (all.empty()) std::abort();
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Fixtures fixtures;
    if (size < 1) return 0;
    const Fixture& fx = fixtures.all[data[0] % fixtures.all.size()];
    {
        std::ofstream f(fx.dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
        const uint64_t header_bytes = size - 1;
        f.write(reinterpret_cast<const char*>(&header_bytes), 8);
        f.write(reinterpret_cast<const char*>(data + 1), std::streamsize(header_bytes));
        f.write(fx.data.data(), std::streamsize(fx.data.size()));
    }
    sluice::fuzz::load_and_run_one_token(fx.dir);
    return 0;
}
