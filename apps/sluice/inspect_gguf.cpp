// `sluice inspect -m FILE.gguf [--json]`: what a GGUF file holds (architecture, name, tensors, bytes per ggml type
// and whether sluice's kernels run it, the metadata with short values). Reading only: GGUF models do not load yet.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "formats/gguf.h"

namespace sluice::cli {

namespace {

struct TypeUse {
    uint64_t tensors = 0, bytes = 0;
    bool size_known = true;
};

nlohmann::json value_json(const GgufValue& v) {
    switch (v.type) {
        case GgufType::STRING:
            return nlohmann::json(v.str.size() <= 200 ? v.str : gguf_value_summary(v, 200));
        case GgufType::ARRAY:
            return gguf_value_summary(v);
        case GgufType::BOOL:
            return v.bits != 0;
        case GgufType::FLOAT32:
        case GgufType::FLOAT64:
            return v.as_f64();
        case GgufType::INT8:
        case GgufType::INT16:
        case GgufType::INT32:
        case GgufType::INT64:
            return v.as_i64();
        default:
            return v.as_u64();
    }
}

}  // namespace

bool is_gguf_path(const std::string& path) {
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    char magic[4] = {};
    std::ifstream f(path, std::ios::binary);
    return f.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

void inspect_gguf(const std::string& path, bool json) {
    const GgufFile f = GgufFile::open(path);
    const GgufValue* arch = f.find("general.architecture");
    const GgufValue* name = f.find("general.name");
    const std::string arch_s = arch && arch->type == GgufType::STRING ? arch->str : "";
    const std::string name_s = name && name->type == GgufType::STRING ? name->str : "";
    std::map<uint32_t, TypeUse> by_type;
    uint64_t data_bytes = 0;
    for (const auto& t : f.tensors()) {
        TypeUse& u = by_type[t.type];
        ++u.tensors;
        if (t.nbytes) {
            u.bytes += *t.nbytes;
            data_bytes += *t.nbytes;
        } else {
            u.size_known = false;
        }
    }
    if (json) {
        nlohmann::json j;
        j["format"] = "gguf";
        j["version"] = f.version();
        j["file_bytes"] = f.size_bytes();
        j["alignment"] = f.alignment();
        j["data_offset"] = f.data_offset();
        j["architecture"] = arch_s;
        j["name"] = name_s;
        j["tensor_count"] = f.tensors().size();
        j["tensor_bytes"] = data_bytes;
        j["bytes_by_type"] = nlohmann::json::object();
        j["types"] = nlohmann::json::array();
        for (const auto& [id, u] : by_type) {
            const std::string label = ggml_type_label(id);
            if (u.size_known) j["bytes_by_type"][label] = u.bytes;
            j["types"].push_back({{"type", label},
                                  {"id", id},
                                  {"tensors", u.tensors},
                                  {"bytes", u.size_known ? nlohmann::json(u.bytes) : nlohmann::json()},
                                  {"supported", ggml_weight_format(id).has_value()}});
        }
        j["metadata"] = nlohmann::json::object();
        for (const auto& [key, v] : f.metadata()) j["metadata"][key] = value_json(v);
        // metadata strings and tensor names need not be UTF-8: replace what is not
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return;
    }
    std::printf("file             %s (GGUF v%u, %s, alignment %llu)\n", path.c_str(), f.version(),
                human_bytes(f.size_bytes()).c_str(), (unsigned long long)f.alignment());
    std::printf("architecture     %s\n", arch_s.empty() ? "(none)" : arch_s.c_str());
    std::printf("name             %s\n", name_s.empty() ? "(none)" : name_s.c_str());
    std::printf("tensors          %zu, %s of data\n", f.tensors().size(), human_bytes(data_bytes).c_str());
    std::printf("%-16s %8s %12s  %s\n", "ggml type", "tensors", "bytes", "sluice kernels");
    for (const auto& [id, u] : by_type)
        std::printf("%-16s %8llu %12s  %s\n", ggml_type_label(id).c_str(), (unsigned long long)u.tensors,
                    u.size_known ? human_bytes(u.bytes).c_str() : "?",
                    ggml_weight_format(id) ? "supported" : "not supported");
    std::printf("metadata         %zu keys\n", f.metadata().size());
    for (const auto& [key, v] : f.metadata())
        std::printf("  %-40s %-7s %s\n", key.c_str(), std::string(gguf_type_name(v.type)).c_str(),
                    gguf_value_summary(v).c_str());
    std::printf("(GGUF models can be inspected; loading them to run is not supported yet)\n");
}

}  // namespace sluice::cli
