#include "formats/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"

namespace fs = std::filesystem;

namespace sluice {

namespace {

constexpr uint64_t kPieceBytes = 1ull << 20;  // unit of parallel generation (a multiple of every element size)

void write_all(int fd, const uint8_t* p, uint64_t n, const std::string& path) {
    while (n > 0) {
        ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1ull << 30));
        if (w < 0) {
            if (errno == EINTR) continue;
            fail(path, ": write failed: ", std::strerror(errno));
        }
        p += w;
        n -= uint64_t(w);
    }
}

struct Piece {
    size_t tensor;
    uint64_t offset, n;
    uint8_t* dst;
};

// Opens `path` for writing; the destructor removes the partial file unless commit() succeeded.
class PartialFile {
public:
    PartialFile(const std::string& final_path) : final_(final_path), tmp_(final_path + ".partial") {
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) fail(tmp_, ": cannot create: ", std::strerror(errno));
    }
    ~PartialFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(tmp_.c_str());
    }
    int fd() const { return fd_; }
    const std::string& tmp_path() const { return tmp_; }
    void commit(bool sync) {
        if (sync && ::fdatasync(fd_) != 0) fail(tmp_, ": fdatasync failed: ", std::strerror(errno));
        int rc = ::close(fd_);
        fd_ = -1;
        if (rc != 0) fail(tmp_, ": close failed: ", std::strerror(errno));
        if (std::rename(tmp_.c_str(), final_.c_str()) != 0)
            fail(final_, ": cannot rename from ", tmp_, ": ", std::strerror(errno));
        committed_ = true;
    }

private:
    std::string final_, tmp_;
    int fd_ = -1;
    bool committed_ = false;
};

}  // namespace

uint64_t TensorToWrite::nbytes() const {
    uint64_t n = 1;
    for (auto d : shape) {
        SLUICE_CHECK(d >= 0, "tensor '", name, "': negative dimension ", d);
        n *= uint64_t(d);
    }
    return n * dtype_size_bytes(dtype);
}

