#include "experts/streaming_expert_source.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include <xxhash.h>

#include "core/error.h"
#include "core/log.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
}  // namespace

struct StreamingExpertSource::Prefetch {
    ExpertKey key;
    std::atomic<int> parts_left{0};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;
    io::ReadBatch batch;
    uint8_t* slot = nullptr;
    const ExpertLocation* loc = nullptr;
};

StreamingExpertSource::StreamingExpertSource(const Checkpoint& ck, const std::vector<std::vector<ExpertWeights>>& views,
                                             const StreamingOptions& options)
    : StreamingExpertSource(locate_in_checkpoint(ck, views), options) {}

StreamingExpertSource::StreamingExpertSource(ExpertLayout layout, const StreamingOptions& options)
    : layout_(std::move(layout)), verify_reads_(options.verify_reads), options_(options) {
    guess_.resize(layout_.where.size());
    for (const auto& bank : layout_.where)
        for (const auto& loc : bank) slot_bytes_ = std::max(slot_bytes_, loc.slot_end());
    SLUICE_CHECK(slot_bytes_ > 0, layout_.origin, ": no routed experts to stream");
    const int64_t n_layers = int64_t(layout_.where.size());
    // never more slots than there are experts: a budget larger than the model leaves the rest unallocated
    uint64_t n_experts = 0;
    for (const auto& bank : layout_.where) n_experts += bank.size();
    const uint64_t cache_bytes = std::min(options.cache_bytes, n_experts * io::align_up(slot_bytes_, 4096));
    auto policy = make_cache_policy(options.policy, size_t(cache_bytes / slot_bytes_));
    cache_ = std::make_unique<ExpertCache>(cache_bytes, slot_bytes_, n_layers, std::move(policy));
    slot_bytes_ = cache_->slot_bytes();
    for (int64_t i = 0; i < std::max<int64_t>(1, options.staging_experts); ++i) staging_.emplace_back(slot_bytes_);
    for (auto& b : staging_) staging_pins_.emplace_back(b.data(), b.size_bytes());
    reader_ = std::make_unique<io::DirectReader>(layout_.paths, options.reader);
    if (!reader_->fallback_reason().empty()) log_info("expert reads: ", reader_->fallback_reason());
    log_debug("expert streaming from ", layout_.origin, ": backend ", io::backend_name(reader_->backend()), ", slot ",
              slot_bytes_, " bytes, ", cache_->n_slots(), " cache slots, ", staging_.size(), " staging slots");
    load_usage();
    if (!options.trace_path.empty()) {
        TraceHeader h;
        h.n_layers = uint32_t(n_layers);
        for (const auto& bank : layout_.where) h.n_experts = std::max(h.n_experts, uint32_t(bank.size()));
        h.cache_slots = uint32_t(cache_->n_slots());
        h.config_xxh3 = options.fingerprint.config_hash;
        h.weights_xxh3 = options.fingerprint.weights_hash;
        h.prefetch = options.prefetch;
        h.architecture = options.fingerprint.architecture;
        h.policy = cache_->policy_name();
        trace_ = std::make_unique<ExpertTraceWriter>(options.trace_path, h);
    }
}

void StreamingExpertSource::trace_fetch(int64_t layer, std::span<const int32_t> experts,
                                        const std::vector<uint8_t>& hit, const std::vector<int32_t>& read_ahead) {
    std::vector<std::pair<uint16_t, uint8_t>> distinct;
    distinct.reserve(experts.size());
    for (size_t i = 0; i < experts.size(); ++i) {
        const bool ahead = std::find(read_ahead.begin(), read_ahead.end(), experts[i]) != read_ahead.end();
        distinct.emplace_back(uint16_t(experts[i]), uint8_t((hit[i] ? k_trace_hit : 0) | (ahead ? k_trace_read_ahead : 0)));
    }
    std::vector<std::pair<uint16_t, uint8_t>> hints;
    if (auto h = trace_hints_.find(layer); h != trace_hints_.end()) {
        hints = std::move(h->second);
        trace_hints_.erase(h);
    }
    // the routing this fetch serves was noted just before it (moe_forward_with); a fetch without one is not traced
    if (trace_layer_ == layer) {
        trace_->write(uint16_t(layer), uint8_t(trace_top_k_), uint32_t(trace_choices_.size() / size_t(trace_top_k_)),
                      trace_choices_, distinct, hints);
    }
    trace_layer_ = -1;
}

