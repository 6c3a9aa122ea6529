// Writing safetensors files and sharded Hugging Face checkpoints without holding them in memory. The header
// (with every offset) is written first, then each tensor's bytes are produced by its fill callback in big
// chunks (generated in parallel on a ThreadPool, written by a second thread) into a temporary name that is
// renamed into place only when complete. The sharded writer adds model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace sluice {

class ThreadPool;

// fill(offset_bytes, dst, n_bytes) writes bytes [offset, offset + n) of the tensor's little-endian, row-major
// data into dst. offset and n are multiples of the element size; calls may run concurrently on disjoint ranges,
// so the result must depend only on the range (not on call order or thread).
using TensorFill = std::function<void(uint64_t offset_bytes, uint8_t* dst, uint64_t n_bytes)>;

struct TensorToWrite {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    TensorFill fill;

    uint64_t nbytes() const;
};

struct WriteOptions {
    ThreadPool* pool = nullptr;                       // nullptr: default_pool()
    uint64_t chunk_bytes = 64ull << 20;               // bytes generated per batch (two batches in flight)
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    bool sync = true;                                 // fdatasync before the rename
    // Called after each batch reaches the file: bytes written so far by this writer call (all shards).
    std::function<void(uint64_t bytes_done)> progress;
};

// The header JSON (space-padded to a multiple of 8) for tensors laid out in the given order; fills data_begin
// with each tensor's offset in the data buffer. Throws Error on duplicate or empty names.
std::string safetensors_header_json(const std::vector<TensorToWrite>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    std::vector<uint64_t>* data_begin);

// Writes one safetensors file at `path` (via `path` + ".partial" and an atomic rename). Tensors are stored in
// the given order unless that would leave one misaligned for its element size, in which case they are stably
// ordered by element size (largest first), as the reference writer does. Returns the file size in bytes.
uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                           const WriteOptions& opts = {});

struct ShardedResult {
    std::vector<std::string> files;  // file names inside the folder, in order (index file last if written)
    uint64_t file_bytes = 0;         // all safetensors files together
    uint64_t tensor_bytes = 0;       // sum of tensor sizes (the index's total_size)
};

// Splits `tensors` (in order) into shards of at most max_shard_bytes of tensor data (a larger tensor gets its own
// shard) named model-0000N-of-0000M.safetensors plus model.safetensors.index.json; when everything fits in one
// shard (or max_shard_bytes == 0) writes a single model.safetensors and no index, as the hub does.
ShardedResult write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                        uint64_t max_shard_bytes, const WriteOptions& opts = {});

// Writes text to path via a temporary name and an atomic rename.
void write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace sluice
