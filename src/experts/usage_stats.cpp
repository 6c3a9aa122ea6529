#include "experts/usage_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <xxhash.h>

#include "core/error.h"
#include "experts/expert_location.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"

namespace sluice {

namespace {

using json = nlohmann::json;
constexpr const char* k_format = "sluice-expert-usage";
constexpr int64_t k_version = 1;

std::string read_all(const std::string& path, uint64_t max_bytes) {
    std::ifstream f(path, std::ios::binary);
    SLUICE_CHECK(f, path, ": cannot open (", std::strerror(errno), ")");
    f.seekg(0, std::ios::end);
    const auto size = f.tellg();
    SLUICE_CHECK(size >= 0, path, ": cannot read its size");
    SLUICE_CHECK(uint64_t(size) <= max_bytes, path, ": ", uint64_t(size), " bytes is larger than the ", max_bytes,
                 " bytes a usage statistics file may have");
    f.seekg(0);
    std::string text(size_t(size), '\0');
    f.read(text.data(), size);
    SLUICE_CHECK(f.gcount() == size, path, ": truncated while reading");
    return text;
}

// An unsigned integer field within [lo, hi].
uint64_t get_uint(const json& o, const char* key, uint64_t lo, uint64_t hi, const std::string& where) {
    auto it = o.find(key);
    SLUICE_CHECK(it != o.end(), where, ": missing \"", key, "\"");
    SLUICE_CHECK(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0), where, ": \"", key,
                 "\" is not a non-negative integer");
    const uint64_t v = it->get<uint64_t>();
    SLUICE_CHECK(v >= lo && v <= hi, where, ": \"", key, "\" = ", v, " is out of range [", lo, ", ", hi, "]");
    return v;
}

uint64_t get_hex64(const json& o, const char* key, const std::string& where) {
    auto it = o.find(key);
    SLUICE_CHECK(it != o.end() && it->is_string(), where, ": \"", key, "\" is missing or not a string");
    const std::string& s = it->get_ref<const std::string&>();
    SLUICE_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos, where, ": \"", key,
                 "\" is not 16 lowercase hex digits");
    return std::stoull(s, nullptr, 16);
}

}  // namespace

ModelFingerprint model_fingerprint(const Checkpoint& ck, int64_t n_layers, int64_t experts_per_layer,
                                   uint64_t expert_bytes) {
    ModelFingerprint f;
    f.n_layers = n_layers;
    f.experts_per_layer = experts_per_layer;
    f.expert_bytes = expert_bytes;
    const std::string config_path = (std::filesystem::path(ck.dir()) / "config.json").string();
    const std::string config = read_all(config_path, uint64_t(16) << 20);
    f.config_hash = XXH3_64bits(config.data(), config.size());
    const json j = json::parse(config, nullptr, false);
    if (j.is_object()) {
        auto a = j.find("architectures");
        auto t = j.find("model_type");
        if (a != j.end() && a->is_array() && !a->empty() && a->front().is_string())
            f.architecture = a->front().get<std::string>();
        else if (t != j.end() && t->is_string())
            f.architecture = t->get<std::string>();
    }
    std::vector<std::pair<std::string, uint64_t>> files;
    for (const auto& file : ck.files())
        files.emplace_back(std::filesystem::path(file->path()).filename().string(), file->size_bytes());
    std::sort(files.begin(), files.end());
    std::string sizes;
    for (const auto& [name, size] : files) sizes += cat(name, '\t', size, '\n');
    f.weights_hash = XXH3_64bits(sizes.data(), sizes.size());
    return f;
}

std::string fingerprint_difference(const ModelFingerprint& a, const ModelFingerprint& b) {
    if (a.architecture != b.architecture) return cat("architecture ", a.architecture, " vs ", b.architecture);
    if (a.n_layers != b.n_layers) return cat("layers ", a.n_layers, " vs ", b.n_layers);
    if (a.experts_per_layer != b.experts_per_layer)
        return cat("experts per layer ", a.experts_per_layer, " vs ", b.experts_per_layer);
    if (a.expert_bytes != b.expert_bytes) return cat("expert bytes ", a.expert_bytes, " vs ", b.expert_bytes);
    if (a.config_hash != b.config_hash)
        return cat("config.json hash ", hex64(a.config_hash), " vs ", hex64(b.config_hash));
    if (a.weights_hash != b.weights_hash)
        return cat("weight file sizes hash ", hex64(a.weights_hash), " vs ", hex64(b.weights_hash));
    return {};
}

