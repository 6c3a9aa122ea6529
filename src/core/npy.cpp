#include "core/npy.h"

#include <cstring>
#include <fstream>

#include "core/error.h"

namespace sluice {

int64_t NpyArray::numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::vector<float> NpyArray::as_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    if (descr == "<f4") {
        std::memcpy(out.data(), bytes.data(), out.size() * 4);
    } else if (descr == "<f8") {
        for (size_t i = 0; i < out.size(); ++i) {
            double d;
            std::memcpy(&d, bytes.data() + 8 * i, 8);
            out[i] = float(d);
        }
    } else {
        fail("npy: cannot read dtype ", descr, " as float32");
    }
    return out;
}

void npy_write_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    std::string shape_str = "(";
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        shape_str += std::to_string(shape[i]);
        shape_str += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
        if (i + 1 < shape.size()) shape_str += " ";
        n *= shape[i];
    }
    shape_str += ")";
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_str + ", }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::ofstream f(path, std::ios::binary);
    if (!f) fail(path, ": cannot open for writing");
    const char magic[] = "\x93NUMPY\x01\x00";
    f.write(magic, 8);
    uint16_t hlen = uint16_t(header.size());
    f.write(reinterpret_cast<const char*>(&hlen), 2);
    f.write(header.data(), std::streamsize(header.size()));
    f.write(reinterpret_cast<const char*>(data), std::streamsize(n * 4));
    if (!f) fail(path, ": write failed");
}

NpyArray npy_read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, ": cannot open");
    char magic[8];
    f.read(magic, 8);
    if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail(path, ": not a .npy file (bad magic)");
    uint32_t hlen = 0;
    if (magic[6] == 1) {
        uint16_t h16;
        f.read(reinterpret_cast<char*>(&h16), 2);
        hlen = h16;
    } else {
        f.read(reinterpret_cast<char*>(&hlen), 4);
    }
    std::string header(hlen, '\0');
    f.read(header.data(), hlen);
    if (!f) fail(path, ": truncated header");
    NpyArray a;
    auto find_value = [&](const std::string& key) {
        auto p = header.find("'" + key + "'");
        if (p == std::string::npos) fail(path, ": header has no '", key, "'");
        p = header.find(':', p);
        return p + 1;
    };
    size_t p = find_value("descr");
    auto q1 = header.find('\'', p), q2 = header.find('\'', q1 + 1);
    a.descr = header.substr(q1 + 1, q2 - q1 - 1);
    p = find_value("fortran_order");
    if (header.compare(header.find_first_not_of(' ', p), 4, "True") == 0) fail(path, ": fortran order not supported");
    p = find_value("shape");
    auto lp = header.find('(', p), rp = header.find(')', lp);
    std::string dims = header.substr(lp + 1, rp - lp - 1);
    size_t i = 0;
    while (i < dims.size()) {
        while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
        if (i >= dims.size()) break;
        a.shape.push_back(std::stoll(dims.substr(i)));
        while (i < dims.size() && dims[i] != ',') ++i;
    }
    size_t elem = a.descr == "<f4" || a.descr == "<i4" ? 4 : a.descr == "<f8" || a.descr == "<i8" ? 8 : 0;
    if (elem == 0) fail(path, ": unsupported dtype ", a.descr);
    a.bytes.resize(size_t(a.numel()) * elem);
    f.read(reinterpret_cast<char*>(a.bytes.data()), std::streamsize(a.bytes.size()));
    if (!f) fail(path, ": truncated data");
    return a;
}

}  // namespace sluice
