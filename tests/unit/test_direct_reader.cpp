// DirectReader: random extents (aligned and unaligned, several sizes and files) match a plain read of the same
// bytes on every backend this machine allows, at queue depth 1 and 64; faults (EIO, short reads, EOF), truncated
// and unopenable files become errors naming file and offset, and the reader keeps working afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "../support/scratch_dir.h"
#include "core/error.h"
#include "io/direct_reader.h"
#include "io/read_probe.h"

namespace fs = std::filesystem;
using namespace sluice;
using namespace sluice::io;

namespace {

// Test files live under the working directory (the build tree when run by ctest, a real disk so O_DIRECT works)
// unless SLUICE_TEST_TMPDIR says otherwise; tmpfs just means the direct backends are skipped.
fs::path make_test_dir(const std::string& name) {
    const char* env = std::getenv("SLUICE_TEST_TMPDIR");
    fs::path base = env ? fs::path(env) : fs::current_path();
    fs::path dir = base / ("direct_reader_" + name + "_" + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return test::scratch_dir("direct_reader_" + name);
    return test::scratch_dir_at(dir);
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937_64 rng(seed);
    for (auto& b : v) b = uint8_t(rng());
    return v;
}

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    ASSERT_TRUE(f.good()) << p;
}

struct Case {
    Backend backend;
    unsigned queue_depth;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
    return std::string(backend_name(info.param.backend)) + "_qd" + std::to_string(info.param.queue_depth);
}

class DirectReaderTest : public testing::TestWithParam<Case> {
  protected:
    void SetUp() override {
        dir_ = make_test_dir(case_name({GetParam(), 0}));
        // Sizes deliberately not multiples of 4 KiB so the last extent of each file ends mid-page.
        const size_t sizes[] = {3 * 1024 * 1024 + 1234, 1024 * 1024 + 17, 200 * 1024 + 5};
        for (size_t i = 0; i < 3; ++i) {
            contents_.push_back(random_bytes(sizes[i], 1000 + i));
            paths_.push_back((dir_ / ("f" + std::to_string(i) + ".bin")).string());
            write_file(paths_.back(), contents_.back());
        }
        std::string why;
        if (!DirectReader::backend_available(GetParam().backend, paths_[0], &why))
            GTEST_SKIP() << backend_name(GetParam().backend) << " not available here: " << why;
    }
    void TearDown() override { fs::remove_all(dir_); }

    ReaderOptions options(uint64_t chunk_bytes = 64 * 1024) const {
        return ReaderOptions{
            .backend = GetParam().backend, .queue_depth = GetParam().queue_depth, .chunk_bytes = chunk_bytes};
    }

    // Extents with their own buffers; data checked against contents_.
    struct Planned {
        ReadExtent extent;
        AlignedBuffer buffer;
    };
    std::vector<Planned> plan_random(size_t n, uint64_t seed) {
        std::mt19937_64 rng(seed);
        std::vector<Planned> out;
        for (size_t i = 0; i < n; ++i) {
            uint32_t file = uint32_t(rng() % contents_.size());
            uint64_t size = contents_[file].size();
            uint64_t length;
            switch (rng() % 4) {
                case 0:
                    length = 1 + rng() % 100;
                    break;  // tiny
                case 1:
                    length = 4096 * (1 + rng() % 8);
                    break;  // page multiples
                case 2:
                    length = 1 + rng() % (300 * 1024);
                    break;  // a few chunks
                default:
                    length = 1 + rng() % (2 * 1024 * 1024);
                    break;  // many chunks
            }
            length = std::min(length, size);
            uint64_t offset = rng() % (size - length + 1);
            if (rng() % 3 == 0) offset = align_down(offset, 4096);  // aligned start
            if (rng() % 10 == 0) offset = size - length;            // ends exactly at EOF
            Planned p{ReadExtent{file, offset, length, nullptr, 0, i}, AlignedBuffer(padded_bytes(offset, length))};
            p.extent.dest = p.buffer.data();
            p.extent.dest_capacity = p.buffer.size_bytes();
            out.push_back(std::move(p));
        }
        return out;
    }

