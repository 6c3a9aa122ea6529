// What the engine asks of a constrained request (structured output): which tokens may come next, and whether the
// output is complete. A constraint only removes tokens: mask() sets the logits of the tokens that may not come next
// to -inf and leaves the others' bits alone, so where every token is allowed the distribution is exactly the
// unconstrained one. It runs after penalties and logit_bias and before the sampler's temperature and truncations.
// One instance per choice, fed every token the request generates (drafts only once they are kept).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace sluice {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    // Sets logits[id] = -inf for every id that may not come next. end_ids (the model's end-of-sequence ids, or none
    // when they do not end the request) are allowed only where the output may end. Returns false when no id at all
    // is allowed (the constraint cannot be satisfied from here).
    virtual bool mask(std::span<float> logits, std::span<const int32_t> end_ids) = 0;
    // The id the request took (it passed mask()).
    virtual void accept(int32_t id) = 0;
    // Nothing may follow: the output is a complete instance (the request ends with finish "stop").
    virtual bool finished() const = 0;
};

// Makes a fresh constraint for one choice (RequestParams is copied per choice).
using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

}  // namespace sluice
