// Fuzzes the sequence state file reader (state/state_file): any bytes are either refused with an Error naming the
// file, leaving the target state empty, or loaded; a loaded state saves and loads back to the same tokens and rows.
// Each input is tried twice: as it is, and with its xxh3 trailer made valid, so mutations reach the header, layout
// and layer parsing behind the checksum. The seed corpus holds a valid file for this layout.
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/scratch_dir.h"

#include "core/error.h"
#include "state/state_file.h"

namespace {

using namespace sluice;

std::shared_ptr<const StateLayout> layout() {
    static const auto l = [] {
        auto s = std::make_shared<StateLayout>();
        s->add_latent(5);
        s->add_kv(3);
        s->add_kda(2, 4, 4);
        return s;
    }();
    return l;
}

const StateFileModel k_model{"FuzzTest", 0x1234, 0x5678};

std::string scratch(const char* name) {
    // removed when the fuzzer exits
    static const std::filesystem::path dir = sluice::test::scratch_dir("fuzz_state");
    return (dir / name).string();
}

void try_load(const std::string& bytes) {
    const std::string path = scratch(".in");
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    SequenceState s(layout());
    try {
        load_state(path, k_model, s);
    } catch (const Error& e) {
        if (s.n_past() != 0 || std::string(e.what()).find(path) == std::string::npos) std::abort();
        return;
    }
    const std::string back = scratch(".back");
    save_state(s, k_model, back);
    SequenceState t(layout());
    load_state(back, k_model, t);
    if (t.n_past() != s.n_past() || !std::equal(t.tokens().begin(), t.tokens().end(), s.tokens().begin()) ||
        t.snapshot_position() != s.snapshot_position())
        std::abort();
    for (int64_t r = 0; r < s.n_past(); ++r)
        if (std::memcmp(t.latent(0).data.row(r), s.latent(0).data.row(r), 5 * sizeof(float)) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string bytes(reinterpret_cast<const char*>(data), size);
    try_load(bytes);
    if (bytes.size() >= 8) {
        const uint64_t h = XXH3_64bits(bytes.data(), bytes.size() - 8);
        std::memcpy(bytes.data() + bytes.size() - 8, &h, 8);
        try_load(bytes);
    }
    return 0;
}
