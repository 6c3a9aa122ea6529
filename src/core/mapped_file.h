// A read-only memory map of a whole file. Empty files map to a null pointer with size 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

class MappedFile {
public:
    explicit MappedFile(const std::string& path);  // throws Error naming the path
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size_bytes() const { return size_bytes_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_bytes_ = 0;
    uint64_t stable_id_ = 0;  // core/stable_memory registration: the mapped bytes never change
};

}  // namespace sluice
