// DirectReader: opens files once, picks the backend (io_uring -> pread -> buffered, logging once per distinct
// reason why a fallback was taken), validates and splits extents into chunk reads, and hands them to the engine.
#include "io/direct_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>
#include <set>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"
#include "io/os_io.h"
#include "io/read_engine.h"

namespace sluice::io {

namespace {

void log_once(const std::string& message) {
    static std::mutex mu;
    static std::set<std::string> seen;
    std::lock_guard lock(mu);
    if (seen.insert(message).second) log_info(message);
}

// Opens path with O_DIRECT and proves a 4 KiB read works. Returns the fd, or -1 with *direct_refused set when
// the filesystem refuses direct I/O (EINVAL at open or read), or -1 with *error set on any other failure.
int open_direct(const std::string& path, bool* direct_refused, std::string* error) {
    if (!k_have_o_direct) {  // this OS has none: every file is read buffered
        *direct_refused = true;
        return -1;
    }
    int fd = ::open(path.c_str(), O_RDONLY | k_open_direct | O_CLOEXEC);
    if (fd < 0) {
        if (errno == EINVAL)
            *direct_refused = true;
        else
            *error = cat("cannot open '", path, "': ", std::strerror(errno));
        return -1;
    }
    AlignedBuffer probe(k_direct_alignment_bytes);
    if (::pread(fd, probe.data(), probe.size_bytes(), 0) < 0 && errno == EINVAL) {
        ::close(fd);
        *direct_refused = true;
        return -1;
    }
    return fd;
}

constexpr const char* kBackendNames[] = {"auto", "uring", "pread", "buffered"};  // in Backend's order
static_assert(std::size(kBackendNames) == size_t(Backend::Buffered) + 1, "a name for every Backend");

}  // namespace

const char* backend_name(Backend b) { return enum_name(kBackendNames, b); }

Backend parse_backend(const std::string& name) { return parse_enum<Backend>(kBackendNames, name, "I/O backend"); }

DirectReader::DirectReader(std::vector<std::string> paths, ReaderOptions options)
    : paths_(std::move(paths)), options_(options) {
    SLUICE_CHECK(options_.queue_depth >= 1 && options_.queue_depth <= 4096, "DirectReader: queue depth ",
                 options_.queue_depth, " out of range [1, 4096]");
    SLUICE_CHECK(options_.chunk_bytes >= k_direct_alignment_bytes &&
                     options_.chunk_bytes % k_direct_alignment_bytes == 0 && options_.chunk_bytes <= (1u << 30),
                 "DirectReader: chunk size ", options_.chunk_bytes, " is not a multiple of 4096 in [4 KiB, 1 GiB]");
    const Backend wanted = options_.backend;
    fds_.assign(paths_.size(), -1);
    open_errors_.assign(paths_.size(), "");

    // O_DIRECT for every file, unless one refuses it: then all files are read buffered (or we fail if the
    // caller insisted on a direct backend).
    direct_ = wanted != Backend::Buffered;
    if (direct_) {
        for (size_t i = 0; i < paths_.size() && direct_; ++i) {
            bool refused = false;
            fds_[i] = open_direct(paths_[i], &refused, &open_errors_[i]);
            if (refused) {
                direct_ = false;
                fallback_reason_ = k_have_o_direct ? cat("O_DIRECT refused for '", paths_[i],
                                                         "' (EINVAL: the filesystem, e.g. tmpfs, has no direct I/O)")
                                                   : std::string("this system has no O_DIRECT");
            }
        }
        if (!direct_) {
            SLUICE_CHECK(wanted == Backend::Auto, "I/O backend ", backend_name(wanted),
                         " unavailable: ", fallback_reason_);
            for (int& fd : fds_)
                if (fd >= 0) ::close(fd);
            fds_.assign(paths_.size(), -1);
            open_errors_.assign(paths_.size(), "");
        }
    }
    if (!direct_) {
        for (size_t i = 0; i < paths_.size(); ++i) {
            fds_[i] = ::open(paths_[i].c_str(), O_RDONLY | O_CLOEXEC);
            if (fds_[i] < 0) open_errors_[i] = cat("cannot open '", paths_[i], "': ", std::strerror(errno));
        }
        backend_ = Backend::Buffered;
    } else if (wanted == Backend::Pread) {
        backend_ = Backend::Pread;
    } else {
        try {
            engine_ = make_uring_engine(paths_, fds_, options_.queue_depth, options_.register_files);
            backend_ = Backend::Uring;
        } catch (const Error& e) {
            if (wanted == Backend::Uring) {
                for (int fd : fds_)
                    if (fd >= 0) ::close(fd);
                fail("I/O backend uring unavailable: ", e.what());
            }
            fallback_reason_ = e.what();
            backend_ = Backend::Pread;
        }
    }
    if (!engine_) engine_ = make_pread_engine(paths_, fds_, options_.queue_depth, direct_);
    if (wanted == Backend::Auto && backend_ != Backend::Uring)
        log_once(cat("sluice: reading with the ", backend_name(backend_), " backend: ", fallback_reason_));
}

DirectReader::~DirectReader() {
    engine_.reset();  // waits for reads in flight
    for (int fd : fds_)
        if (fd >= 0) ::close(fd);
}

bool DirectReader::register_buffers(std::span<AlignedBuffer* const> buffers) {
    return engine_->register_buffers(buffers);
}

void DirectReader::set_fault_plan(const FaultPlan& plan) { engine_->set_fault_plan(plan); }

void DirectReader::drain() { engine_->drain(); }

ReadBatch DirectReader::submit(std::span<const ReadExtent> extents, CompletionFn on_complete) {
    for (size_t i = 0; i < extents.size(); ++i) {
        const ReadExtent& e = extents[i];
        SLUICE_CHECK(e.file < paths_.size(), "read extent ", i, ": file index ", e.file, " out of range (",
                     paths_.size(), " files)");
        SLUICE_CHECK(e.length > 0, "read extent ", i, " of '", paths_[e.file], "' at offset ", e.offset,
                     " has zero length");
        SLUICE_CHECK(reinterpret_cast<uintptr_t>(e.dest) % k_direct_alignment_bytes == 0 && e.dest != nullptr,
                     "read extent ", i, " of '", paths_[e.file], "': destination is not 4096-byte aligned");
        SLUICE_CHECK(e.dest_capacity >= padded_bytes(e.offset, e.length), "read extent ", i, " of '", paths_[e.file],
                     "' at offset ", e.offset, ": destination holds ", e.dest_capacity,
                     " bytes, the aligned read needs ", padded_bytes(e.offset, e.length));
    }
    auto batch = std::make_shared<BatchState>(extents.size(), std::move(on_complete));
    std::vector<ReadOp*> ops;
    std::vector<uint32_t> unopened;
    for (size_t i = 0; i < extents.size(); ++i) {
        const ReadExtent& e = extents[i];
        batch->extents[i].extent = e;
        if (fds_[e.file] < 0) {
            unopened.push_back(uint32_t(i));
            continue;
        }
        const uint64_t begin = align_down(e.offset, k_direct_alignment_bytes);
        const uint64_t end = align_up(e.offset + e.length, k_direct_alignment_bytes);
        const uint64_t needed_end = e.offset + e.length;
        uint32_t n_ops = 0;
        for (uint64_t at = begin; at < end; at += options_.chunk_bytes) {
            auto* op = new ReadOp;
            op->batch = batch;
            op->extent = uint32_t(i);
            op->file = e.file;
            op->file_offset = at;
            op->dest = e.dest + (at - begin);
            op->length = std::min(options_.chunk_bytes, end - at);
            op->needed = std::min(at + op->length, needed_end) - at;
            ops.push_back(op);
            ++n_ops;
        }
        batch->extents[i].ops_left.store(n_ops);
    }
    if (!ops.empty()) engine_->enqueue(std::move(ops));
    for (uint32_t i : unopened)
        engine_->fail_extent(batch, i,
                             cat(open_errors_[extents[i].file], " (extent at offset ", extents[i].offset, ", ",
                                 extents[i].length, " bytes)"));
    return ReadBatch(batch);
}

bool DirectReader::backend_available(Backend backend, const std::string& path, std::string* why_not) {
    try {
        DirectReader reader({path}, ReaderOptions{.backend = backend, .queue_depth = 1});
        if (!reader.open_errors_[0].empty()) {
            if (why_not) *why_not = reader.open_errors_[0];
            return false;
        }
        return true;
    } catch (const Error& e) {
        if (why_not) *why_not = e.what();
        return false;
    }
}

void ReadBatch::wait() {
    SLUICE_CHECK(state_ != nullptr, "ReadBatch::wait on an empty batch");
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done; });
    for (const std::string& e : state_->errors)
        if (!e.empty()) throw Error(e);
}

bool ReadBatch::ready() const {
    if (!state_) return true;
    std::lock_guard lock(state_->mu);
    return state_->done;
}

std::vector<std::string> ReadBatch::errors() const {
    if (!state_) return {};
    std::lock_guard lock(state_->mu);
    return state_->errors;
}

}  // namespace sluice::io
