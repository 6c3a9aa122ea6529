// SpineWarmer: which layers it reads and when (each layer once, the next `depth` ahead of the running one, none for
// layers without resident bytes), that a missing file is left to the faults, and that it stops cleanly with reads
// still queued. What it buys is measured on the K3-slice prefill (docs/cpu.md).
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "experts/spine_warmer.h"
#include "../support/scratch_dir.h"

namespace sluice {
namespace {

constexpr uint64_t kLayerBytes = 64 * 1024;

struct LayerFile {
    std::string path;
    std::vector<std::vector<SpineExtent>> layers;
    explicit LayerFile(int64_t n, int64_t empty_layer) {
        path = (test::scratch_dir("spine_warmer") / "spine.bin").string();
        {
            std::ofstream out(path, std::ios::binary);
            std::vector<char> bytes(size_t(n * kLayerBytes), 7);
            out.write(bytes.data(), std::streamsize(bytes.size()));
        }
        layers.resize(size_t(n));
        for (int64_t l = 0; l < n; ++l)
            if (l != empty_layer)  // two extents a layer, as a matrix's data and scales
                layers[size_t(l)] = {{0, uint64_t(l) * kLayerBytes, kLayerBytes / 2, 0},
                                     {0, uint64_t(l) * kLayerBytes + kLayerBytes / 2, kLayerBytes / 2, 0}};
    }
};

TEST(SpineWarmer, ReadsEachResidentLayerOnceAheadOfTheRunningOne) {
    LayerFile m(6, 2);
    SpineWarmer w({m.path}, m.layers, 2);
    w.flush();
    EXPECT_EQ(w.stats().layers, 0u);  // nothing before the first layer runs
    w.begin_layer(0);                 // 0, 1, 2 (2 has no bytes)
    w.flush();
    EXPECT_EQ(w.stats().layers, 2u);
    EXPECT_EQ(w.stats().bytes, 2 * kLayerBytes);
    w.begin_layer(1);  // 3
    w.flush();
    EXPECT_EQ(w.stats().layers, 3u);
    w.begin_layer(1);  // nothing new
    w.begin_layer(0);
    w.flush();
    EXPECT_EQ(w.stats().layers, 3u);
    w.begin_layer(4);  // 4, 5 (the last layers)
    w.flush();
    EXPECT_EQ(w.stats().layers, 5u);
    EXPECT_EQ(w.stats().bytes, 5 * kLayerBytes);
    w.begin_layer(-1);  // out of range: ignored
    w.begin_layer(6);
    w.flush();
    EXPECT_EQ(w.stats().layers, 5u);
}

TEST(SpineWarmer, DepthZeroReadsOnlyTheRunningLayer) {
    LayerFile m(4, -1);
    SpineWarmer w({m.path}, m.layers, 0);
    w.begin_layer(1);
    w.flush();
    EXPECT_EQ(w.stats().layers, 1u);
    w.begin_layer(3);
    w.flush();
    EXPECT_EQ(w.stats().layers, 2u);
}

TEST(SpineWarmer, AMissingFileIsLeftToTheFaults) {
    LayerFile m(3, -1);
    SpineWarmer w({m.path + ".gone"}, m.layers, 2);
    w.begin_layer(0);
    w.flush();
    EXPECT_EQ(w.stats().layers, 3u);
    EXPECT_EQ(w.stats().bytes, 0u);
}

TEST(SpineWarmer, StopsWithReadsQueued) {
    LayerFile m(64, -1);
    for (int rep = 0; rep < 20; ++rep) {
        SpineWarmer w({m.path}, m.layers, 63);
        w.begin_layer(0);  // destroyed at once: the queue is dropped, the thread joins
    }
    SUCCEED();
}

}  // namespace
}  // namespace sluice