std::string safetensors_header_json(const std::vector<TensorToWrite>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    std::vector<uint64_t>* data_begin) {
    nlohmann::json j = nlohmann::json::object();
    if (!metadata.empty()) j["__metadata__"] = metadata;
    uint64_t offset = 0;
    if (data_begin) data_begin->clear();
    for (const auto& t : tensors) {
        SLUICE_CHECK(!t.name.empty(), "safetensors writer: empty tensor name");
        SLUICE_CHECK(t.name != "__metadata__", "safetensors writer: '__metadata__' is reserved");
        SLUICE_CHECK(!j.contains(t.name), "safetensors writer: duplicate tensor name '", t.name, "'");
        const uint64_t n = t.nbytes();
        j[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
        if (data_begin) data_begin->push_back(offset);
        offset += n;
    }
    std::string s = j.dump();
    s.append((8 - s.size() % 8) % 8, ' ');
    return s;
}

uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors_in,
                           const WriteOptions& opts) {
    // Keep the caller's order if every tensor lands aligned to its element size; otherwise order by element size.
    std::vector<const TensorToWrite*> order;
    uint64_t offset = 0;
    bool aligned = true;
    for (const auto& t : tensors_in) {
        order.push_back(&t);
        if (offset % dtype_size_bytes(t.dtype) != 0) aligned = false;
        offset += t.nbytes();
    }
    if (!aligned)
        std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
            return dtype_size_bytes(a->dtype) > dtype_size_bytes(b->dtype);
        });
    std::vector<TensorToWrite> meta;  // header-only copies (no fill) in file order
    for (auto* t : order) meta.push_back({t->name, t->dtype, t->shape, nullptr});
    for (auto* t : order) SLUICE_CHECK(t->fill || t->nbytes() == 0, path, ": tensor '", t->name, "' has no fill");
    const std::string header = safetensors_header_json(meta, opts.metadata, nullptr);

    ThreadPool& pool = opts.pool ? *opts.pool : default_pool();
    const uint64_t chunk = std::max<uint64_t>(kPieceBytes, opts.chunk_bytes / kPieceBytes * kPieceBytes);
    PartialFile file(path);
    uint8_t len_bytes[8];
    const uint64_t header_len = header.size();
    std::memcpy(len_bytes, &header_len, 8);
    write_all(file.fd(), len_bytes, 8, file.tmp_path());
    write_all(file.fd(), reinterpret_cast<const uint8_t*>(header.data()), header.size(), file.tmp_path());

    // Two buffers: one is generated while the other is written. At most one write is in flight, so the file
    // is written strictly in order; a buffer is refilled only after its write has finished.
    std::vector<uint8_t> bufs[2] = {std::vector<uint8_t>(chunk), std::vector<uint8_t>(chunk)};
    std::future<void> in_flight;
    uint64_t done_bytes = 0, written_bytes = 0;
    size_t ti = 0;
    uint64_t toff = 0;
    int which = 0;
    try {
        while (ti < order.size()) {
            uint8_t* buf = bufs[which].data();
            std::vector<Piece> pieces;
            uint64_t used = 0;
            while (ti < order.size()) {
                const TensorToWrite& t = *order[ti];
                const uint64_t esz = dtype_size_bytes(t.dtype);
                const uint64_t left = t.nbytes() - toff;
                if (left == 0) {
                    ++ti;
                    toff = 0;
                    continue;
                }
                const uint64_t room = (chunk - used) / esz * esz;
                if (room == 0) break;
                const uint64_t n = std::min(left, room);
                for (uint64_t p = 0; p < n; p += kPieceBytes)
                    pieces.push_back({ti, toff + p, std::min(kPieceBytes, n - p), buf + used + p});
                used += n;
                toff += n;
            }
            pool.parallel_for(int64_t(pieces.size()), [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    const Piece& p = pieces[size_t(i)];
                    order[p.tensor]->fill(p.offset, p.dst, p.n);
                }
            });
            if (in_flight.valid()) {
                in_flight.get();
                written_bytes = done_bytes;
                if (opts.progress) opts.progress(written_bytes);
            }
            done_bytes += used;
            in_flight = std::async(std::launch::async, [fd = file.fd(), buf, used, &file] {
                write_all(fd, buf, used, file.tmp_path());
            });
            which ^= 1;
        }
        if (in_flight.valid()) in_flight.get();
    } catch (...) {
        if (in_flight.valid()) in_flight.wait();
        throw;
    }
    if (opts.progress) opts.progress(done_bytes);
    file.commit(opts.sync);
    return 8 + header.size() + done_bytes;
}

ShardedResult write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                        uint64_t max_shard_bytes, const WriteOptions& opts) {
    SLUICE_CHECK(fs::is_directory(dir), dir, ": not a directory");
    std::vector<std::vector<TensorToWrite>> shards(1);
    uint64_t cur = 0, total = 0;
    for (const auto& t : tensors) {
        const uint64_t n = t.nbytes();
        if (max_shard_bytes > 0 && cur > 0 && cur + n > max_shard_bytes) {
            shards.emplace_back();
            cur = 0;
        }
        shards.back().push_back(t);
        cur += n;
        total += n;
    }
    ShardedResult r;
    r.tensor_bytes = total;
    uint64_t base = 0;
    WriteOptions o = opts;
    if (opts.progress) o.progress = [&](uint64_t done) { opts.progress(base + done); };
    if (shards.size() == 1) {
        r.file_bytes = write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], o);
        r.files.push_back("model.safetensors");
        return r;
    }
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        r.file_bytes += write_safetensors((fs::path(dir) / name).string(), shards[s], o);
        for (const auto& t : shards[s]) {
            base += t.nbytes();
            weight_map[t.name] = name;
        }
        r.files.push_back(name);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    r.files.push_back("model.safetensors.index.json");
    return r;
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
    PartialFile file(path);
    write_all(file.fd(), reinterpret_cast<const uint8_t*>(text.data()), text.size(), file.tmp_path());
    file.commit(false);
}

}  // namespace sluice