StreamingExpertSource::~StreamingExpertSource() {
    for (auto& [k, p] : prefetching_) {
        try {
            p->batch.wait();
        } catch (const Error&) {
        }
    }
    // a run that ends in an exception is not a clean run: its partial use is not recorded
    if (std::uncaught_exceptions() == 0) {
        try {
            save_usage();
        } catch (const std::exception& e) {
            log_info("warning: usage statistics not saved: ", e.what());
        }
    }
}

void StreamingExpertSource::prefetch(int64_t layer, std::span<const int32_t> experts) {
    if (!options_.prefetch) return;
    reap_prefetches();
    release_hint_pins(-1);  // a new hint replaces the last one
    GuessRecord& record = guess_.at(size_t(layer));
    ++record.hints;
    std::vector<std::pair<uint16_t, uint8_t>>* hints = trace_ ? &trace_hints_[layer] : nullptr;
    if (hints) hints->clear();
    auto note = [&](size_t from, uint8_t outcome) {
        if (hints)
            for (size_t i = from; i < experts.size(); ++i) hints->emplace_back(uint16_t(experts[i]), outcome);
    };
    const double seen = record.used + record.wasted;
    if (seen > 16 && record.used < 0.4 * seen && record.hints % 16 != 0) {
        ++stats_.prefetch_skipped;
        note(0, k_hint_skipped);
        return;
    }
    deferred_.clear();  // a new hint replaces what an older one could not read
    const size_t stop = issue_read_aheads(layer, experts, hints);
    if (stop < experts.size()) {  // every slot is pinned: the rest waits for slots a fetch frees
        note(stop, k_hint_no_slot);
        deferred_layer_ = layer;
        deferred_.assign(experts.begin() + int64_t(stop), experts.end());
    }
}

void StreamingExpertSource::resume_deferred(int64_t fetching_layer) {
    if (deferred_.empty() || deferred_layer_ == fetching_layer) return;
    // No reap_prefetches() here: the read-aheads of the same hint that have landed would be unpinned, and the reads
    // issued next (least recently used first) would evict them once this fetch's freed slots ran out. They stay
    // pinned until their layer's fetch.
    const std::vector<int32_t> rest = std::move(deferred_);
    deferred_.clear();
    std::vector<std::pair<uint16_t, uint8_t>> outcomes;
    const size_t stop = issue_read_aheads(deferred_layer_, rest, trace_ ? &outcomes : nullptr);
    if (stop < rest.size()) deferred_.assign(rest.begin() + int64_t(stop), rest.end());
    if (trace_)  // the hint's record: these experts were read ahead (or found resident) after all
        for (auto& h : trace_hints_[deferred_layer_])
            for (const auto& o : outcomes)
                if (h.first == o.first && h.second == k_hint_no_slot) h.second = o.second;
}

