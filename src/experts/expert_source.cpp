#include "experts/expert_source.h"

#include "core/error.h"

namespace sluice {

uint64_t ExpertWeights::size_bytes() const {
    uint64_t n = 0;
    for (const Weight* w : {&gate, &up, &down}) n += w->data_bytes() + w->scale_bytes();
    return n;
}

void ResidentExpertSource::fetch(int64_t layer, std::span<const int32_t> experts,
                                 FunctionRef<void(size_t i, const ExpertWeights&)> on_ready,
                                 FunctionRef<void()> while_reading) {
    if (while_reading) while_reading();
    SLUICE_ASSERT(layer >= 0 && size_t(layer) < experts_.size(), "layer ", layer);
    const auto& bank = experts_[size_t(layer)];
    for (size_t i = 0; i < experts.size(); ++i) {
        SLUICE_ASSERT(experts[i] >= 0 && size_t(experts[i]) < bank.size(), "expert ", experts[i]);
        on_ready(i, bank[size_t(experts[i])]);
    }
}

}  // namespace sluice
