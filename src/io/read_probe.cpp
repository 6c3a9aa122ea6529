// measure_read_gbps: keeps queue_depth reads in flight (through a DirectReader) or queue_depth threads faulting
// pages of an mmap, over a shuffled walk of extent slots, and reports throughput and latency percentiles.
#include "io/read_probe.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include "core/enum_names.h"
#include "core/error.h"
#include "io/os_io.h"

namespace sluice::io {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Slot {
    uint32_t file;
    uint64_t offset;
};

// Every extent slot of every file, shuffled: reads walk it in order and wrap (reshuffled) only if exhausted.
class SlotWalk {
  public:
    SlotWalk(const std::vector<std::string>& files, uint64_t extent_bytes, uint64_t seed) : rng_(seed) {
        for (uint32_t f = 0; f < files.size(); ++f) {
            struct stat st {};
            SLUICE_CHECK(::stat(files[f].c_str(), &st) == 0, "bench-io: cannot stat '", files[f],
                         "': ", std::strerror(errno));
            uint64_t n = uint64_t(st.st_size) / extent_bytes;
            SLUICE_CHECK(n > 0, "bench-io: '", files[f], "' (", st.st_size, " bytes) is smaller than one extent of ",
                         extent_bytes, " bytes");
            for (uint64_t i = 0; i < n; ++i) slots_.push_back({f, i * extent_bytes});
        }
        std::shuffle(slots_.begin(), slots_.end(), rng_);
    }
    Slot next() {
        if (at_ == slots_.size()) {
            std::shuffle(slots_.begin(), slots_.end(), rng_);
            at_ = 0;
        }
        return slots_[at_++];
    }

  private:
    std::vector<Slot> slots_;
    size_t at_ = 0;
    std::mt19937_64 rng_;
};

void fill_percentiles(std::vector<double>& lat_ms, ReadProbeResult& r) {
    if (lat_ms.empty()) return;
    std::sort(lat_ms.begin(), lat_ms.end());
    auto pct = [&](double p) { return lat_ms[std::min(lat_ms.size() - 1, size_t(p * double(lat_ms.size())))]; };
    r.p50_ms = pct(0.50);
    r.p90_ms = pct(0.90);
    r.p99_ms = pct(0.99);
    r.max_ms = lat_ms.back();
}

ReadProbeResult probe_reader(const ReadProbeOptions& o, Backend backend) {
    DirectReader reader(o.files,
                        ReaderOptions{.backend = backend, .queue_depth = o.queue_depth, .chunk_bytes = o.chunk_bytes});
    // Enough extents outstanding that queue_depth chunk reads are always available to issue.
    const uint64_t chunks_per_extent = (padded_bytes(0, o.extent_bytes) + o.chunk_bytes - 1) / o.chunk_bytes;
    const size_t n_slots = size_t((o.queue_depth + chunks_per_extent - 1) / chunks_per_extent + 1);
    std::vector<AlignedBuffer> buffers;
    std::vector<AlignedBuffer*> registered;
    for (size_t i = 0; i < n_slots; ++i)
        buffers.emplace_back(padded_bytes(k_direct_alignment_bytes - 1, o.extent_bytes));
    for (auto& b : buffers) registered.push_back(&b);
    reader.register_buffers(registered);

    SlotWalk walk(o.files, o.extent_bytes, o.seed);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<size_t> free_slots;
    std::vector<Clock::time_point> started(n_slots);
    std::vector<double> lat_ms;
    std::string error;
    uint64_t done_bytes = 0;

    ReadProbeResult r;
    r.method = backend_name(reader.backend());
    const Clock::time_point t0 = Clock::now();
    uint64_t issued_bytes = 0;
    auto issue = [&](size_t slot) {
        Slot s = walk.next();
        ReadExtent e{s.file, s.offset, o.extent_bytes, buffers[slot].data(), buffers[slot].size_bytes(), slot};
        started[slot] = Clock::now();
        issued_bytes += o.extent_bytes;
        reader.submit({&e, 1}, [&](const ReadCompletion& c) {
            std::lock_guard lock(mu);
            lat_ms.push_back(ms_since(started[c.tag]));
            if (!c.ok() && error.empty()) error = c.error;
            if (c.ok()) done_bytes += c.length;
            free_slots.push_back(size_t(c.tag));
            cv.notify_one();
        });
    };
    auto stopping = [&] {
        if (!error.empty()) return true;
        if (o.total_bytes > 0) return issued_bytes >= o.total_bytes;
        return std::chrono::duration<double>(Clock::now() - t0).count() >= o.duration_s;
    };
    for (size_t i = 0; i < n_slots; ++i) issue(i);
    std::unique_lock lock(mu);
    for (;;) {
        cv.wait(lock, [&] { return !free_slots.empty(); });
        if (stopping()) {
            if (free_slots.size() == n_slots) break;
            cv.wait(lock, [&] { return free_slots.size() == n_slots; });
            break;
        }
        size_t slot = free_slots.back();
        free_slots.pop_back();
        lock.unlock();
        issue(slot);
        lock.lock();
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    lock.unlock();
    reader.drain();
    SLUICE_CHECK(error.empty(), "bench-io: ", error);
    r.bytes = done_bytes;
    r.extents = lat_ms.size();
    r.gbps = double(r.bytes) / r.seconds / 1e9;
    fill_percentiles(lat_ms, r);
    return r;
}

ReadProbeResult probe_mmap(const ReadProbeOptions& o) {
    struct Map {
        const uint8_t* data;
        size_t size;
    };
    std::vector<Map> maps;
    for (const std::string& path : o.files) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        SLUICE_CHECK(fd >= 0, "bench-io: cannot open '", path, "': ", std::strerror(errno));
        struct stat st {};
        ::fstat(fd, &st);
        void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        SLUICE_CHECK(p != MAP_FAILED, "bench-io: cannot mmap '", path, "': ", std::strerror(errno));
        maps.push_back({static_cast<const uint8_t*>(p), size_t(st.st_size)});
    }
    SlotWalk walk(o.files, o.extent_bytes, o.seed);
    std::mutex mu;
    std::vector<double> lat_ms;
    std::atomic<uint64_t> issued{0}, done{0};
    const Clock::time_point t0 = Clock::now();
    auto worker = [&] {
        std::vector<uint8_t> sink(o.extent_bytes);
        std::vector<double> mine;
        for (;;) {
            bool stop = o.total_bytes > 0 ? issued.fetch_add(o.extent_bytes) >= o.total_bytes
                                          : std::chrono::duration<double>(Clock::now() - t0).count() >= o.duration_s;
            if (stop) break;
            Slot s;
            {
                std::lock_guard lock(mu);
                s = walk.next();
            }
            Clock::time_point t = Clock::now();
            std::memcpy(sink.data(), maps[s.file].data + s.offset, o.extent_bytes);  // page faults do the reads
            mine.push_back(ms_since(t));
            done += o.extent_bytes;
        }
        std::lock_guard lock(mu);
        lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
    };
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < o.queue_depth; ++i) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    ReadProbeResult r;
    r.method = "mmap";
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& m : maps) ::munmap(const_cast<uint8_t*>(m.data), m.size);
    r.bytes = done.load();
    r.extents = lat_ms.size();
    r.gbps = double(r.bytes) / r.seconds / 1e9;
    fill_percentiles(lat_ms, r);
    return r;
}

