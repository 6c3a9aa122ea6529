// Raw read-bandwidth probe for `sluice bench-io` / `sluice bench`: random reads of expert-sized extents with no
// compute, through a DirectReader backend or through mmap page faults, reporting GB/s and per-extent latency
// percentiles. Extents are drawn without replacement (a shuffled walk over extent slots) so a run never re-reads
// bytes the page cache may still hold; buffered and mmap runs first drop the files from the page cache with
// POSIX_FADV_DONTNEED (no root needed), so every method is measured cold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/direct_reader.h"

namespace sluice::io {

enum class ProbeMethod { Uring, Pread, Buffered, Mmap };
const char* probe_method_name(ProbeMethod m);
ProbeMethod parse_probe_method(const std::string& name);  // "uring", "pread", "buffered", "mmap"

struct ReadProbeOptions {
    std::vector<std::string> files;
    uint64_t extent_bytes = 17'547'264;  // one Kimi K3 MXFP4 expert
    unsigned queue_depth = 16;           // reads in flight (reader backends) or faulting threads (mmap)
    double duration_s = 3.0;             // stop issuing after this long...
    uint64_t total_bytes = 0;            // ...or after this many bytes, if > 0
    ProbeMethod method = ProbeMethod::Uring;
    uint64_t chunk_bytes = 1u << 20;  // reader chunk size
    uint64_t seed = 1;
    bool evict_first = true;
};

struct ReadProbeResult {
    std::string method;  // what actually ran (a reader backend name or "mmap")
    uint64_t bytes = 0;
    uint64_t extents = 0;
    double seconds = 0;
    double gbps = 0;                                        // 1e9 bytes per second
    double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;  // per-extent latency, issue to completion
};

// Throws Error if a file is smaller than one extent, a read fails, or the method is unavailable.
ReadProbeResult measure_read_gbps(const ReadProbeOptions& options);

// Drops a file's cached pages (POSIX_FADV_DONTNEED); false if it could not be opened.
bool evict_from_page_cache(const std::string& path);
// Bytes of a file in the page cache now (mincore over a map of it, whole pages); 0 if it cannot be opened or mapped.
// sluice reads experts and streamed spine layers around the page cache (O_DIRECT, or buffered reads dropped behind
// them), so what a checkpoint gains here during a pass is what the pass read through the memory map: the resident
// spine's first use.
uint64_t page_cache_bytes(const std::string& path);

}  // namespace sluice::io
