// `sluice pack SRC DST [--dirs D1,D2]`: writes a packed expert store (one aligned read per expert, striped over
// drives) for streaming with --experts-dir; `sluice pack --verify DST` re-reads it against its checksums.
// Progress on stderr, a one-line summary on stdout.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "experts/packed_store.h"
#include "models/expert_pack.h"

namespace sluice::cli {

namespace {

struct PackArgs {
    std::string src, dst, dirs, verify;
    std::string io_backend = "auto";
    unsigned queue_depth = 32;
    int threads = 0;
    bool no_sync = false;
};

std::function<void(uint64_t, uint64_t)> progress_bar(const char* what, bool* printed) {
    auto t0 = std::chrono::steady_clock::now();
    auto last = std::make_shared<std::chrono::steady_clock::time_point>(t0);
    return [=](uint64_t done, uint64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (done < total && now - *last < std::chrono::milliseconds(250)) return;
        *last = now;
        const double s = std::chrono::duration<double>(now - t0).count();
        const double frac = total ? double(done) / double(total) : 1.0;
        char bar[31];
        for (int i = 0; i < 30; ++i) bar[i] = i < int(frac * 30) ? '#' : '.';
        bar[30] = 0;
        std::fprintf(stderr, "\r%s [%s] %.1f / %.1f MB (%3.0f%%) %.0f MB/s   ", what, bar, double(done) / 1e6,
                     double(total) / 1e6, 100.0 * frac, s > 0 ? double(done) / 1e6 / s : 0.0);
        std::fflush(stderr);
        *printed = true;
    };
}

void run_pack(const PackArgs& a) {
    io::ReaderOptions reader;
    reader.backend = io::parse_backend(a.io_backend);
    reader.queue_depth = a.queue_depth;
    bool printed = false;
    if (!a.verify.empty()) {
        SLUICE_CHECK(a.src.empty() && a.dst.empty(), "pack --verify DST takes no other folders");
        const auto r = verify_packed_store(split_dir_list(a.verify), reader, progress_bar("verify", &printed));
        if (printed) std::fprintf(stderr, "\n");
        std::printf("verify: %llu experts, %.1f MB, all checksums match, %.2f s (%.0f MB/s)\n",
                    (unsigned long long)r.n_experts, double(r.bytes) / 1e6, r.seconds,
                    r.seconds > 0 ? double(r.bytes) / 1e6 / r.seconds : 0.0);
        return;
    }
    SLUICE_CHECK(!a.src.empty() && !a.dst.empty(), "pack: usage: sluice pack SRC DST [--dirs D1,D2] | --verify DST");
    PackOptions o;
    o.src_dir = a.src;
    o.dst_dir = a.dst;
    o.data_dirs = split_dir_list(a.dirs);
    o.reader = reader;
    o.n_threads = a.threads;
    o.sync = !a.no_sync;
    o.progress = progress_bar("pack", &printed);
    const auto r = pack_experts(o);
    if (printed) std::fprintf(stderr, "\n");
    std::printf("pack: %llu experts, %.1f MB into %zu data files in %.2f s (%.0f MB/s); manifest %s\n",
                (unsigned long long)r.n_experts, double(r.file_bytes) / 1e6, r.files.size() - 1, r.seconds,
                r.seconds > 0 ? double(r.file_bytes) / 1e6 / r.seconds : 0.0, r.files.back().c_str());
}

}  // namespace

void register_pack(CLI::App& app) {
    auto args = std::make_shared<PackArgs>();
    auto* sub = app.add_subcommand("pack", "Write routed experts into a packed store for streaming (--experts-dir)");
    sub->footer(
        "Each expert becomes one 4 KiB-aligned extent laid out as the streaming cache slot expects, with an xxh3\n"
        "checksum in DST/manifest.json. Spine tensors stay in SRC. --dirs stripes experts round-robin over several\n"
        "folders (one per drive). Run with: sluice generate -m SRC --experts-dir DST[,D1,D2] ...");
    sub->add_option("src", args->src, "model folder");
    sub->add_option("dst", args->dst, "output folder (manifest.json, and the data unless --dirs)");
    sub->add_option("--dirs", args->dirs, "data folders, comma-separated (one per drive)");
    sub->add_option("--verify", args->verify, "re-read the store in this folder and check every checksum");
    sub->add_option("--io", args->io_backend, "read backend: auto, uring, pread, buffered")->capture_default_str();
    sub->add_option("--qd", args->queue_depth, "reads in flight")->check(positive())->capture_default_str();
    sub->add_option("-t,--threads", args->threads, "copy/checksum threads (0 = all cores)")->check(non_negative());
    sub->add_flag("--no-sync", args->no_sync, "skip fdatasync before renaming data files");
    sub->callback([args] { run_pack(*args); });
}

}  // namespace sluice::cli
