// The engine's side of prefix reuse (runtime/engine.h, runtime/prefix_cache.h): holding a request that shares a
// head with a prompt still prefilling, and the states recurrent models leave in the cache inside a prompt (at
// chat-turn boundaries, where a held request's prompt diverges, and at block boundaries).
#include <algorithm>

#include "runtime/engine.h"
#include "runtime/engine_request.h"

namespace sluice {

// True when a running request is still prefilling a prefix of r's prompt (kMinSharedPrefillTokens or more) that the
// prefix cache cannot give yet: r waits for that prefill to end and then reuses it, instead of computing it beside
// it (batch lines with the same instructions, n choices of one prompt, a burst of chat turns of one conversation).
bool Engine::wait_for_shared_prefill(const Request& r) {
    if (!prefix_cache_ || r.p.prompt_logits) return false;
    int64_t shared = 0;
    Request* sharer = nullptr;
    for (const auto& o : running_) {
        if (o->done || o->n_prefilled >= o->n_feed() || o->p.prompt_logits) continue;
        const size_t limit = std::min(o->p.prompt.size(), r.p.prompt.size() - 1);
        const auto common = std::mismatch(o->p.prompt.begin(), o->p.prompt.begin() + std::ptrdiff_t(limit),
                                          r.p.prompt.begin()).first - o->p.prompt.begin();
        if (common > shared) {
            shared = common;
            sharer = o.get();
        }
    }
    if (shared < kMinSharedPrefillTokens) return false;
    if (prefix_cache_->longest(r.p.prompt, r.n_prompt - 1) + kMinSharedPrefillTokens > shared) return false;
    // recurrent state: the sharer leaves its state where the two prompts part, which r then reuses
    if (recurrent_ && shared > sharer->n_prefilled && shared < sharer->n_feed()) {
        auto at = std::lower_bound(sharer->points.begin(), sharer->points.end(), shared);
        if (at == sharer->points.end() || *at != shared) sharer->points.insert(at, shared);
    }
    return true;
}

void Engine::plan_points(Request& r) const {
    r.points.clear();
    if (!prefix_cache_ || !recurrent_ || r.p.prompt_logits) return;
    const int64_t from = r.n_prefilled, to = r.n_feed();
    for (int64_t c : r.p.cache_points)
        if (c > from && c < to) r.points.push_back(c);
    if (block_tokens_ > 0)
        for (int64_t c = (from / block_tokens_ + 1) * block_tokens_; c < to; c += block_tokens_) r.points.push_back(c);
    std::sort(r.points.begin(), r.points.end());
    r.points.erase(std::unique(r.points.begin(), r.points.end()), r.points.end());
}

bool Engine::snapshot_for_points(const Request& r, int64_t start, int64_t end) const {
    auto at = std::upper_bound(r.points.begin(), r.points.end(), start);
    return at != r.points.end() && *at < end;
}

// The pass ran the request's rows [start, end): each cache point in (start, end] becomes a cache entry, the state
// of exactly the prompt's first `point` tokens (the snapshot taken at start plus a replay of the journal's rows up
// to it: bit for bit the state a prefill that stopped there holds).
void Engine::cache_points_reached(Request& r, const SequenceState& from, int64_t start, int64_t end) {
    auto first = std::upper_bound(r.points.begin(), r.points.end(), start);
    auto last = std::upper_bound(first, r.points.end(), end);
    for (auto it = first; it != last; ++it) {
        auto s = from.fork();
        s->truncate(*it);
        s->drop_snapshot();
        prefix_cache_->insert(std::move(s));
    }
    r.points.erase(r.points.begin(), last);
}

}  // namespace sluice
