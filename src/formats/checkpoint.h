// A Hugging Face checkpoint folder: config.json plus one model.safetensors or shards listed by
// model.safetensors.index.json. Tensors are looked up by their hub names; every lookup failure names the
// folder and the tensor, every shape check names expected and actual shapes.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace sluice {

class Checkpoint {
public:
    explicit Checkpoint(const std::string& dir);

    const std::string& dir() const { return dir_; }
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    TensorView get(const std::string& name) const;  // throws Error if absent
    // get() plus a check of dtype (any of `dtypes`, empty = any) and exact shape.
    TensorView get(const std::string& name, const std::vector<int64_t>& shape) const;
    std::vector<std::string> names() const;
    uint64_t total_bytes() const;
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
    // Where a byte of a mapped tensor lives on disk: index into files() and the file offset. Throws if p is not
    // inside any mapped file.
    void locate(const uint8_t* p, uint32_t* file, uint64_t* offset) const;
    // Whether p is inside a mapped file (a weight made at load is not).
    bool maps(const uint8_t* p) const;

private:
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, std::pair<size_t, const TensorInfo*>> index_;  // name -> (file, info)
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace sluice