UsageStats parse_usage_stats(std::string_view text, const std::string& name) {
    SLUICE_CHECK(text.size() <= k_usage_max_file_bytes, name, ": larger than ", k_usage_max_file_bytes, " bytes");
    const json j = json::parse(text.begin(), text.end(), nullptr, false);
    SLUICE_CHECK(!j.is_discarded(), name, ": not valid JSON (truncated or corrupt)");
    SLUICE_CHECK(j.is_object(), name, ": not a JSON object");
    auto fmt = j.find("format");
    SLUICE_CHECK(fmt != j.end() && fmt->is_string() && fmt->get_ref<const std::string&>() == k_format, name,
                 ": \"format\" is not \"", k_format, "\"");
    const uint64_t version = get_uint(j, "version", 0, UINT64_MAX, name);
    SLUICE_CHECK(version == uint64_t(k_version), name, ": version ", version, " is not supported (", k_version, ")");

    UsageStats s;
    auto m = j.find("model");
    SLUICE_CHECK(m != j.end() && m->is_object(), name, ": \"model\" is missing or not an object");
    const std::string mw = name + " model";
    auto arch = m->find("architecture");
    SLUICE_CHECK(arch != m->end() && arch->is_string(), mw, ": \"architecture\" is missing or not a string");
    s.model.architecture = arch->get<std::string>();
    s.model.n_layers = int64_t(get_uint(*m, "layers", 1, uint64_t(k_usage_max_layers), mw));
    s.model.experts_per_layer = int64_t(get_uint(*m, "experts_per_layer", 1, uint64_t(k_usage_max_experts), mw));
    s.model.expert_bytes = get_uint(*m, "expert_bytes", 1, UINT64_MAX, mw);
    s.model.config_hash = get_hex64(*m, "config_xxh3", mw);
    s.model.weights_hash = get_hex64(*m, "weights_xxh3", mw);
    s.runs = get_uint(j, "runs", 0, UINT64_MAX, name);

    auto c = j.find("counts");
    SLUICE_CHECK(c != j.end() && c->is_array(), name, ": \"counts\" is missing or not an array");
    SLUICE_CHECK(int64_t(c->size()) == s.model.n_layers, name, ": \"counts\" has ", c->size(), " rows, model says ",
                 s.model.n_layers, " layers");
    s.counts.resize(c->size());
    for (size_t l = 0; l < c->size(); ++l) {
        const json& row = (*c)[l];
        SLUICE_CHECK(row.is_array(), name, ": counts[", l, "] is not an array");
        SLUICE_CHECK(row.empty() || int64_t(row.size()) == s.model.experts_per_layer, name, ": counts[", l, "] has ",
                     row.size(), " entries, expected 0 or ", s.model.experts_per_layer);
        auto& out = s.counts[l];
        out.reserve(row.size());
        for (size_t e = 0; e < row.size(); ++e) {
            const json& v = row[e];
            SLUICE_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), name, ": counts[",
                         l, "][", e, "] is not a non-negative integer");
            const uint64_t n = v.get<uint64_t>();
            SLUICE_CHECK(n <= k_usage_max_count, name, ": counts[", l, "][", e, "] = ", n, " is out of range");
            out.push_back(n);
        }
    }
    return s;
}

std::string serialize_usage_stats(const UsageStats& s) {
    json j;
    j["format"] = k_format;
    j["version"] = k_version;
    j["model"] = {{"architecture", s.model.architecture}, {"layers", s.model.n_layers},
                  {"experts_per_layer", s.model.experts_per_layer}, {"expert_bytes", s.model.expert_bytes},
                  {"config_xxh3", hex64(s.model.config_hash)}, {"weights_xxh3", hex64(s.model.weights_hash)}};
    j["runs"] = s.runs;
    j["counts"] = s.counts;
    return j.dump() + "\n";
}

UsageStats read_usage_stats(const std::string& path) {
    return parse_usage_stats(read_all(path, k_usage_max_file_bytes), path);
}

void write_usage_stats(const std::string& path, const UsageStats& s) {
    const std::string text = serialize_usage_stats(s);
    const std::string tmp = cat(path, ".tmp.", ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    SLUICE_CHECK(fd >= 0, tmp, ": cannot create (", std::strerror(errno), ")");
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string why = std::strerror(errno);
            ::close(fd);
            ::unlink(tmp.c_str());
            fail(tmp, ": write failed (", why, ")");
        }
        done += size_t(n);
    }
    const bool synced = ::fdatasync(fd) == 0;
    const std::string why = std::strerror(errno);
    ::close(fd);
    if (!synced) {
        ::unlink(tmp.c_str());
        fail(tmp, ": fdatasync failed (", why, ")");
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string err = std::strerror(errno);
        ::unlink(tmp.c_str());
        fail(path, ": cannot rename ", tmp, " over it (", err, ")");
    }
}

UsageStats merge_usage(const UsageStats* old, const ModelFingerprint& model,
                       const std::vector<std::vector<uint64_t>>& live) {
    UsageStats s;
    s.model = model;
    s.runs = (old ? old->runs : 0) + 1;
    s.counts = live;
    if (old) {
        SLUICE_ASSERT(old->counts.size() == live.size(), "usage merge: layer count differs");
        for (size_t l = 0; l < live.size(); ++l) {
            SLUICE_ASSERT(old->counts[l].size() == live[l].size(), "usage merge: layer ", l, " expert count differs");
            for (size_t e = 0; e < live[l].size(); ++e)
                s.counts[l][e] = std::min(k_usage_max_count, old->counts[l][e] / 2 + live[l][e]);
        }
    }
    return s;
}

std::vector<ExpertKey> choose_pins(const UsageStats& s, size_t max_pins) {
    struct Item {
        uint64_t count;
        ExpertKey key;
    };
    std::vector<Item> items;
    for (size_t l = 0; l < s.counts.size(); ++l)
        for (size_t e = 0; e < s.counts[l].size(); ++e)
            if (s.counts[l][e] > 0) items.push_back({s.counts[l][e], {int32_t(l), int32_t(e)}});
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
        if (a.count != b.count) return a.count > b.count;
        return a.key.packed() < b.key.packed();
    });
    std::vector<ExpertKey> out;
    for (size_t i = 0; i < items.size() && i < max_pins; ++i) out.push_back(items[i].key);
    return out;
}

}  // namespace sluice
