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

#include "../support/scratch_dir.h"

#include "core/error.h"
#include "experts/expert_trace.h"

namespace {

std::string scratch(const char* name) {
    // removed when the fuzzer exits
    static const std::filesystem::path dir = sluice::test::scratch_dir("fuzz_trace");
    return (dir / name).string();
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
