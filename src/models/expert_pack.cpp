// Packing a model's routed experts into a packed store, and verifying a store. Both run a two-deep pipeline:
// the DirectReader fills one batch of slots while the previous batch is copied into place, checksummed (on the
// thread pool) and written with one large pwrite per data file.
#include "models/expert_pack.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "experts/packed_store.h"
#include "formats/checkpoint.h"
#include "io/os_io.h"
#include "models/model.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t k_align = io::k_direct_alignment_bytes;
using Clock = std::chrono::steady_clock;

struct Entry {
    int32_t layer = 0, expert = 0;
    const ExpertLocation* src = nullptr;
    uint32_t dir = 0;
    uint64_t file_offset = 0, length = 0;
    std::array<uint64_t, 6> rel{};  // part offsets inside the packed expert
    uint64_t xxh3 = 0;
};

// Writes are O_DIRECT where the filesystem allows (buffers, offsets and lengths are 4 KiB multiples), which on
// some systems is several times faster than going through the page cache; on EINVAL the file falls back.
void pwrite_all(int fd, const uint8_t* p, uint64_t n, uint64_t offset, const std::string& path) {
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, size_t(std::min<uint64_t>(n, uint64_t(1) << 30)), off_t(offset));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && io::k_have_o_direct && (::fcntl(fd, F_GETFL) & io::k_open_direct)) {
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~io::k_open_direct);
            continue;
        }
        SLUICE_CHECK(w > 0, path, ": write at offset ", offset, " failed: ", w < 0 ? std::strerror(errno) : "no space");
        p += w;
        n -= uint64_t(w);
        offset += uint64_t(w);
    }
}

void fsync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

// Data files written under temporary names; removed unless committed.
struct OutFiles {
    std::vector<std::string> final_paths, tmp_paths;
    std::vector<int> fds;
    bool committed = false;
    ~OutFiles() {
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
        if (!committed)
            for (const auto& t : tmp_paths) ::unlink(t.c_str());
    }
};

// The tensor holding a byte of a checkpoint file (for the manifest's informational names).
struct TensorIndex {
    std::vector<std::vector<std::pair<uint64_t, std::string>>> by_file;  // sorted (file offset, name)
    explicit TensorIndex(const Checkpoint& ck) {
        for (const auto& f : ck.files()) {
            auto& v = by_file.emplace_back();
            for (const auto& t : f->header().tensors) v.emplace_back(f->header().data_offset + t.begin, t.name);
            std::sort(v.begin(), v.end());
        }
    }
    std::string name_at(uint32_t file, uint64_t offset) const {
        if (file >= by_file.size()) return "?";
        const auto& v = by_file[file];
        auto it = std::upper_bound(v.begin(), v.end(), std::make_pair(offset, std::string("\xff")));
        return it == v.begin() ? "?" : std::prev(it)->second;
    }
};

}  // namespace

