// Fuzzes the expert trace reader (experts/expert_trace, --trace-experts files): any bytes are either refused with an
// Error naming the file or read; a trace that reads writes back (ExpertTraceWriter) to a file that reads to the same
// records (pass numbers aside). The seed corpus holds a small valid trace.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "experts/expert_trace.h"

namespace {

// This process's scratch files, removed when the fuzzer exits (each run used to leave its two behind).
struct ScratchFiles {
    std::string base = (std::filesystem::temp_directory_path() / ("sluice_fuzz_trace_" + std::to_string(::getpid()))).string();
    ~ScratchFiles() {
        std::error_code ec;
        for (const char* name : {".in", ".back"}) std::filesystem::remove(base + name, ec);
    }
};

std::string scratch(const char* name) {
    static const ScratchFiles files;
    return files.base + name;
}

// The pass number is not compared: the writer numbers passes itself (a new one when the layer does not rise), while
// the reader takes whatever number a record holds.
bool same(const sluice::TraceRecord& a, const sluice::TraceRecord& b) {
    return a.layer == b.layer && a.top_k == b.top_k && a.n_rows == b.n_rows &&
           a.choices == b.choices && a.distinct == b.distinct && a.hints == b.hints;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace sluice;
    const std::string path = scratch(".in");
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
    ExpertTrace t;
    try {
        t = read_expert_trace(path);
    } catch (const Error& e) {
        if (std::string(e.what()).find(path) == std::string::npos) std::abort();
        return 0;
    }
    const std::string back = scratch(".back");
    {
        ExpertTraceWriter w(back, t.header);
        for (const auto& r : t.records) {
            std::vector<int32_t> choices(r.choices.begin(), r.choices.end());
            w.write(r.layer, r.top_k, r.n_rows, choices, r.distinct, r.hints);
        }
        w.close();
    }
    const ExpertTrace u = read_expert_trace(back);
    if (u.records.size() != t.records.size()) std::abort();
    for (size_t i = 0; i < t.records.size(); ++i)
        if (!same(u.records[i], t.records[i])) std::abort();
    return 0;
}
