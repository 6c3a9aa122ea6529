// A flat batch of token rows from any number of sequences: the unit of work of every forward pass.
// Rows of one sequence must appear in increasing position order and continue that sequence's cache.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

struct Batch {
    std::vector<int32_t> tokens;      // [n_rows] token ids
    std::vector<int64_t> positions;   // [n_rows] position of each row in its sequence
    std::vector<int32_t> seq;         // [n_rows] index into the sequence list given to forward()
    std::vector<uint8_t> want_logits; // [n_rows] 1 = return this row's next-token logits

    void add(int32_t token, int64_t position, int32_t seq_index, bool logits) {
        tokens.push_back(token);
        positions.push_back(position);
        seq.push_back(seq_index);
        want_logits.push_back(logits ? 1 : 0);
    }
    int64_t size() const { return int64_t(tokens.size()); }
    int64_t n_logits() const {
        int64_t n = 0;
        for (auto w : want_logits) n += w;
        return n;
    }
    void clear() {
        tokens.clear();
        positions.clear();
        seq.clear();
        want_logits.clear();
    }
};

}  // namespace sluice