PackResult pack_experts(const PackOptions& o) {
    const auto t0 = Clock::now();
    SLUICE_CHECK(fs::is_directory(o.src_dir), "pack: ", o.src_dir, " is not a model folder");
    fs::create_directories(o.dst_dir);
    SLUICE_CHECK(!fs::equivalent(o.src_dir, o.dst_dir), "pack: the output folder must differ from the model folder");
    std::vector<std::string> dirs = o.data_dirs.empty() ? std::vector<std::string>{o.dst_dir} : o.data_dirs;
    for (auto& d : dirs) {
        fs::create_directories(d);
        d = fs::absolute(d).lexically_normal().string();
    }
    // An old manifest must not outlive the data it described while the new files are renamed in.
    const fs::path manifest_path = fs::path(o.dst_dir) / k_packed_manifest_name;
    if (fs::exists(manifest_path)) {
        fs::remove(manifest_path);
        fsync_dir(o.dst_dir);
    }

    LoadOptions lo;
    lo.n_threads = 1;
    lo.stream_experts = true;
    lo.streaming.staging_experts = 1;
    lo.streaming.reader = o.reader;
    auto model = load_model(o.src_dir, lo);
    const StreamingExpertSource* streaming = model->streaming();
    SLUICE_CHECK(streaming, "pack: ", o.src_dir, " has no routed experts to pack");
    const ExpertLayout& src = streaming->layout();
    const Checkpoint ck(o.src_dir);
    const TensorIndex tensors(ck);

    PackedManifest m;
    m.source_dir = fs::absolute(o.src_dir).lexically_normal().string();
    m.config_xxh3 = config_xxh3_of(o.src_dir);
    m.tensor_names_xxh3 = tensor_names_xxh3_of(ck);
    m.n_tensors = ck.names().size();
    m.dirs = dirs;

    // Layout: expert-major, each expert padded to 4 KiB, round-robin over the folders.
    std::vector<Entry> entries;
    std::vector<uint64_t> next(dirs.size(), 0);
    uint64_t src_slot = 0, max_padded = 0, total_bytes = 0, expert_bytes = 0;
    for (size_t l = 0; l < src.where.size(); ++l) {
        if (src.where[l].empty()) continue;
        PackedLayer L;
        L.layer = int64_t(l);
        L.n_experts = int64_t(src.where[l].size());
        const ExpertWeights& w0 = src.where[l][0].shape;
        for (int k = 0; k < 3; ++k) {
            const Weight& w = expert_matrix(w0, k);
            L.matrices[size_t(k)] = {w.format, w.rows, w.cols};
        }
        for (int k = 0; k < src.where[l][0].n_parts; ++k)
            L.tensors.push_back(
                tensors.name_at(src.where[l][0].parts[size_t(k)].file, src.where[l][0].parts[size_t(k)].offset));
        m.layers.push_back(L);
        for (size_t x = 0; x < src.where[l].size(); ++x) {
            Entry e;
            e.layer = int32_t(l);
            e.expert = int32_t(x);
            e.src = &src.where[l][x];
            uint64_t off = 0;
            for (int k = 0; k < e.src->n_parts; ++k) {
                e.rel[size_t(k)] = off;
                e.length = off + e.src->parts[size_t(k)].length;
                off = io::align_up(e.length, k_align);
                expert_bytes += e.src->parts[size_t(k)].length;
            }
            total_bytes += e.length;
            e.dir = uint32_t(entries.size() % dirs.size());
            e.file_offset = next[e.dir];
            next[e.dir] += io::align_up(e.length, k_align);
            src_slot = std::max(src_slot, e.src->slot_end());
            max_padded = std::max(max_padded, io::align_up(e.length, k_align));
            entries.push_back(e);
        }
    }

    OutFiles out;
    for (size_t d = 0; d < dirs.size(); ++d) {
        char name[32];
        std::snprintf(name, sizeof name, "experts-%02zu.bin", d);
        out.final_paths.push_back((fs::path(dirs[d]) / name).string());
        out.tmp_paths.push_back(out.final_paths.back() + ".tmp");
        const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
        int fd = ::open(out.tmp_paths.back().c_str(), flags | io::k_open_direct, 0644);
        if (fd < 0 && errno == EINVAL) fd = ::open(out.tmp_paths.back().c_str(), flags, 0644);
        SLUICE_CHECK(fd >= 0, out.tmp_paths.back(), ": cannot create: ", std::strerror(errno));
        out.fds.push_back(fd);
        m.files.push_back({uint32_t(d), name, next[d]});
    }

    const size_t per_batch = size_t(std::max<uint64_t>(1, o.batch_bytes / src_slot));
    const size_t per_dir = (per_batch + dirs.size() - 1) / dirs.size();
    io::AlignedBuffer staging[2] = {io::AlignedBuffer(per_batch * src_slot), io::AlignedBuffer(per_batch * src_slot)};
    std::vector<io::AlignedBuffer> packed;
    for (size_t d = 0; d < dirs.size(); ++d) packed.emplace_back(per_dir * max_padded);
    ThreadPool pool(o.n_threads);
    io::DirectReader reader(src.paths, o.reader);  // after the buffers: its destructor waits for reads into them

    auto submit = [&](size_t b0) {
        const size_t b1 = std::min(entries.size(), b0 + per_batch);
        uint8_t* base = staging[(b0 / per_batch) % 2].data();
        std::vector<io::ReadExtent> extents;
        for (size_t i = b0; i < b1; ++i) {
            uint8_t* slot = base + (i - b0) * src_slot;
            for (int k = 0; k < entries[i].src->n_reads; ++k) {
                const ExpertPart& r = entries[i].src->reads[size_t(k)];
                extents.push_back({r.file, r.offset, r.length, slot + r.slot_offset, src_slot - r.slot_offset, i});
            }
        }
        return reader.submit(extents);
    };

    uint64_t done_bytes = 0;
    io::ReadBatch cur = submit(0);
    for (size_t b0 = 0; b0 < entries.size(); b0 += per_batch) {
        const size_t b1 = std::min(entries.size(), b0 + per_batch);
        io::ReadBatch next_batch;
        if (b1 < entries.size()) next_batch = submit(b1);
        cur.wait();
        const uint8_t* base = staging[(b0 / per_batch) % 2].data();
        std::vector<uint64_t> dir_base(dirs.size(), UINT64_MAX), dir_end(dirs.size(), 0);
        for (size_t i = b0; i < b1; ++i) {
            const Entry& e = entries[i];
            dir_base[e.dir] = std::min(dir_base[e.dir], e.file_offset);
            dir_end[e.dir] = std::max(dir_end[e.dir], e.file_offset + io::align_up(e.length, k_align));
        }
        pool.parallel_for(int64_t(b1 - b0), [&](int64_t lo, int64_t hi) {
            for (int64_t j = lo; j < hi; ++j) {
                Entry& e = entries[b0 + size_t(j)];
                const uint8_t* slot = base + size_t(j) * src_slot;
                uint8_t* dst = packed[e.dir].data() + (e.file_offset - dir_base[e.dir]);
                uint64_t end = 0;
                for (int k = 0; k < e.src->n_parts; ++k) {
                    const ExpertPart& p = e.src->parts[size_t(k)];
                    std::memset(dst + end, 0, e.rel[size_t(k)] - end);
                    std::memcpy(dst + e.rel[size_t(k)], slot + p.slot_offset + io::head_bytes(p.offset), p.length);
                    end = e.rel[size_t(k)] + p.length;
                }
                std::memset(dst + end, 0, io::align_up(e.length, k_align) - end);
                e.xxh3 = XXH3_64bits(dst, e.length);
            }
        });
        auto write_dir = [&](size_t d) {
            if (dir_end[d] > 0)
                pwrite_all(out.fds[d], packed[d].data(), dir_end[d] - dir_base[d], dir_base[d], out.tmp_paths[d]);
        };
        if (dirs.size() == 1) {
            write_dir(0);
        } else {
            std::vector<std::thread> writers;
            std::vector<std::string> errors(dirs.size());
            for (size_t d = 0; d < dirs.size(); ++d)
                writers.emplace_back([&, d] {
                    try {
                        write_dir(d);
                    } catch (const Error& e) {
                        errors[d] = e.what();
                    }
                });
            for (auto& t : writers) t.join();
            for (const auto& e : errors) SLUICE_CHECK(e.empty(), e);
        }
        for (size_t i = b0; i < b1; ++i) done_bytes += entries[i].length;
        if (o.progress) o.progress(done_bytes, total_bytes);
        cur = next_batch;
    }

    PackResult r;
    for (size_t d = 0; d < dirs.size(); ++d) {
        if (o.sync)
            SLUICE_CHECK(::fdatasync(out.fds[d]) == 0, out.tmp_paths[d], ": fdatasync failed: ", std::strerror(errno));
        ::close(out.fds[d]);
        out.fds[d] = -1;
        SLUICE_CHECK(std::rename(out.tmp_paths[d].c_str(), out.final_paths[d].c_str()) == 0, out.final_paths[d],
                     ": cannot rename from ", out.tmp_paths[d], ": ", std::strerror(errno));
        fsync_dir(dirs[d]);
        r.files.push_back(out.final_paths[d]);
        r.file_bytes += next[d];
    }
    out.committed = true;
    for (const auto& e : entries) {
        PackedExpert pe{.layer = e.layer, .expert = e.expert, .file = e.dir, .offset = e.file_offset,
                        .length = e.length, .xxh3 = e.xxh3};
        for (int k = 0; k < e.src->n_parts; ++k) pe.parts.push_back({e.rel[size_t(k)], e.src->parts[size_t(k)].length});
        m.experts.push_back(std::move(pe));
    }
    write_manifest_atomic(o.dst_dir, m);
    r.files.push_back(manifest_path.string());
    r.n_experts = entries.size();
    r.expert_bytes = expert_bytes;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
}

