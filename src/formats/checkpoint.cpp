#include "formats/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;

namespace sluice {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
    if (!fs::is_directory(dir)) fail(dir, ": not a directory (expected a Hugging Face checkpoint folder)");
    const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single_path = fs::path(dir) / "model.safetensors";
    std::map<std::string, size_t> shard_of_file;
    auto open_shard = [&](const std::string& file) -> size_t {
        auto it = shard_of_file.find(file);
        if (it != shard_of_file.end()) return it->second;
        if (file.find('/') != std::string::npos || file == ".." || file.empty())
            fail(index_path.string(), ": shard name '", file, "' must be a plain file name");
        const fs::path p = fs::path(dir) / file;
        if (!fs::exists(p)) fail(index_path.string(), ": names shard '", file, "', which does not exist");
        files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
        shard_of_file[file] = files_.size() - 1;
        return files_.size() - 1;
    };

    if (fs::exists(index_path)) {
        nlohmann::json j;
        try {
            std::ifstream f(index_path);
            j = nlohmann::json::parse(f);
        } catch (const nlohmann::json::exception& e) {
            fail(index_path.string(), ": not valid JSON: ", e.what());
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            fail(index_path.string(), ": missing object 'weight_map'");
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                fail(index_path.string(), ": weight_map.", it.key(), " is not a string");
            size_t shard = open_shard(it.value().get<std::string>());
            const TensorInfo* info = files_[shard]->find(it.key());
            if (!info)
                fail(index_path.string(), ": tensor '", it.key(), "' is mapped to ", it.value().get<std::string>(),
                     " but that shard does not contain it");
            index_[it.key()] = {shard, info};
        }
    } else if (fs::exists(single_path)) {
        files_.push_back(std::make_unique<SafetensorsFile>(single_path.string()));
        for (const auto& t : files_[0]->header().tensors) index_[t.name] = {0, &t};
    } else {
        fail(dir, ": no model.safetensors or model.safetensors.index.json");
    }
}

TensorView Checkpoint::get(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(dir_, ": tensor '", name, "' not found in the checkpoint");
    return files_[it->second.first]->view(*it->second.second);
}

TensorView Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
    TensorView v = get(name);
    if (v.shape() != shape)
        fail(*v.path, ": tensor '", name, "' has shape ", shape_str(v.shape()), ", expected ", shape_str(shape));
    return v;
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : index_) out.push_back(k);
    return out;
}

void Checkpoint::locate(const uint8_t* p, uint32_t* file, uint64_t* offset) const {
    for (size_t i = 0; i < files_.size(); ++i) {
        const uint8_t* b = files_[i]->base();
        if (b && p >= b && p < b + files_[i]->size_bytes()) {
            *file = uint32_t(i);
            *offset = uint64_t(p - b);
            return;
        }
    }
    fail(dir_, ": internal: pointer is not inside any checkpoint file");
}

bool Checkpoint::maps(const uint8_t* p) const {
    for (const auto& f : files_) {
        const uint8_t* b = f->base();
        if (b && p >= b && p < b + f->size_bytes()) return true;
    }
    return false;
}

uint64_t Checkpoint::total_bytes() const {
    uint64_t n = 0;
    for (const auto& [k, v] : index_) n += v.second->nbytes();
    return n;
}

}  // namespace sluice