size_t StreamingExpertSource::issue_read_aheads(int64_t layer, std::span<const int32_t> experts,
                                                std::vector<std::pair<uint16_t, uint8_t>>* hints) {
    const auto& bank = layout_.where.at(size_t(layer));
    for (size_t i = 0; i < experts.size(); ++i) {
        const int32_t e = experts[i];
        const ExpertKey key{int32_t(layer), e};
        const bool reading = prefetching_.count(key.packed()) != 0;  // its read-ahead holds its pin
        if (reading || cache_->contains(key)) {
            if (!reading && std::find(hint_pins_.begin(), hint_pins_.end(), key) == hint_pins_.end()) {
                cache_->pin(key);
                hint_pins_.push_back(key);
            }
            if (hints) hints->emplace_back(uint16_t(e), k_hint_resident);
            continue;
        }
        uint8_t* slot = cache_->insert(key);  // pinned until finished
        if (!slot) return i;
        if (hints) hints->emplace_back(uint16_t(e), k_hint_read);
        auto p = std::make_shared<Prefetch>();
        p->key = key;
        p->slot = slot;
        const Location& loc = bank[size_t(e)];
        p->loc = &loc;
        p->parts_left.store(loc.n_reads);
        std::vector<io::ReadExtent> extents;
        for (int k = 0; k < loc.n_parts; ++k) stats_.bytes_read += loc.parts[size_t(k)].length;
        for (int k = 0; k < loc.n_reads; ++k) {
            const Part& part = loc.reads[size_t(k)];
            extents.push_back({part.file, part.offset, part.length, slot + part.slot_offset, slot_bytes_ - part.slot_offset, 0});
            stats_.device_bytes_read += io::padded_bytes(part.offset, part.length);
        }
        ++stats_.experts_read;
        ++stats_.prefetch_issued;
        try {
            // a weak reference: the batch (held by p) must not own p back, or neither is ever freed
            p->batch = reader_->submit(extents, [wp = std::weak_ptr<Prefetch>(p)](const io::ReadCompletion& c) {
                auto p = wp.lock();
                if (!p) return;
                if (!c.ok()) {
                    std::lock_guard<std::mutex> lock(p->mu);
                    if (p->error.empty()) p->error = c.error;
                }
                if (p->parts_left.fetch_sub(1) == 1) {
                    std::lock_guard<std::mutex> lock(p->mu);
                    p->done = true;
                    p->cv.notify_all();
                }
            });
        } catch (...) {
            cache_->drop(key);
            throw;
        }
        prefetching_[key.packed()] = std::move(p);
        guesses_[layer].push_back(e);
    }
    return experts.size();
}

void StreamingExpertSource::release_hint_pins(int64_t layer) {
    std::erase_if(hint_pins_, [&](const ExpertKey& k) {
        if (layer >= 0 && k.layer != layer) return false;
        cache_->unpin(k);
        return true;
    });
}

void StreamingExpertSource::finish_prefetch(uint64_t packed, bool wait) {
    auto it = prefetching_.find(packed);
    if (it == prefetching_.end()) return;
    auto p = it->second;
    {
        std::unique_lock<std::mutex> lock(p->mu);
        if (!p->done && !wait) return;
        const auto t0 = Clock::now();
        p->cv.wait(lock, [&] { return p->done; });
        stats_.io_wait_ms += ms(t0, Clock::now());
    }
    try {
        p->batch.wait();
    } catch (const Error&) {
    }
    prefetching_.erase(it);
    if (p->error.empty()) p->error = check_landed(*p->loc, p->slot);
    if (!p->error.empty())
        cache_->drop(p->key);  // a failed read-ahead is forgotten; a later fetch reads it again and reports
    else
        cache_->unpin(p->key);
}

void StreamingExpertSource::reap_prefetches() {
    std::vector<uint64_t> keys;
    for (const auto& [k, p] : prefetching_) keys.push_back(k);
    for (uint64_t k : keys) finish_prefetch(k, false);
}

uint64_t StreamingExpertSource::memory_bytes() const {
    return cache_->allocated_bytes() + uint64_t(staging_.size()) * slot_bytes_;
}

ExpertWeights StreamingExpertSource::weights_in(const Location& loc, const uint8_t* slot) const {
    ExpertWeights w = loc.shape;
    int part = 0;
    for (int k = 0; k < 3; ++k) {
        Weight& m = k == 0 ? w.gate : k == 1 ? w.up : w.down;
        const Weight& src = expert_matrix(loc.shape, k);
        if (src.data && src.data_bytes() > 0) {
            const Part& p = loc.parts[size_t(part++)];
            m.data = slot + p.slot_offset + io::head_bytes(p.offset);
        }
        if (src.scales && src.scale_bytes() > 0) {
            const Part& p = loc.parts[size_t(part++)];
            m.scales = slot + p.slot_offset + io::head_bytes(p.offset);
        }
    }
    return w;
}

std::string StreamingExpertSource::check_landed(const Location& loc, const uint8_t* slot) const {
    if (!verify_reads_ || !loc.has_checksum) return {};
    const uint64_t got = XXH3_64bits(slot, loc.checksum_bytes);
    if (got == loc.checksum) return {};
    const Part& r = loc.reads[0];
    return cat("checksum mismatch in ", reader_->path(r.file), " at offset ", r.offset, " (", loc.checksum_bytes,
               " bytes: xxh3 ", hex64(got), ", manifest says ", hex64(loc.checksum), ")");
}

