#include "state/sequence_state.h"

#include "core/error.h"

namespace sluice {

bool operator==(const StateLayout::Layer& a, const StateLayout::Layer& b) {
    return a.kind == b.kind && a.width == b.width && a.kda_heads == b.kda_heads && a.kda_head_dim == b.kda_head_dim &&
           a.conv_kernel == b.conv_kernel;
}

bool StateLayout::has_recurrent() const {
    for (const auto& l : layers)
        if (l.kind == Kind::kda) return true;
    return false;
}

uint64_t StateLayout::bytes_per_token() const {
    uint64_t b = 0;
    for (const auto& l : layers) b += uint64_t(l.width) * (l.kind == Kind::kv ? 2 : l.kind == Kind::latent ? 1 : 0);
    return b * sizeof(float);
}

uint64_t StateLayout::recurrent_bytes() const {
    uint64_t b = 0;
    for (const auto& l : layers)
        if (l.kind == Kind::kda) {
            const uint64_t P = uint64_t(l.kda_heads * l.kda_head_dim);
            b += 3 * P * uint64_t(l.conv_kernel - 1) + uint64_t(l.kda_heads) * uint64_t(l.kda_head_dim * l.kda_head_dim);
        }
    return b * sizeof(float);
}

uint64_t StateLayout::journal_bytes_per_row() const {
    uint64_t b = 0;
    for (const auto& l : layers)
        if (l.kind == Kind::kda) b += 6 * uint64_t(l.kda_heads * l.kda_head_dim) + uint64_t(l.kda_heads);
    return b * sizeof(float);
}

uint64_t StateLayout::reserve_bytes(int64_t max_context_tokens, int64_t max_sequences, int64_t snapshot_rows) const {
    const uint64_t rows = uint64_t(max_context_tokens) + uint64_t(max_sequences) * uint64_t(PagedRows::k_page_rows);
    uint64_t b = bytes_per_token() * rows + recurrent_bytes() * uint64_t(max_sequences);
    if (snapshot_rows > 0 && has_recurrent())
        b += recurrent_bytes() * uint64_t(max_sequences) + journal_bytes_per_row() * uint64_t(snapshot_rows);
    return b;
}

SequenceState::SequenceState(std::shared_ptr<const StateLayout> layout, std::shared_ptr<StatePages> pages)
    : layout_(std::move(layout)), pages_(std::move(pages)) {
    SLUICE_ASSERT(layout_, "SequenceState without a layout");
    if (!pages_) pages_ = std::make_shared<StatePages>(*layout_);
    const size_t L = layout_->layers.size();
    latent_.resize(L);
    kv_.resize(L);
    kda_.resize(L);
    for (size_t l = 0; l < L; ++l) {
        const auto& d = layout_->layers[l];
        if (d.kind == StateLayout::Kind::kda) kda_[l].reset(d.kda_heads, d.kda_head_dim, d.conv_kernel);
        if (d.kind == StateLayout::Kind::latent) latent_[l].data.init(d.width, pages_->pool(d.width));
        if (d.kind == StateLayout::Kind::kv) {
            kv_[l].k.init(d.width, pages_->pool(d.width));
            kv_[l].v.init(d.width, pages_->pool(d.width));
        }
    }
}

MlaCache& SequenceState::latent(int64_t layer) {
    SLUICE_ASSERT(layout_->layers.at(size_t(layer)).kind == StateLayout::Kind::latent, "layer ", layer,
                  " holds no latent cache");
    return latent_[size_t(layer)];
}

KvCache& SequenceState::kv(int64_t layer) {
    SLUICE_ASSERT(layout_->layers.at(size_t(layer)).kind == StateLayout::Kind::kv, "layer ", layer,
                  " holds no k/v cache");
    return kv_[size_t(layer)];
}

KdaState& SequenceState::kda(int64_t layer) {
    SLUICE_ASSERT(layout_->layers.at(size_t(layer)).kind == StateLayout::Kind::kda, "layer ", layer,
                  " holds no KDA state");
    return kda_[size_t(layer)];
}

void SequenceState::snapshot() {
    snap_pos_ = n_past();
    for (size_t l = 0; l < kda_.size(); ++l)
        if (layout_->layers[l].kind == StateLayout::Kind::kda) kda_[l].snapshot();
}

void SequenceState::advance_snapshot(int64_t position) {
    SLUICE_ASSERT(snap_pos_ >= 0 && position >= snap_pos_ && position <= n_past(), "advance_snapshot(", position,
                  ") with the snapshot at ", snap_pos_, " and ", n_past(), " tokens");
    for (size_t l = 0; l < kda_.size(); ++l)
        if (layout_->layers[l].kind == StateLayout::Kind::kda) kda_[l].advance_snapshot(position - snap_pos_);
    snap_pos_ = position;
}

void SequenceState::drop_snapshot() {
    for (auto& k : kda_) k.drop_snapshot();
    snap_pos_ = -1;
}

int64_t SequenceState::rollback_floor() const {
    if (!layout_->has_recurrent()) return 0;
    return snap_pos_ >= 0 ? snap_pos_ : n_past();
}

void SequenceState::truncate(int64_t n) {
    SLUICE_CHECK(n >= 0, "truncate(", n, "): the position must be >= 0");
    if (n >= n_past()) return;
    const bool recurrent = layout_->has_recurrent();
    SLUICE_CHECK(n == 0 || !recurrent || (snap_pos_ >= 0 && n >= snap_pos_), "truncate(", n,
                 "): this sequence holds recurrent (KDA) state and can go back only to its snapshot at ",
                 snap_pos_ < 0 ? std::string("none (no snapshot taken)") : std::to_string(snap_pos_),
                 " or later, or to 0");
    for (size_t l = 0; l < layout_->layers.size(); ++l) {
        const auto& d = layout_->layers[l];
        switch (d.kind) {
            case StateLayout::Kind::latent:
                latent_[l].data.truncate(n);
                break;
            case StateLayout::Kind::kv:
                kv_[l].k.truncate(n);
                kv_[l].v.truncate(n);
                break;
            case StateLayout::Kind::kda:
                if (n == 0)
                    kda_[l].reset(d.kda_heads, d.kda_head_dim, d.conv_kernel);
                else
                    kda_[l].replay(n - snap_pos_);
                break;
            case StateLayout::Kind::none:
                break;
        }
    }
    taps_.truncate(n);
    tokens_.resize(size_t(n));
    if (n == 0 || n < snap_pos_) snap_pos_ = -1;
}

std::unique_ptr<SequenceState> SequenceState::fork() const {
    return std::unique_ptr<SequenceState>(new SequenceState(*this));
}

uint64_t SequenceState::size_bytes() const {
    uint64_t b = unpaged_bytes();
    for (const auto& c : latent_) b += c.data.size_bytes();
    for (const auto& c : kv_) b += c.k.size_bytes() + c.v.size_bytes();
    return b + taps_.size_bytes();
}

uint64_t SequenceState::unpaged_bytes() const {
    uint64_t b = tokens_.capacity() * sizeof(int32_t);
    for (const auto& k : kda_) b += k.size_bytes();
    return b;
}

void SequenceState::each_page(const std::function<void(const void*, uint64_t)>& f) const {
    for (const auto& c : latent_) c.data.each_page(f);
    taps_.each_page(f);
    for (const auto& c : kv_) {
        c.k.each_page(f);
        c.v.each_page(f);
    }
}

}  // namespace sluice
