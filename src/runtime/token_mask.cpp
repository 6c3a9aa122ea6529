// Token trie and the JSON-schema token mask (see token_mask.h).
#include "runtime/token_mask.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {

// Walk scratch: one state per trie depth, shared by every constraint of the (engine) thread.
std::vector<schema::State>& scratch(size_t depth) {
    thread_local std::vector<schema::State> s;
    if (s.size() < depth) s.resize(depth);
    return s;
}

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& bytes) : vocab_size_(int64_t(bytes.size())) {
    SLUICE_CHECK(bytes.size() < size_t(INT32_MAX), "token trie: too many tokens");
    offset_.reserve(bytes.size() + 1);
    for (const std::string& b : bytes) {
        offset_.push_back(uint32_t(blob_.size()));
        blob_ += b;
        SLUICE_CHECK(blob_.size() < size_t(UINT32_MAX), "token trie: the vocabulary's bytes exceed 4 GiB");
        max_len_ = std::max(max_len_, b.size());
    }
    offset_.push_back(uint32_t(blob_.size()));
    for (int32_t id = 0; id < int32_t(bytes.size()); ++id)
        if (!bytes[size_t(id)].empty()) order_.push_back(id);
    std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
        return bytes[size_t(a)] < bytes[size_t(b)] || (bytes[size_t(a)] == bytes[size_t(b)] && a < b);
    });
    // insertion in sorted order creates the nodes in depth-first preorder, children in byte order
    nodes_.emplace_back();
    std::vector<uint32_t> path{0};  // path[d]: the node at depth d of the previous token
    std::vector<uint32_t> last_child{0};
    const std::string* prev = nullptr;
    for (uint32_t pos = 0; pos < order_.size(); ++pos) {
        const std::string& t = bytes[size_t(order_[pos])];
        size_t common = 0;
        if (prev)
            while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
        path.resize(common + 1);
        last_child.resize(common + 1);
        for (size_t d = common; d < t.size(); ++d) {
            const uint32_t id = uint32_t(nodes_.size());
            Node& n = nodes_.emplace_back();
            n.byte = uint8_t(t[d]);
            n.lo = pos;
            const uint32_t parent = path[d];
            if (last_child[d]) nodes_[last_child[d]].next_sibling = id;
            else nodes_[parent].first_child = id;
            last_child[d] = id;
            path.push_back(id);
            last_child.push_back(0);
        }
        for (uint32_t node : path) nodes_[node].hi = pos + 1;
        ++nodes_[path[t.size()]].n_end;
        prev = &t;
    }
    // ok[i] bit q: from decoder state q before node i's byte, every byte on every path below is one a string takes
    // (children come after their parent in preorder, so a reverse sweep sees them first)
    std::vector<uint8_t> ok(nodes_.size(), 0);
    for (size_t i = nodes_.size(); i-- > 0;) {
        uint8_t below = 0xFF;
        for (uint32_t c = nodes_[i].first_child; c; c = nodes_[c].next_sibling) below &= ok[c];
        nodes_[i].plain_below = below;
        for (int q = 0; q < 8; ++q) {
            const int next = schema::utf8_next(q, nodes_[i].byte);
            if (next >= 0 && ((below >> next) & 1)) ok[i] |= uint8_t(1u << q);
        }
    }
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const tok::Tokenizer& tok, int64_t vocab_size,
                                                           const std::vector<std::string>& markers) {
    std::vector<std::string> bytes(size_t(std::max<int64_t>(vocab_size, 0)));
    const int32_t n = std::min<int32_t>(tok.vocab_size(), int32_t(bytes.size()));
    for (int32_t id = 0; id < n; ++id) {
        try {
            std::string b = tok.decode_bytes({id}, false);
            if (tok.is_special(id))
                b = std::find(markers.begin(), markers.end(), b) != markers.end() ? std::string(1, '\0') + b : "";
            else if (!markers.empty() && b.find('\0') != std::string::npos)
                b.clear();  // an ordinary 0x00 byte would spell a marker's 0x00 (and no JSON value holds one)
            bytes[size_t(id)] = std::move(b);
        } catch (const Error&) {  // an id the vocabulary leaves out
        }
    }
    return std::make_shared<TokenTrie>(bytes);
}

