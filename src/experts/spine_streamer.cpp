#include "experts/spine_streamer.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;
constexpr uint64_t kMergeGapBytes = 64 * 1024;  // read small gaps between a layer's tensors rather than split
}  // namespace

SpineLayerReads merge_spine_extents(std::vector<SpineExtent> ext) {
    std::sort(ext.begin(), ext.end(), [](const SpineExtent& a, const SpineExtent& b) {
        return a.file != b.file ? a.file < b.file : a.offset < b.offset;
    });
    SpineLayerReads r;
    auto& out = r.regions;
    uint64_t covered_file = ~0u, covered_end = 0;  // union of the extents, for weight_bytes
    for (const SpineExtent& e : ext) {
        if (e.length == 0) continue;
        const uint64_t start = e.file == covered_file ? std::max(covered_end, e.offset) : e.offset;
        if (e.offset + e.length > start) r.weight_bytes += e.offset + e.length - start;
        if (e.file != covered_file) covered_end = 0;
        covered_file = e.file;
        covered_end = std::max(covered_end, e.offset + e.length);
        if (!out.empty() && out.back().file == e.file && e.offset <= out.back().offset + out.back().length + kMergeGapBytes) {
            out.back().length = std::max(out.back().length, e.offset + e.length - out.back().offset);
        } else {
            out.push_back(e);
        }
    }
    for (SpineExtent& e : out) {
        e.slot_pos = r.read_bytes;
        r.read_bytes += io::padded_bytes(e.offset, e.length);
    }
    return r;
}

SpineLayerReads spine_layer_reads(const Checkpoint& ck, const std::vector<Weight*>& weights) {
    std::vector<SpineExtent> ext;
    auto add = [&](const uint8_t* p, uint64_t n) {
        if (!p || n == 0 || !ck.maps(p)) return;
        SpineExtent e;
        ck.locate(p, &e.file, &e.offset);
        e.length = n;
        ext.push_back(e);
    };
    for (const Weight* w : weights) {
        if (w->rows == 0 || !w->data) continue;
        add(w->data, w->data_bytes());
        add(w->scales, w->scale_bytes());
    }
    return merge_spine_extents(std::move(ext));
}

SpineStreamer::SpineStreamer(const Checkpoint& ck, std::vector<std::vector<Weight*>> layers)
    : ck_(ck), layers_(std::move(layers)), regions_(layers_.size()), layer_bytes_(layers_.size(), 0) {
    for (size_t l = 0; l < layers_.size(); ++l) {
        for (const Weight* w : layers_[l])  // a streamed Weight is rebound into its slot: it must come from a file
            SLUICE_CHECK(w->rows == 0 || !w->data || (ck_.maps(w->data) && (!w->scales || ck_.maps(w->scales))), ck_.dir(),
                         ": internal: a spine matrix to stream is not in the checkpoint's files");
        SpineLayerReads reads = spine_layer_reads(ck_, layers_[l]);
        regions_[l] = std::move(reads.regions);
        layer_bytes_[l] = reads.read_bytes;
        weight_bytes_total_ += reads.weight_bytes;
    }
}

SpineStreamer::~SpineStreamer() {
    if (reader_) reader_->drain();  // the slots must outlive every read into them
    for (auto& s : slots_) stable_memory::remove_at(s.buffer.data());
}

void SpineStreamer::start(int64_t first, const io::ReaderOptions& options) {
    const int64_t L = int64_t(layers_.size());
    SLUICE_ASSERT(first >= 0 && first < L);
    first_ = first;
    uint64_t slot_bytes = 0;
    for (int64_t l = first; l < L; ++l) slot_bytes = std::max(slot_bytes, layer_bytes_[size_t(l)]);
    for (auto& s : slots_) {
        s.pinned.reset();
        s.buffer = io::AlignedBuffer(std::max<uint64_t>(slot_bytes, io::k_direct_alignment_bytes));
        s.pinned = ops::PinnedRegion(s.buffer.data(), s.buffer.size_bytes());
    }
    std::vector<std::string> paths;
    for (const auto& f : ck_.files()) paths.push_back(f->path());
    reader_ = std::make_unique<io::DirectReader>(std::move(paths), options);
    // Rebind: every pointer of a streamed layer moves to the same bytes' place in the layer's slot.
    for (int64_t l = first; l < L; ++l) {
        uint8_t* base = slots_[slot_of(l)].buffer.data();
        const auto& regs = regions_[size_t(l)];
        auto rebind = [&](const uint8_t*& p) {
            if (!p) return;
            uint32_t file = 0;
            uint64_t off = 0;
            ck_.locate(p, &file, &off);
            for (const Region& r : regs)
                if (r.file == file && off >= r.offset && off < r.offset + r.length) {
                    p = base + r.slot_pos + io::head_bytes(r.offset) + (off - r.offset);
                    return;
                }
            SLUICE_ASSERT(false && "a streamed weight lies outside its layer's regions");
        };
        for (Weight* w : layers_[size_t(l)]) {
            if (w->rows == 0 || !w->data) continue;
            rebind(w->data);
            rebind(w->scales);
        }
    }
    issue(first);
}

void SpineStreamer::end_pass() {
    if (first_ < 0) return;
    if (slots_[slot_of(first_)].layer != first_) issue(first_);
}

int64_t SpineStreamer::next_streamed(int64_t l) const { return l + 1 < int64_t(layers_.size()) ? l + 1 : first_; }

void SpineStreamer::issue(int64_t l) {
    Slot& s = slots_[slot_of(l)];
    if (s.pending) {
        // an earlier read into this slot (of a pass that failed) must land before the slot is reused
        try {
            s.batch.wait();
        } catch (const Error&) {
        }
        s.pending = false;
    }
    std::vector<io::ReadExtent> extents;
    uint64_t bytes = 0;
    for (const Region& r : regions_[size_t(l)]) {
        const uint64_t padded = io::padded_bytes(r.offset, r.length);
        extents.push_back({r.file, r.offset, r.length, s.buffer.data() + r.slot_pos, padded, uint64_t(l)});
        bytes += padded;
    }
    s.layer = l;
    // The slot now holds layer l's matrices, always at the same offsets: device copies keyed by that content stay
    // valid while other layers pass through the slot (core/stable_memory.h), so on the GPU a streamed spine is
    // copied up once while the card has room. Registered before the read lands; no op reads it before begin_layer.
    stable_memory::set_at(s.buffer.data(), s.buffer.size_bytes(), stable_memory::content_id(content_space_, uint64_t(l), 0));
    if (extents.empty()) return;
    s.batch = reader_->submit(extents);
    s.pending = true;
    stats_.layers_read += 1;
    stats_.bytes_read += bytes;
}

void SpineStreamer::begin_layer(int64_t l) {
    if (first_ < 0 || l < first_) return;
    Slot& s = slots_[slot_of(l)];
    if (s.layer != l) issue(l);
    if (s.pending) {
        const auto t0 = Clock::now();
        s.pending = false;
        try {
            s.batch.wait();
        } catch (const Error& e) {
            s.layer = -1;  // read again by the next pass
            fail("reading the spine of layer ", l, ": ", e.what());
        }
        stats_.wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    // The other slot's layer has run (layers run in order): read the next streamed layer into it.
    const int64_t n = next_streamed(l);
    if (n != l && slot_of(n) != slot_of(l) && slots_[slot_of(n)].layer != n) issue(n);
}

}  // namespace sluice
