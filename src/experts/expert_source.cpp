#include "experts/expert_source.h"

#include <vector>

#include "core/error.h"

namespace sluice {

uint64_t ExpertWeights::size_bytes() const {
    uint64_t n = 0;
    for (const Weight* w : {&gate, &up, &down}) n += w->data_bytes() + w->scale_bytes();
    return n;
}

void ResidentExpertSource::fetch_groups(int64_t layer, std::span<const int32_t> experts,
                                        FunctionRef<void(std::span<const ReadyExpert>)> on_ready,
                                        FunctionRef<void()> while_reading) {
    if (while_reading) while_reading();
    SLUICE_ASSERT(layer >= 0 && size_t(layer) < experts_.size(), "layer ", layer);
    const auto& bank = experts_[size_t(layer)];
    thread_local std::vector<ReadyExpert> ready;  // grown once
    ready.clear();
    for (size_t i = 0; i < experts.size(); ++i) {
        SLUICE_ASSERT(experts[i] >= 0 && size_t(experts[i]) < bank.size(), "expert ", experts[i]);
        ready.push_back({i, bank[size_t(experts[i])]});
    }
    if (!ready.empty()) on_ready(ready);
}

}  // namespace sluice