std::span<const uint8_t> TokenTrie::bytes_of(int32_t id) const {
    if (id < 0 || id >= vocab_size_) return {};
    return {reinterpret_cast<const uint8_t*>(blob_.data()) + offset_[size_t(id)],
            size_t(offset_[size_t(id) + 1] - offset_[size_t(id)])};
}

JsonConstraint::JsonConstraint(std::shared_ptr<const schema::Automaton> automaton, std::shared_ptr<const TokenTrie> trie)
    : a_(std::move(automaton)), trie_(std::move(trie)), state_(a_->start()) {}

void JsonConstraint::walk(uint32_t node, int depth) {
    const auto& nodes = trie_->nodes();
    std::vector<schema::State>& st = scratch(size_t(depth) + 2);
    for (uint32_t c = nodes[node].first_child; c; c = nodes[c].next_sibling) {
        const TokenTrie::Node& n = nodes[c];
        schema::State& s = st[size_t(depth) + 1];
        s.copy_from(st[size_t(depth)]);
        if (!a_->step(s, n.byte)) continue;
        if (const int q = a_->plain_string_state(s); q >= 0 && ((n.plain_below >> q) & 1)) {
            std::fill(allowed_.begin() + n.lo, allowed_.begin() + n.hi, uint8_t(1));
            continue;
        }
        std::fill(allowed_.begin() + n.lo, allowed_.begin() + n.lo + n.n_end, uint8_t(1));
        if (n.first_child) walk(c, depth + 1);
    }
}

bool JsonConstraint::mask(std::span<float> logits, std::span<const int32_t> end_ids) {
    SLUICE_ASSERT(int64_t(logits.size()) == trie_->vocab_size(), "mask of ", logits.size(), " logits for a ",
                  trie_->vocab_size(), "-token trie");
    const auto& order = trie_->order();
    allowed_.assign(order.size(), 0);
    scratch(trie_->max_token_bytes() + 2)[0].copy_from(state_);
    walk(0, 0);
    const bool can_end = a_->can_end(state_);
    std::vector<std::pair<int32_t, float>> ends;
    for (int32_t id : end_ids)
        if (can_end && id >= 0 && size_t(id) < logits.size()) ends.push_back({id, logits[size_t(id)]});
    constexpr float kOff = -std::numeric_limits<float>::infinity();
    // ids outside the trie (special, empty) are never allowed; everything not walked to is masked
    std::vector<uint8_t> keep(logits.size(), 0);
    size_t n_allowed = 0;
    for (size_t i = 0; i < order.size(); ++i)
        if (allowed_[i]) keep[size_t(order[i])] = 1, ++n_allowed;
    for (size_t id = 0; id < logits.size(); ++id)
        if (!keep[id]) logits[id] = kOff;
    for (const auto& [id, v] : ends) logits[size_t(id)] = v;
    return n_allowed > 0 || !ends.empty();
}

void JsonConstraint::accept(int32_t id) {
    for (uint8_t b : trie_->bytes_of(id)) {
        const bool ok = a_->step(state_, b);
        SLUICE_ASSERT(ok, "structured output: token ", id, " was taken although the mask refused it");
    }
}

bool JsonConstraint::feed(std::string_view bytes) {
    for (char c : bytes)
        if (!a_->step(state_, uint8_t(c))) return false;
    return true;
}

ConstraintFactory json_constraint_factory(std::shared_ptr<const schema::Automaton> automaton,
                                          std::shared_ptr<const TokenTrie> trie) {
    return [automaton = std::move(automaton), trie = std::move(trie)]() -> std::unique_ptr<TokenConstraint> {
        return std::make_unique<JsonConstraint>(automaton, trie);
    };
}

}  // namespace sluice