    bool matches(const ReadExtent& e, const uint8_t* data) const {
        return std::memcmp(data, contents_[e.file].data() + e.offset, e.length) == 0;
    }

    fs::path dir_;
    std::vector<std::string> paths_;
    std::vector<std::vector<uint8_t>> contents_;
};

TEST_P(DirectReaderTest, RandomExtentsMatchPlainRead) {
    DirectReader reader(paths_, options());
    EXPECT_EQ(reader.backend(), GetParam().backend);
    EXPECT_EQ(reader.direct(), GetParam().backend != Backend::Buffered);
    auto planned = plan_random(150, 7);
    std::vector<ReadExtent> extents;
    for (auto& p : planned) extents.push_back(p.extent);

    std::mutex mu;
    std::vector<int> seen(extents.size(), 0);
    std::vector<std::string> problems;
    ReadBatch batch = reader.submit(extents, [&](const ReadCompletion& c) {
        std::lock_guard lock(mu);
        ++seen[c.index];
        const ReadExtent& e = extents[c.index];
        if (!c.ok())
            problems.push_back(c.error);
        else if (c.tag != e.tag || c.length != e.length || c.data != e.dest + head_bytes(e.offset) ||
                 !matches(e, c.data))
            problems.push_back("extent " + std::to_string(c.index) + " wrong");
    });
    batch.wait();
    EXPECT_TRUE(batch.ready());
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "extent " << i;
    EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST_P(DirectReaderTest, ManyBatchesInFlightAndCallbackSubmits) {
    DirectReader reader(paths_, options(1024 * 1024));
    auto planned = plan_random(40, 11);
    auto second = plan_random(10, 12);
    std::vector<ReadBatch> batches;
    std::atomic<int> ok{0}, bad{0};
    for (auto& p : planned)
        batches.push_back(reader.submit(
            {&p.extent, 1}, [&](const ReadCompletion& c) { (c.ok() && matches(p.extent, c.data) ? ok : bad)++; }));
    // A callback that submits follow-up reads (how a consumer chains work) must not deadlock.
    std::vector<ReadExtent> follow;
    for (auto& p : second) follow.push_back(p.extent);
    ReadBatch chained;
    std::mutex chained_mu;
    std::atomic<bool> submitted{false};
    ReadBatch first = reader.submit({&planned[0].extent, 1}, [&](const ReadCompletion&) {
        std::lock_guard lock(chained_mu);
        chained = reader.submit(follow);
        submitted = true;
    });
    for (auto& b : batches) b.wait();
    first.wait();
    ASSERT_TRUE(submitted.load());
    {
        std::lock_guard lock(chained_mu);
        chained.wait();
    }
    EXPECT_EQ(ok.load(), 40);
    EXPECT_EQ(bad.load(), 0);
    for (size_t i = 0; i < second.size(); ++i)
        EXPECT_TRUE(matches(follow[i], follow[i].dest + head_bytes(follow[i].offset)));
}

TEST_P(DirectReaderTest, RegisteredBuffersReadCorrectly) {
    DirectReader reader(paths_, options(128 * 1024));
    AlignedBuffer arena(8 * 1024 * 1024);
    AlignedBuffer* bufs[] = {&arena};
    reader.register_buffers(bufs);  // may be refused (memlock); reads must be right either way
    std::vector<ReadExtent> extents;
    uint64_t at = 0;
    std::mt19937_64 rng(5);
    for (int i = 0; i < 12; ++i) {
        uint32_t file = uint32_t(i % 2);
        uint64_t length = 1 + rng() % (500 * 1024);
        uint64_t offset = rng() % (contents_[file].size() - length);
        uint64_t need = padded_bytes(offset, length);
        ASSERT_LE(at + need, arena.size_bytes());
        extents.push_back({file, offset, length, arena.data() + at, need, uint64_t(i)});
        at += need;
    }
    reader.submit(extents).wait();
    for (auto& e : extents) EXPECT_TRUE(matches(e, e.dest + head_bytes(e.offset))) << "offset " << e.offset;
}

TEST_P(DirectReaderTest, EioFailsOnlyThatExtentAndReaderStaysUsable) {
    DirectReader reader(paths_, options());
    auto planned = plan_random(6, 21);
    std::vector<ReadExtent> extents;
    for (auto& p : planned) extents.push_back(p.extent);
    reader.set_fault_plan({FaultKind::Eio, 3});
    ReadBatch batch = reader.submit(extents);
    try {
        batch.wait();
        FAIL() << "EIO was not reported";
    } catch (const Error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("read failed"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
        EXPECT_NE(msg.find(".bin'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
    }
    auto errors = batch.errors();
    int failed = 0;
    for (size_t i = 0; i < errors.size(); ++i) {
        if (!errors[i].empty()) {
            ++failed;
            EXPECT_NE(errors[i].find(paths_[extents[i].file]), std::string::npos) << errors[i];
            EXPECT_NE(errors[i].find("offset " + std::to_string(extents[i].offset)), std::string::npos) << errors[i];
        } else {
            EXPECT_TRUE(matches(extents[i], extents[i].dest + head_bytes(extents[i].offset)));
        }
    }
    EXPECT_EQ(failed, 1);
    // The plan was one-shot: the same reads now succeed.
    reader.submit(extents).wait();
    for (auto& e : extents) EXPECT_TRUE(matches(e, e.dest + head_bytes(e.offset)));
}

TEST_P(DirectReaderTest, ShortReadIsContinuedTransparently) {
    DirectReader reader(paths_, options());
    // One 512 KiB aligned extent = 8 chunk reads of 64 KiB; the 2nd returns only half its bytes.
    AlignedBuffer buf(512 * 1024);
    ReadExtent e{0, 8192, 512 * 1024, buf.data(), buf.size_bytes(), 0};
    reader.set_fault_plan({FaultKind::ShortRead, 2});
    reader.submit({&e, 1}).wait();
    EXPECT_TRUE(matches(e, buf.data()));
}

TEST_P(DirectReaderTest, EofFaultBecomesShortReadError) {
    DirectReader reader(paths_, options());
    AlignedBuffer buf(256 * 1024);
    ReadExtent e{1, 4096 * 3 + 100, 200 * 1024, buf.data(), buf.size_bytes(), 0};
    reader.set_fault_plan({FaultKind::Eof, 1});
    ReadBatch b = reader.submit({&e, 1});
    try {
        b.wait();
        FAIL() << "EOF was not reported";
    } catch (const Error& err) {
        std::string msg = err.what();
        EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
        EXPECT_NE(msg.find(paths_[1]), std::string::npos) << msg;
        EXPECT_NE(msg.find("offset 12388"), std::string::npos) << msg;
    }
}

TEST_P(DirectReaderTest, TruncatedFileAndReadPastEnd) {
    DirectReader reader(paths_, options());
    // Really truncate a file after it was opened: a read of the lost tail must fail, not return stale zeros;
    // a read ending exactly at the new end still works.
    fs::resize_file(paths_[0], 300 * 1024 + 7);
    AlignedBuffer buf(600 * 1024);
    ReadExtent lost{0, 256 * 1024 + 3, 100 * 1024, buf.data(), buf.size_bytes(), 0};
    EXPECT_THROW(reader.submit({&lost, 1}).wait(), Error);
    ReadExtent kept{0, 1000, 300 * 1024 + 7 - 1000, buf.data(), buf.size_bytes(), 0};
    reader.submit({&kept, 1}).wait();
    EXPECT_TRUE(matches(kept, buf.data() + head_bytes(kept.offset)));
    // Past the end of an untouched file.
    uint64_t size = contents_[2].size();
    ReadExtent past{2, size - 10, 20, buf.data(), buf.size_bytes(), 0};
    try {
        reader.submit({&past, 1}).wait();
        FAIL() << "read past EOF was not reported";
    } catch (const Error& err) {
        std::string msg = err.what();
        EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ends at byte " + std::to_string(size)), std::string::npos) << msg;
    }
    ReadExtent last{2, size - 10, 10, buf.data(), buf.size_bytes(), 0};
    reader.submit({&last, 1}).wait();
    EXPECT_TRUE(matches(last, buf.data() + head_bytes(last.offset)));
}

TEST_P(DirectReaderTest, UnopenableFileFailsOnlyItsRequests) {
    std::vector<std::string> paths = {paths_[0], (dir_ / "missing.bin").string()};
    DirectReader reader(paths, options());
    AlignedBuffer a(64 * 1024), b(64 * 1024);
    ReadExtent e[2] = {{1, 4096, 100, a.data(), a.size_bytes(), 0}, {0, 5, 1000, b.data(), b.size_bytes(), 1}};
    std::atomic<int> callbacks{0};
    ReadBatch batch = reader.submit(e, [&](const ReadCompletion&) { ++callbacks; });
    try {
        batch.wait();
        FAIL() << "open failure was not reported";
    } catch (const Error& err) {
        std::string msg = err.what();
        EXPECT_NE(msg.find("missing.bin"), std::string::npos) << msg;
        EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
        EXPECT_NE(msg.find("offset 4096"), std::string::npos) << msg;
    }
    EXPECT_EQ(callbacks.load(), 2);
    EXPECT_TRUE(batch.errors()[1].empty());
    EXPECT_TRUE(matches(e[1], b.data() + 5));
}

TEST_P(DirectReaderTest, MalformedExtentsRejectedAtSubmit) {
    DirectReader reader(paths_, options());
    AlignedBuffer buf(8192);
    ReadExtent bad_file{7, 0, 10, buf.data(), buf.size_bytes(), 0};
    EXPECT_THROW(reader.submit({&bad_file, 1}), Error);
    ReadExtent unaligned{0, 0, 10, buf.data() + 1, buf.size_bytes() - 4096, 0};
    EXPECT_THROW(reader.submit({&unaligned, 1}), Error);
    ReadExtent small{0, 4000, 200, buf.data(), 4096, 0};  // spans two pages
    EXPECT_THROW(reader.submit({&small, 1}), Error);
    ReadExtent empty{0, 0, 0, buf.data(), buf.size_bytes(), 0};
    EXPECT_THROW(reader.submit({&empty, 1}), Error);
    reader.submit({}).wait();  // an empty batch is complete at once
    std::vector<ReadExtent> one = {{0, 4000, 200, buf.data(), 8192, 0}};
    reader.submit(one).wait();
    EXPECT_TRUE(matches(one[0], buf.data() + 4000));
}

TEST_P(DirectReaderTest, CallbackExceptionSurfacesFromWait) {
    DirectReader reader(paths_, options());
    AlignedBuffer buf(8192);
    ReadExtent e{0, 0, 100, buf.data(), buf.size_bytes(), 0};
    ReadBatch b = reader.submit({&e, 1}, [](const ReadCompletion&) { throw std::runtime_error("consumer broke"); });
    try {
        b.wait();
        FAIL() << "callback exception lost";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("consumer broke"), std::string::npos);
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, DirectReaderTest,
                         testing::Values(Case{Backend::Uring, 1}, Case{Backend::Uring, 64}, Case{Backend::Pread, 1},
                                         Case{Backend::Pread, 64}, Case{Backend::Buffered, 1},
                                         Case{Backend::Buffered, 64}),
                         case_name);

TEST(DirectReaderAuto, PicksBestAvailableBackendAndExplainsFallback) {
    fs::path dir = make_test_dir("auto");
    fs::path p = dir / "a.bin";
    auto bytes = random_bytes(100000, 3);
    write_file(p, bytes);
    DirectReader reader({p.string()});
    if (DirectReader::backend_available(Backend::Uring, p.string()))
        EXPECT_EQ(reader.backend(), Backend::Uring);
    else
        EXPECT_FALSE(reader.fallback_reason().empty());
    std::printf("auto backend here: %s%s%s\n", backend_name(reader.backend()),
                reader.fallback_reason().empty() ? "" : " because ", reader.fallback_reason().c_str());
    AlignedBuffer buf(padded_bytes(99, 99000));
    ReadExtent e{0, 99, 99000, buf.data(), buf.size_bytes(), 0};
    reader.submit({&e, 1}).wait();
    EXPECT_EQ(std::memcmp(buf.data() + 99, bytes.data() + 99, 99000), 0);
    fs::remove_all(dir);
}

TEST(DirectReaderAuto, BufferedBackendIsAlwaysAvailable) {
    fs::path dir = make_test_dir("buffered");
    fs::path p = dir / "b.bin";
    write_file(p, random_bytes(10, 1));
    std::string why;
    EXPECT_TRUE(DirectReader::backend_available(Backend::Buffered, p.string(), &why)) << why;
    fs::remove_all(dir);
}

// procfs refuses O_DIRECT with EINVAL (as tmpfs did before Linux 6.6): Auto must fall back to buffered reads and
// say why; an explicit direct backend must fail naming the reason.
TEST(DirectReaderAuto, FallsBackToBufferedWhenODirectRefused) {
    const std::string path = "/proc/version";
    if (!fs::exists(path)) GTEST_SKIP() << "no procfs";
    DirectReader reader({path});
    EXPECT_EQ(reader.backend(), Backend::Buffered);
    EXPECT_FALSE(reader.direct());
    EXPECT_NE(reader.fallback_reason().find("O_DIRECT refused"), std::string::npos) << reader.fallback_reason();
    std::ifstream f(path);
    std::string expected;
    std::getline(f, expected);
    ASSERT_GE(expected.size(), 8u);
    AlignedBuffer buf(4096);
    ReadExtent e{0, 2, 6, buf.data(), buf.size_bytes(), 0};
    reader.submit({&e, 1}).wait();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()) + 2, 6), expected.substr(2, 6));
    try {
        DirectReader direct({path}, ReaderOptions{.backend = Backend::Pread});
        FAIL() << "explicit pread backend accepted a file without O_DIRECT";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("O_DIRECT refused"), std::string::npos) << err.what();
    }
}

TEST(AlignedBuffer, AlignedRoundedAndMovable) {
    AlignedBuffer a(5000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
    EXPECT_EQ(a.size_bytes(), 8192u);
    EXPECT_EQ(a.data()[8191], 0);
    uint8_t* p = a.data();
    AlignedBuffer b = std::move(a);
    EXPECT_EQ(b.data(), p);
    EXPECT_TRUE(a.empty());
    AlignedBuffer c(100, 1 << 21);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % (1 << 21), 0u);
    EXPECT_THROW(AlignedBuffer(10, 3000), Error);
}

}  // namespace

// bench's count of what a pass read through the memory map (io::page_cache_bytes): a file read whole is all in the
// page cache, one dropped from it holds no more, and what cannot be opened counts nothing.
TEST(PageCacheBytes, CountsWhatAReadBroughtIn) {
    const fs::path dir = make_test_dir("page_cache");
    const fs::path p = dir / "f.bin";
    const auto bytes = random_bytes((size_t(3) << 20) + 1234, 11);
    write_file(p, bytes);
    {
        std::ifstream f(p, std::ios::binary);
        std::vector<char> all(bytes.size());
        f.read(all.data(), std::streamsize(all.size()));
    }
    EXPECT_EQ(page_cache_bytes(p.string()), bytes.size());
    evict_from_page_cache(p.string());
    EXPECT_LE(page_cache_bytes(p.string()), bytes.size());  // tmpfs keeps its pages; a disk drops them
    EXPECT_EQ(page_cache_bytes((dir / "missing").string()), 0u);
}
