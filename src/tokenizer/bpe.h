// Byte-pair encoding over raw bytes, shared by the tokenizer.json and tiktoken front ends. Merges live in an
// open-addressing table keyed by the (left id, right id) pair; a word is merged lowest (rank, position) first,
// with a linear scan for short words and a heap over a linked list for long ones; results of short words are
// cached.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::tok {

// Hashes std::string keys and looks them up by std::string_view without a copy (with std::equal_to<>).
struct TransparentStringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
public:
    // Registers a vocabulary entry (raw bytes) with its id. Ids need not be dense.
    void add_token(std::string bytes, int32_t id);
    void reserve(size_t tokens) { vocab_.reserve(tokens); }
    // Registers a merge: left + right -> merged, with the given rank (lower merges first).
    void add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank);
    // Call once after all add_* calls.
    void finalize(bool ignore_merges);

    // Appends the ids of one pre-tokenized piece.
    void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

    // -1 when absent.
    int32_t find(std::string_view bytes) const;
    int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }
    size_t merge_count() const { return merge_count_; }

private:
    struct MergeSlot {
        uint64_t key = ~0ull;
        uint32_t rank = 0;
        int32_t merged = -1;
    };
    const MergeSlot* lookup(int32_t left, int32_t right) const;
    void merge_short(std::string_view bytes, std::vector<int32_t>& out) const;
    void merge_long(std::string_view bytes, std::vector<int32_t>& out) const;

    std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>> vocab_;
    int32_t byte_ids_[256];
    std::vector<MergeSlot> slots_;
    size_t merge_count_ = 0;
    uint64_t mask_ = 0;
    std::vector<MergeSlot> pending_;
    bool ignore_merges_ = false;

    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace sluice::tok
