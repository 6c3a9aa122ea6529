// The streaming source's usage statistics: counting routed rows per expert, reading the --usage-stats file at
// construction (never trusted blindly: any problem is one warning and an unpinned run), preloading and holding
// the most-used experts, releasing held experts that live use does not justify, and writing the file back.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "experts/streaming_expert_source.h"

namespace sluice {

void StreamingExpertSource::load_usage() {
    const size_t n_layers = layout_.where.size();
    use_rows_.resize(n_layers);
    window_rows_.resize(n_layers);
    layer_fetches_.assign(n_layers, 0);
    int64_t experts_per_layer = 0;
    for (size_t l = 0; l < n_layers; ++l) {
        const auto& bank = layout_.where[l];
        use_rows_[l].assign(bank.size(), 0);
        window_rows_[l].assign(bank.size(), 0);
        experts_per_layer = std::max(experts_per_layer, int64_t(bank.size()));
        if (!bank.empty() && options_.fingerprint.expert_bytes == 0)
            options_.fingerprint.expert_bytes = bank[0].shape.size_bytes();
    }
    options_.fingerprint.n_layers = int64_t(n_layers);
    options_.fingerprint.experts_per_layer = experts_per_layer;

    const std::string& path = options_.usage_stats_path;
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) return;  // first run: the file is written at the end
    try {
        UsageStats s = read_usage_stats(path);
        const std::string diff = fingerprint_difference(s.model, options_.fingerprint);
        SLUICE_CHECK(diff.empty(), path, ": written for another model (", diff, ")");
        for (size_t l = 0; l < n_layers; ++l) {
            const size_t want = layout_.where[l].size();
            SLUICE_CHECK(s.counts[l].empty() || s.counts[l].size() == want, path, ": counts[", l, "] has ",
                         s.counts[l].size(), " entries, the model has ", want, " experts there");
            s.counts[l].resize(want, 0);  // an empty row: no use recorded for that layer
        }
        usage_file_ = std::move(s);
    } catch (const Error& e) {
        pin_stats_.warning = e.what();
        log_info("warning: usage statistics ignored: ", e.what(),
                 "; running without pinned experts (the file is rewritten at exit)");
        return;
    }
    pin_stats_.file_used = true;
    const double share = std::clamp(options_.pin_share, 0.0, 1.0);
    preload(choose_pins(*usage_file_, size_t(double(cache_->n_slots()) * share)));
}

void StreamingExpertSource::preload(const std::vector<ExpertKey>& keys) {
    struct Landing {
        ExpertKey key;
        uint8_t* slot;
    };
    std::vector<Landing> landing;
    std::vector<io::ReadExtent> extents;
    std::vector<size_t> extent_owner;
    for (const ExpertKey& key : keys) {
        if (cache_->contains(key)) continue;
        uint8_t* slot = cache_->insert(key);  // pinned in use until its bytes have landed
        if (!slot) break;
        const Location& loc = layout_.where[size_t(key.layer)][size_t(key.expert)];
        for (int k = 0; k < loc.n_reads; ++k) {
            const Part& part = loc.reads[size_t(k)];
            extents.push_back({part.file, part.offset, part.length, slot + part.slot_offset,
                               slot_bytes_ - part.slot_offset, 0});
            extent_owner.push_back(landing.size());
            pin_stats_.preload_bytes += io::padded_bytes(part.offset, part.length);
        }
        landing.push_back({key, slot});
    }
    if (landing.empty()) return;
    std::vector<std::string> failed(landing.size());
    try {
        io::ReadBatch batch = reader_->submit(extents);
        try {
            batch.wait();
        } catch (const Error&) {
        }
        const auto errors = batch.errors();
        for (size_t x = 0; x < errors.size() && x < extent_owner.size(); ++x)
            if (!errors[x].empty() && failed[extent_owner[x]].empty()) failed[extent_owner[x]] = errors[x];
    } catch (const Error& e) {
        for (auto& f : failed) f = e.what();
    }
    std::string first_error;
    for (size_t i = 0; i < landing.size(); ++i) {
        const Landing& d = landing[i];
        const Location& loc = layout_.where[size_t(d.key.layer)][size_t(d.key.expert)];
        if (failed[i].empty()) failed[i] = check_landed(loc, d.slot);
        if (!failed[i].empty()) {
            cache_->drop(d.key);  // a later fetch reads it again (and reports the error if it persists)
            if (first_error.empty())
                first_error = cat("layer ", d.key.layer, " expert ", d.key.expert, ": ", failed[i]);
            continue;
        }
        cache_->unpin(d.key);
        cache_->hold(d.key);
        ++pin_stats_.pinned_at_load;
    }
    if (!first_error.empty())
        log_info("warning: preloading pinned experts from ", options_.usage_stats_path, " failed for ",
                 landing.size() - pin_stats_.pinned_at_load, " of them (", first_error, ")");
}

void StreamingExpertSource::note_use(int64_t layer, std::span<const int32_t> experts, std::span<const uint32_t> rows,
                                     std::span<const int32_t> row_choices, int64_t top_k) {
    if (layer < 0 || size_t(layer) >= use_rows_.size()) return;
    if (trace_ && top_k > 0) {
        trace_layer_ = layer;
        trace_top_k_ = top_k;
        trace_choices_.assign(row_choices.begin(), row_choices.end());
    }
    auto& live = use_rows_[size_t(layer)];
    auto& window = window_rows_[size_t(layer)];
    for (size_t i = 0; i < experts.size() && i < rows.size(); ++i) {
        if (experts[i] < 0 || size_t(experts[i]) >= live.size()) continue;
        live[size_t(experts[i])] += rows[i];
        window[size_t(experts[i])] += rows[i];
        unsaved_rows_ += rows[i];
    }
}

void StreamingExpertSource::recheck_holds(int64_t layer) {
    auto& window = window_rows_[size_t(layer)];
    if (cache_->n_held() > 0 && !window.empty()) {
        const auto residents = cache_->residents(int32_t(layer));
        uint64_t free_rows = 0, n_free = 0, all_rows = 0;
        for (const auto& [key, held] : residents)
            if (!held) {
                free_rows += window[size_t(key.expert)];
                ++n_free;
            }
        for (uint64_t r : window) all_rows += r;
        // what an unheld resident of this layer earns; with none, an even share of the layer's rows
        const double typical =
            n_free > 0 ? double(free_rows) / double(n_free) : double(all_rows) / double(window.size());
        for (const auto& [key, held] : residents)
            if (held && double(window[size_t(key.expert)]) < 0.5 * typical) {
                cache_->release(key);
                ++pin_stats_.released;
            }
    }
    std::fill(window.begin(), window.end(), 0);
}

void StreamingExpertSource::save_usage() {
    if (options_.usage_stats_path.empty() || unsaved_rows_ == 0) return;
    write_usage_stats(options_.usage_stats_path,
                      merge_usage(usage_file_ ? &*usage_file_ : nullptr, options_.fingerprint, use_rows_));
    unsaved_rows_ = 0;
}

}  // namespace sluice
