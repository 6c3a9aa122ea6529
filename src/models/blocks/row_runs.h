// The rows of one sequence inside a batch, as runs of consecutive batch rows: attention takes each run in place
// (a whole prefill chunk is one run; a row's output depends only on its own query, position and the cache).
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

// Calls f(first_row, count) for each maximal run of consecutive batch rows in `rows` (increasing).
template <class F>
void for_each_run(std::span<const int64_t> rows, F&& f) {
    for (size_t i = 0; i < rows.size();) {
        size_t j = i + 1;
        while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
        f(rows[i], int64_t(j - i));
        i = j;
    }
}

}  // namespace sluice
