// NumPy .npy files (format 1.0): little-endian float32 or int32/int64, C order. Enough for logits and fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct NpyArray {
    std::string descr;            // "<f4", "<i4", "<i8"
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;   // raw little-endian payload

    int64_t numel() const;
    std::vector<float> as_f32() const;  // from <f4 (or <f8)
};

void npy_write_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
NpyArray npy_read(const std::string& path);  // throws Error naming the path and what is wrong

}  // namespace sluice
