// Structured output over a vocabulary: every token's bytes in a trie (built once per tokenizer), and the
// TokenConstraint that walks a schema automaton (runtime/json_automaton.h) over that trie to find the tokens that
// may come next. The walk shares the work of tokens with a common prefix and prunes a subtree at the first byte the
// automaton refuses; inside a string, a subtree whose bytes are all plain string characters (valid UTF-8 from the
// decoder's state there) is allowed whole without being walked (TokenTrie::Node::plain_below), so a mask costs about
// the tokens that can change the state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/json_automaton.h"
#include "runtime/token_constraint.h"

namespace sluice {
namespace tok {
class Tokenizer;
}

class TokenTrie {
public:
    // bytes[id]: the bytes token id stands for; empty: never allowed in structured output (special tokens, ids past
    // the tokenizer's vocabulary, tokens that decode to nothing).
    explicit TokenTrie(const std::vector<std::string>& bytes);
    // From a tokenizer, for a model whose logits have vocab_size entries. Special tokens whose text is one of
    // `markers` stay in, as a 0x00 byte and their text: no JSON value contains that byte, so only a grammar literal
    // that starts with it (the tool-call syntaxes, api/tool_choice) can force such a token, and its spelling in
    // ordinary tokens does not match (with markers, ordinary tokens holding a 0x00 byte are left out).
    static std::shared_ptr<const TokenTrie> from_tokenizer(const tok::Tokenizer& tok, int64_t vocab_size,
                                                           const std::vector<std::string>& markers = {});

    struct Node {
        uint32_t first_child = 0, next_sibling = 0;  // 0: none (node 0 is the root)
        uint32_t lo = 0, hi = 0;                     // the tokens below (positions in sorted order)
        uint32_t n_end = 0;                          // of which the first n_end end here
        uint8_t byte = 0;                            // on the edge from the parent
        // bit q: from UTF-8 decoder state q (Automaton::plain_string_state) after this node's byte, every path below
        // is string characters (no quote, backslash or control byte, valid UTF-8)
        uint8_t plain_below = 0xFF;
    };
    const std::vector<Node>& nodes() const { return nodes_; }
    const std::vector<int32_t>& order() const { return order_; }  // sorted position -> token id
    int64_t vocab_size() const { return vocab_size_; }
    size_t max_token_bytes() const { return max_len_; }
    std::span<const uint8_t> bytes_of(int32_t id) const;

private:
    std::vector<Node> nodes_;
    std::vector<int32_t> order_;
    std::vector<uint32_t> offset_;  // per id: its bytes in blob_ (offset_[id], offset_[id + 1])
    std::string blob_;
    int64_t vocab_size_ = 0;
    size_t max_len_ = 0;
};

// The mask of one request's output against a schema. Not thread-safe (one per choice, used on the engine thread).
class JsonConstraint : public TokenConstraint {
public:
    JsonConstraint(std::shared_ptr<const schema::Automaton> automaton, std::shared_ptr<const TokenTrie> trie);
    bool mask(std::span<float> logits, std::span<const int32_t> end_ids) override;
    void accept(int32_t id) override;
    bool finished() const override { return schema::Automaton::done(state_); }
    // The allowed ids as a 0/1 vector (what mask() applies), for tests and the benchmark.
    const std::vector<uint8_t>& allowed_by_position() const { return allowed_; }
    // Feeds raw bytes (tests): false when one is refused.
    bool feed(std::string_view bytes);

private:
    std::shared_ptr<const schema::Automaton> a_;
    std::shared_ptr<const TokenTrie> trie_;
    schema::State state_;
    std::vector<uint8_t> allowed_;  // by sorted position
    void walk(uint32_t node, int depth);
};

ConstraintFactory json_constraint_factory(std::shared_ptr<const schema::Automaton> automaton,
                                          std::shared_ptr<const TokenTrie> trie);

}  // namespace sluice