void StreamingExpertSource::fetch_groups(int64_t layer, std::span<const int32_t> experts,
                                         FunctionRef<void(std::span<const ReadyExpert>)> on_ready,
                                         FunctionRef<void()> while_reading) {
    const auto t_start = Clock::now();
    SLUICE_ASSERT(layer >= 0 && size_t(layer) < layout_.where.size(), "layer ", layer);
    const auto& bank = layout_.where[size_t(layer)];
    ++stats_.fetch_calls;
    stats_.experts_requested += experts.size();
    if (++layer_fetches_[size_t(layer)] % uint64_t(std::max<int64_t>(1, options_.pin_check_fetches)) == 0)
        recheck_holds(layer);

    struct Pending {
        size_t i;
        uint8_t* slot;
        bool cached;  // slot belongs to the cache (else staging)
    };
    // read-aheads of these experts: wait for them to land (they then count as cache hits); the read-aheads of this
    // layer that nobody asked for were wrong guesses
    for (size_t i = 0; i < experts.size(); ++i) {
        const uint64_t k = ExpertKey{int32_t(layer), experts[i]}.packed();
        if (prefetching_.count(k)) finish_prefetch(k, true);
    }
    std::vector<int32_t> read_ahead;  // for the trace: this layer's read-aheads since its last fetch
    if (auto g = guesses_.find(layer); g != guesses_.end()) {
        if (trace_) read_ahead = g->second;
        GuessRecord& record = guess_[size_t(layer)];
        record.used *= 0.85;
        record.wasted *= 0.85;
        for (int32_t e : g->second) {
            const bool used = std::find(experts.begin(), experts.end(), e) != experts.end();
            (used ? record.used : record.wasted) += 1;
            if (used) ++stats_.prefetch_used;
        }
        guesses_.erase(g);
    }
    if (deferred_layer_ == layer) deferred_.clear();  // this fetch reads them itself
    release_hint_pins(layer);                         // acquired below like any other resident expert
    std::vector<Pending> hits;
    std::vector<size_t> misses;
    for (size_t i = 0; i < experts.size(); ++i) {
        SLUICE_ASSERT(experts[i] >= 0 && size_t(experts[i]) < bank.size(), "expert ", experts[i]);
        if (uint8_t* p = cache_->acquire({int32_t(layer), experts[i]}))
            hits.push_back({i, p, true});
        else
            misses.push_back(i);
    }
    if (trace_) {
        std::vector<uint8_t> hit(experts.size(), 0);
        for (const auto& h : hits) hit[h.i] = 1;
        trace_fetch(layer, experts, hit, read_ahead);
    }

    std::mutex mu;
    std::condition_variable cv;
    std::deque<size_t> arrived;               // indices into `wave`
    std::vector<Pending> wave;
    std::vector<std::atomic<int>> parts_left;  // per wave entry
    std::vector<std::string> wave_errors;
    std::vector<io::ReadBatch> batches;
    std::vector<uint8_t> pinned_by_us(experts.size(), 0);
    for (const auto& h : hits) pinned_by_us[h.i] = 1;

    bool wave_submitted = false;
    auto release = [&] {
        for (auto& b : batches) {
            try {
                b.wait();
            } catch (const Error&) {
            }
        }
        // A cached slot whose read failed, or was never issued, must not be served later.
        for (size_t w = 0; w < wave.size(); ++w)
            if (wave[w].cached && (!wave_submitted || !wave_errors[w].empty()) && pinned_by_us[wave[w].i]) {
                cache_->drop({int32_t(layer), experts[wave[w].i]});
                pinned_by_us[wave[w].i] = 0;
            }
        for (size_t i = 0; i < experts.size(); ++i)
            if (pinned_by_us[i]) cache_->unpin({int32_t(layer), experts[i]});
    };

    try {
        size_t next_miss = 0;
        // Issue every miss that has a place to land: cache slots first, then the staging pool.
        auto issue_wave = [&] {
            wave.clear();
            wave_submitted = false;
            size_t staging_used = 0;
            while (next_miss < misses.size()) {
                const size_t i = misses[next_miss];
                uint8_t* slot = cache_->insert({int32_t(layer), experts[i]});
                bool cached = slot != nullptr;
                if (!slot) {
                    if (staging_used == staging_.size()) break;
                    slot = staging_[staging_used++].data();
                }
                if (cached) pinned_by_us[i] = 1;
                wave.push_back({i, slot, cached});
                ++next_miss;
            }
            parts_left = std::vector<std::atomic<int>>(wave.size());
            wave_errors.assign(wave.size(), "");
            arrived.clear();
            std::vector<io::ReadExtent> extents;
            for (size_t w = 0; w < wave.size(); ++w) {
                const Location& loc = bank[size_t(experts[wave[w].i])];
                parts_left[w].store(loc.n_reads);
                for (int k = 0; k < loc.n_parts; ++k) stats_.bytes_read += loc.parts[size_t(k)].length;
                for (int k = 0; k < loc.n_reads; ++k) {
                    const Part& p = loc.reads[size_t(k)];
                    extents.push_back({p.file, p.offset, p.length, wave[w].slot + p.slot_offset,
                                       slot_bytes_ - p.slot_offset, w});
                    stats_.device_bytes_read += io::padded_bytes(p.offset, p.length);
                }
            }
            stats_.experts_read += wave.size();
            if (extents.empty()) {
                wave_submitted = true;
                return;
            }
            batches.push_back(reader_->submit(extents, [&](const io::ReadCompletion& c) {
                const size_t w = size_t(c.tag);
                if (!c.ok()) {
                    std::lock_guard<std::mutex> lock(mu);
                    if (wave_errors[w].empty()) wave_errors[w] = c.error;
                }
                if (parts_left[w].fetch_sub(1) == 1) {
                    std::lock_guard<std::mutex> lock(mu);
                    arrived.push_back(w);
                    cv.notify_one();
                }
            }));
            wave_submitted = true;
        };

        issue_wave();
        // While the reads are in flight: the caller's work that needs no routed expert, then the cached experts.
        if (while_reading) while_reading();
        std::vector<ReadyExpert> ready;
        // After on_ready has computed a group, its cache slots are not needed by this fetch any more: unpinned,
        // they can take the deferred read-aheads of the next layer (resume_deferred).
        auto computed = [&](std::span<const ReadyExpert> group) {
            for (const ReadyExpert& r : group)
                if (pinned_by_us[r.i]) {
                    cache_->unpin({int32_t(layer), experts[r.i]});
                    pinned_by_us[r.i] = 0;
                }
            resume_deferred(layer);
        };
        for (const auto& h : hits) ready.push_back({h.i, weights_in(bank[size_t(experts[h.i])], h.slot)});
        if (!ready.empty()) {
            on_ready(ready);
            computed(ready);
        }
        std::vector<size_t> landed;
        while (true) {
            for (size_t done = 0; done < wave.size(); done += landed.size()) {
                // every expert that has landed by now, in one group
                landed.clear();
                {
                    std::unique_lock<std::mutex> lock(mu);
                    const auto t0 = Clock::now();
                    cv.wait(lock, [&] { return !arrived.empty(); });
                    stats_.io_wait_ms += ms(t0, Clock::now());
                    landed.assign(arrived.begin(), arrived.end());
                    arrived.clear();
                }
                ready.clear();
                for (size_t w : landed) {
                    const Pending& p = wave[w];
                    if (wave_errors[w].empty())
                        wave_errors[w] = check_landed(bank[size_t(experts[p.i])], p.slot);
                    if (!wave_errors[w].empty()) {
                        if (p.cached) {
                            cache_->drop({int32_t(layer), experts[p.i]});
                            pinned_by_us[p.i] = 0;
                        }
                        fail("layer ", layer, " expert ", experts[p.i], ": ", wave_errors[w]);
                    }
                    ready.push_back({p.i, weights_in(bank[size_t(experts[p.i])], p.slot)});
                }
                on_ready(ready);
                computed(ready);
            }
            if (!wave.empty()) batches.back().wait();
            if (next_miss == misses.size()) break;
            issue_wave();  // staging slots are free again
        }
    } catch (...) {
        release();
        stats_.fetch_ms += ms(t_start, Clock::now());
        throw;
    }
    release();
    stats_.fetch_ms += ms(t_start, Clock::now());
}

}  // namespace sluice
