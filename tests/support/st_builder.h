// Test helper: writes small safetensors files byte by byte, including deliberately broken ones.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "scratch_dir.h"

namespace sluice::test {

inline std::string temp_dir(const std::string& name) { return scratch_dir(name).string(); }  // removed at exit

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file from a raw header JSON string and a data buffer.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + data;
}

struct StTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<float> values;  // written as F32 (or BF16 when dtype == "BF16")
};

inline std::string safetensors_from(const std::vector<StTensor>& ts) {
    std::string header = "{", data;
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto& t = ts[i];
        std::string shape = "[";
        for (size_t j = 0; j < t.shape.size(); ++j) shape += (j ? "," : "") + std::to_string(t.shape[j]);
        shape += "]";
        const size_t begin = data.size();
        for (float v : t.values) {
            if (t.dtype == "BF16") {
                uint32_t b;
                std::memcpy(&b, &v, 4);
                uint16_t h = uint16_t(b >> 16);
                data.append(reinterpret_cast<const char*>(&h), 2);
            } else {
                data.append(reinterpret_cast<const char*>(&v), 4);
            }
        }
        header += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape +
                  ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    return safetensors_bytes(header, data);
}

}  // namespace sluice::test
