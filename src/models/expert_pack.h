// `sluice pack`: rewrites a model's routed experts into a packed expert store (experts/packed_store.h), one
// 4 KiB-aligned extent per expert laid out as the streaming slot expects, striped round-robin over one or more
// folders; and verifies a store by re-reading every expert against its checksum. Spine tensors stay in the
// model folder, which the manifest names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/direct_reader.h"

namespace sluice {

struct PackOptions {
    std::string src_dir;                        // the model folder
    std::string dst_dir;                        // receives manifest.json (and the data when data_dirs is empty)
    std::vector<std::string> data_dirs;         // one per drive; experts striped round-robin (empty: dst_dir)
    io::ReaderOptions reader;                   // how the source is read
    uint64_t batch_bytes = uint64_t(64) << 20;  // experts read, packed and written per step
    int n_threads = 0;                          // copy + checksum workers (0: all cores)
    bool sync = true;                           // fdatasync data files before renaming them
    std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;
};

struct PackResult {
    uint64_t n_experts = 0;
    uint64_t expert_bytes = 0;  // the experts' own bytes
    uint64_t file_bytes = 0;    // written, alignment padding included
    double seconds = 0;
    std::vector<std::string> files;  // data files then the manifest
};

PackResult pack_experts(const PackOptions& options);

struct VerifyResult {
    uint64_t n_experts = 0;
    uint64_t bytes = 0;  // read from the data files
    double seconds = 0;
};

// dirs as for --experts-dir. Throws Error naming the first expert whose bytes do not match its checksum
// (layer, expert, file, offset), or a missing/truncated file.
VerifyResult verify_packed_store(const std::vector<std::string>& dirs, const io::ReaderOptions& reader = {},
                                 const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace sluice
