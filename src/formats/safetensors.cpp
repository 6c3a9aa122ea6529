#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace sluice {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 50;
}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what) {
    SafetensorsHeader h;
    if (size < 8) fail(what, ": file is ", size, " bytes, too short for a safetensors header (8-byte length)");
    uint64_t n = 0;
    std::memcpy(&n, data, 8);  // little-endian hosts only (x86-64, arm64)
    if (n > kMaxHeaderBytes) fail(what, ": header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit");
    if (n > size - 8) fail(what, ": header length ", n, " runs past the end of the file (", size, " bytes)");
    h.data_offset = 8 + n;
    const uint64_t data_bytes = size - h.data_offset;

    nlohmann::json j;
    try {
        j = nlohmann::json::parse(data + 8, data + 8 + n);
    } catch (const nlohmann::json::exception& e) {
        fail(what, ": header is not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail(what, ": header JSON is not an object");

    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        const auto& v = it.value();
        if (key == "__metadata__") {
            if (!v.is_object()) fail(what, ": __metadata__ is not an object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string()) fail(what, ": __metadata__.", m.key(), " is not a string");
                h.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string field = what + ": tensor '" + key + "'";
        if (!v.is_object()) fail(field, " is not an object");
        auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string()) fail(field, ": missing or non-string 'dtype'");
        auto dtype = dtype_from_name(dt->get<std::string>());
        if (!dtype) fail(field, ": unknown dtype '", dt->get<std::string>(), "'");
        auto sh = v.find("shape");
        if (sh == v.end() || !sh->is_array()) fail(field, ": missing or non-array 'shape'");
        TensorInfo t;
        t.name = key;
        t.dtype = *dtype;
        uint64_t numel = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned()) fail(field, ": shape entries must be non-negative integers");
            uint64_t dim = d.get<uint64_t>();
            if (dim > kMaxTensorBytes || (dim != 0 && numel > kMaxTensorBytes / dim))
                fail(field, ": shape is too large");
            numel *= dim;
            t.shape.push_back(int64_t(dim));
        }
        auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            fail(field, ": 'data_offsets' must be [begin, end] with non-negative integers");
        t.begin = (*off)[0].get<uint64_t>();
        t.end = (*off)[1].get<uint64_t>();
        if (t.end < t.begin) fail(field, ": data_offsets end ", t.end, " < begin ", t.begin);
        if (t.end > data_bytes)
            fail(field, ": data_offsets [", t.begin, ", ", t.end, ") run past the data buffer (", data_bytes,
                 " bytes; file truncated?)");
        const uint64_t want = numel * dtype_size_bytes(t.dtype);
        if (t.end - t.begin != want)
            fail(field, ": shape x dtype is ", want, " bytes but data_offsets span ", t.end - t.begin);
        h.tensors.push_back(std::move(t));
    }

    std::vector<const TensorInfo*> sorted;
    for (const auto& t : h.tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < sorted.size(); ++i)
        if (sorted[i]->begin < sorted[i - 1]->end && sorted[i]->nbytes() > 0 && sorted[i - 1]->nbytes() > 0)
            fail(what, ": tensors '", sorted[i - 1]->name, "' and '", sorted[i]->name, "' overlap");
    return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
    header_ = parse_safetensors_header(file_.data(), file_.size_bytes(), path);
    for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_[header_.tensors[i].name] = i;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
    TensorView v;
    v.info = &info;
    v.data = file_.data() + header_.data_offset + info.begin;
    v.path = &file_.path();
    v.file_offset = header_.data_offset + info.begin;
    return v;
}

}  // namespace sluice
