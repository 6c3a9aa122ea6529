// safetensors: an 8-byte little-endian header length N, N bytes of JSON, then the data buffer. Every header
// field is validated (length, JSON, dtype, shape, offsets in bounds and non-overlapping, shape x dtype = bytes)
// before any tensor is handed out. parse_safetensors_header is pure so the fuzzer can drive it directly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace sluice {

struct TensorInfo {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte offsets relative to the data buffer

    int64_t numel() const;
    uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
    uint64_t data_offset = 0;  // file offset of the data buffer: 8 + N
    std::vector<TensorInfo> tensors;  // in header order
    std::map<std::string, std::string> metadata;
};

// `what` names the source in error messages (usually the path). Throws Error on any malformed field.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what);

// A tensor's bytes in a mapped file, with where they live on disk (for direct reads).
struct TensorView {
    const TensorInfo* info = nullptr;
    const uint8_t* data = nullptr;
    const std::string* path = nullptr;
    uint64_t file_offset = 0;

    const std::string& name() const { return info->name; }
    DType dtype() const { return info->dtype; }
    const std::vector<int64_t>& shape() const { return info->shape; }
    uint64_t nbytes() const { return info->nbytes(); }
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    const SafetensorsHeader& header() const { return header_; }
    const TensorInfo* find(const std::string& name) const;
    TensorView view(const TensorInfo& info) const;
    uint64_t size_bytes() const { return file_.size_bytes(); }
    const uint8_t* base() const { return file_.data(); }

private:
    MappedFile file_;
    SafetensorsHeader header_;
    std::map<std::string, size_t> by_name_;
};

}  // namespace sluice