constexpr const char* kProbeMethodNames[] = {"uring", "pread", "buffered", "mmap"};  // in ProbeMethod's order
static_assert(std::size(kProbeMethodNames) == size_t(ProbeMethod::Mmap) + 1, "a name for every ProbeMethod");

}  // namespace

const char* probe_method_name(ProbeMethod m) { return enum_name(kProbeMethodNames, m); }

ProbeMethod parse_probe_method(const std::string& name) {
    return parse_enum<ProbeMethod>(kProbeMethodNames, name, "read method");
}

bool evict_from_page_cache(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ::fdatasync(fd);
    bool ok = drop_from_page_cache(fd, 0, 0);
    ::close(fd);
    return ok;
}

uint64_t page_cache_bytes(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st {};
    const bool ok = ::fstat(fd, &st) == 0 && st.st_size > 0;
    void* p = ok ? ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    ::close(fd);
    if (p == MAP_FAILED) return 0;
    const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE)), size = uint64_t(st.st_size);
    std::vector<unsigned char> in((size + page - 1) / page);
    uint64_t bytes = 0;
    if (::mincore(p, size_t(size), in.data()) == 0)
        for (size_t i = 0; i < in.size(); ++i)
            if (in[i] & 1) bytes += std::min<uint64_t>(page, size - uint64_t(i) * page);
    ::munmap(p, size_t(size));
    return bytes;
}

ReadProbeResult measure_read_gbps(const ReadProbeOptions& o) {
    SLUICE_CHECK(!o.files.empty(), "bench-io: no files given");
    SLUICE_CHECK(o.extent_bytes > 0 && o.queue_depth > 0, "bench-io: extent size and queue depth must be positive");
    if (o.evict_first)
        for (const std::string& f : o.files) evict_from_page_cache(f);
    switch (o.method) {
        case ProbeMethod::Uring:
            return probe_reader(o, Backend::Uring);
        case ProbeMethod::Pread:
            return probe_reader(o, Backend::Pread);
        case ProbeMethod::Buffered:
            return probe_reader(o, Backend::Buffered);
        case ProbeMethod::Mmap:
            return probe_mmap(o);
    }
    fail("bench-io: bad method");
}

}  // namespace sluice::io