VerifyResult verify_packed_store(const std::vector<std::string>& dirs, const io::ReaderOptions& reader_options,
                                 const std::function<void(uint64_t, uint64_t)>& progress) {
    const auto t0 = Clock::now();
    const PackedStore store = open_packed_store(dirs);
    const auto& experts = store.manifest.experts;
    SLUICE_CHECK(!experts.empty(), store.manifest_path, ": lists no experts");
    uint64_t slot = 0, total = 0;
    for (const auto& e : experts) {
        slot = std::max(slot, io::align_up(e.length, k_align));
        total += e.length;
    }
    const size_t per_batch = size_t(std::max<uint64_t>(1, (uint64_t(64) << 20) / slot));
    io::AlignedBuffer buffers[2] = {io::AlignedBuffer(per_batch * slot), io::AlignedBuffer(per_batch * slot)};
    io::DirectReader reader(store.paths, reader_options);
    ThreadPool pool(0);

    auto submit = [&](size_t b0) {
        const size_t b1 = std::min(experts.size(), b0 + per_batch);
        uint8_t* base = buffers[(b0 / per_batch) % 2].data();
        std::vector<io::ReadExtent> extents;
        for (size_t i = b0; i < b1; ++i)
            extents.push_back({experts[i].file, experts[i].offset, experts[i].length, base + (i - b0) * slot, slot, i});
        return reader.submit(extents);
    };
    VerifyResult r;
    std::vector<uint64_t> got(per_batch);
    io::ReadBatch cur = submit(0);
    for (size_t b0 = 0; b0 < experts.size(); b0 += per_batch) {
        const size_t b1 = std::min(experts.size(), b0 + per_batch);
        io::ReadBatch next_batch;
        if (b1 < experts.size()) next_batch = submit(b1);
        try {
            cur.wait();
        } catch (const Error& e) {
            fail(store.manifest_path, ": reading experts ", b0, "..", b1 - 1, " failed: ", e.what());
        }
        const uint8_t* base = buffers[(b0 / per_batch) % 2].data();
        pool.parallel_for(int64_t(b1 - b0), [&](int64_t lo, int64_t hi) {
            for (int64_t j = lo; j < hi; ++j)
                got[size_t(j)] = XXH3_64bits(base + size_t(j) * slot, experts[b0 + size_t(j)].length);
        });
        for (size_t i = b0; i < b1; ++i) {
            const PackedExpert& e = experts[i];
            SLUICE_CHECK(got[i - b0] == e.xxh3, store.manifest_path, ": checksum mismatch for layer ", e.layer,
                         " expert ", e.expert, " in ", store.paths[e.file], " at offset ", e.offset, " (", e.length,
                         " bytes): xxh3 ", hex64(got[i - b0]), ", manifest says ", hex64(e.xxh3));
            r.bytes += e.length;
            ++r.n_experts;
        }
        if (progress) progress(r.bytes, total);
        cur = next_batch;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
}

}  // namespace sluice
