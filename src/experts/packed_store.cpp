// Packed expert store manifest: JSON text form, consistency checks, atomic write, opening a store, and binding
// it to a model's bound expert views.
#include "experts/packed_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "io/aligned_buffer.h"

namespace sluice {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t k_align = io::k_direct_alignment_bytes;
const char* const k_matrix_names[3] = {"gate", "up", "down"};

WeightFormat parse_format(const std::string& name, const std::string& what) {
    for (int f = 0; f <= int(WeightFormat::MXFP4_GGML); ++f)
        if (weight_format_name(WeightFormat(f)) == name) return WeightFormat(f);
    fail(what, ": unknown weight format '", name, "'");
}

uint64_t parse_hex64(const std::string& s, const std::string& what) {
    SLUICE_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos, what,
                 ": expected 16 lowercase hex digits, got '", s, "'");
    return std::stoull(s, nullptr, 16);
}

// j[key] with a type check; errors name the manifest and the field path.
const json& field(const json& j, const char* key, const std::string& path, const std::string& what) {
    SLUICE_CHECK(j.is_object(), what, ": ", path, " is not an object");
    auto it = j.find(key);
    SLUICE_CHECK(it != j.end(), what, ": field ", path, ".", key, " is missing");
    return *it;
}
uint64_t get_u64(const json& j, const char* key, const std::string& path, const std::string& what) {
    const json& v = field(j, key, path, what);
    SLUICE_CHECK(v.is_number_unsigned(), what, ": field ", path, ".", key, " must be a non-negative integer");
    return v.get<uint64_t>();
}
std::string get_str(const json& j, const char* key, const std::string& path, const std::string& what) {
    const json& v = field(j, key, path, what);
    SLUICE_CHECK(v.is_string(), what, ": field ", path, ".", key, " must be a string");
    return v.get<std::string>();
}
const json& get_array(const json& j, const char* key, const std::string& path, const std::string& what) {
    const json& v = field(j, key, path, what);
    SLUICE_CHECK(v.is_array(), what, ": field ", path, ".", key, " must be an array");
    return v;
}

std::string read_file_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SLUICE_CHECK(f, path, ": cannot open: ", std::strerror(errno));
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
}

void fsync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

std::string manifest_to_text(const PackedManifest& m) {
    json j;
    j["format"] = "sluice-packed-experts";
    j["version"] = m.version;
    j["alignment"] = k_align;
    j["source"] = {{"dir", m.source_dir},
                   {"config_xxh3", hex64(m.config_xxh3)},
                   {"tensor_names_xxh3", hex64(m.tensor_names_xxh3)},
                   {"n_tensors", m.n_tensors}};
    j["dirs"] = m.dirs;
    json files = json::array();
    for (const auto& f : m.files) files.push_back({{"dir", f.dir}, {"name", f.name}, {"bytes", f.bytes}});
    j["files"] = files;
    json layers = json::array();
    for (const auto& L : m.layers) {
        json mats;
        for (int k = 0; k < 3; ++k)
            mats[k_matrix_names[k]] = {{"format", std::string(weight_format_name(L.matrices[size_t(k)].format))},
                                       {"rows", L.matrices[size_t(k)].rows},
                                       {"cols", L.matrices[size_t(k)].cols}};
        layers.push_back({{"layer", L.layer}, {"n_experts", L.n_experts}, {"matrices", mats}, {"tensors", L.tensors}});
    }
    j["layers"] = layers;
    json experts = json::array();
    for (const auto& e : m.experts) {
        json parts = json::array();
        for (const auto& p : e.parts) parts.push_back({p[0], p[1]});
        experts.push_back({{"layer", e.layer},
                           {"expert", e.expert},
                           {"file", e.file},
                           {"offset", e.offset},
                           {"length", e.length},
                           {"parts", parts},
                           {"xxh3", hex64(e.xxh3)}});
    }
    j["experts"] = experts;
    // one expert per line keeps the file greppable without making it huge
    std::string out = "{\n";
    bool first = true;
    for (const char* key : {"format", "version", "alignment", "source", "dirs", "files", "layers", "experts"}) {
        out += first ? "" : ",\n";
        first = false;
        out += "  \"" + std::string(key) + "\": ";
        if (std::string(key) == "experts" || std::string(key) == "layers" || std::string(key) == "files") {
            out += "[";
            const json& arr = j[key];
            for (size_t i = 0; i < arr.size(); ++i) out += (i ? ",\n    " : "\n    ") + arr[i].dump();
            out += arr.empty() ? "]" : "\n  ]";
        } else {
            out += j[key].dump();
        }
    }
    return out + "\n}\n";
}

PackedManifest parse_manifest(const std::string& text, const std::string& what) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail(what, ": not valid JSON: ", e.what());
    }
    PackedManifest m;
    SLUICE_CHECK(j.is_object() && j.contains("format") && j["format"].is_string() &&
                     j["format"].get<std::string>() == "sluice-packed-experts",
                 what,
                 ": field format must be \"sluice-packed-experts\" (not a packed expert manifest)");
    m.version = int(get_u64(j, "version", "", what));
    SLUICE_CHECK(m.version == k_packed_format_version, what, ": field version is ", m.version, ", this build reads ",
                 k_packed_format_version, " (re-run sluice pack)");
    SLUICE_CHECK(get_u64(j, "alignment", "", what) == k_align, what, ": field alignment must be ", k_align);
    const json& src = field(j, "source", "", what);
    m.source_dir = get_str(src, "dir", "source", what);
    m.config_xxh3 = parse_hex64(get_str(src, "config_xxh3", "source", what), what + ": source.config_xxh3");
    m.tensor_names_xxh3 =
        parse_hex64(get_str(src, "tensor_names_xxh3", "source", what), what + ": source.tensor_names_xxh3");
    m.n_tensors = get_u64(src, "n_tensors", "source", what);
    for (const auto& d : get_array(j, "dirs", "", what)) {
        SLUICE_CHECK(d.is_string(), what, ": dirs must hold strings");
        m.dirs.push_back(d.get<std::string>());
    }
    const json& files = get_array(j, "files", "", what);
    for (size_t i = 0; i < files.size(); ++i) {
        const std::string p = "files[" + std::to_string(i) + "]";
        PackedFile f;
        f.dir = uint32_t(get_u64(files[i], "dir", p, what));
        f.name = get_str(files[i], "name", p, what);
        f.bytes = get_u64(files[i], "bytes", p, what);
        SLUICE_CHECK(f.dir < m.dirs.size(), what, ": ", p, ".dir is ", f.dir, " but only ", m.dirs.size(), " dirs");
        SLUICE_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..", what,
                     ": ", p, ".name '", f.name, "' must be a plain file name");
        m.files.push_back(f);
    }
    const json& layers = get_array(j, "layers", "", what);
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string p = "layers[" + std::to_string(i) + "]";
        PackedLayer L;
        L.layer = int64_t(get_u64(layers[i], "layer", p, what));
        L.n_experts = int64_t(get_u64(layers[i], "n_experts", p, what));
        const json& mats = field(layers[i], "matrices", p, what);
        for (int k = 0; k < 3; ++k) {
            const std::string mp = p + ".matrices." + k_matrix_names[k];
            const json& mj = field(mats, k_matrix_names[k], p + ".matrices", what);
            auto& M = L.matrices[size_t(k)];
            M.format = parse_format(get_str(mj, "format", mp, what), what + ": " + mp + ".format");
            M.rows = int64_t(get_u64(mj, "rows", mp, what));
            M.cols = int64_t(get_u64(mj, "cols", mp, what));
        }
        if (layers[i].contains("tensors") && layers[i]["tensors"].is_array())
            for (const auto& t : layers[i]["tensors"])
                if (t.is_string()) L.tensors.push_back(t.get<std::string>());
        m.layers.push_back(L);
    }
    const json& experts = get_array(j, "experts", "", what);
    m.experts.reserve(experts.size());
    for (size_t i = 0; i < experts.size(); ++i) {
        const std::string p = "experts[" + std::to_string(i) + "]";
        const json& ej = experts[i];
        PackedExpert e;
        e.layer = int32_t(get_u64(ej, "layer", p, what));
        e.expert = int32_t(get_u64(ej, "expert", p, what));
        e.file = uint32_t(get_u64(ej, "file", p, what));
        e.offset = get_u64(ej, "offset", p, what);
        e.length = get_u64(ej, "length", p, what);
        e.xxh3 = parse_hex64(get_str(ej, "xxh3", p, what), what + ": " + p + ".xxh3");
        const std::string id = p + " (layer " + std::to_string(e.layer) + ", expert " + std::to_string(e.expert) + ")";
        SLUICE_CHECK(e.file < m.files.size(), what, ": ", id, ".file is ", e.file, " but only ", m.files.size(),
                     " files");
        SLUICE_CHECK(e.offset % k_align == 0, what, ": ", id, ".offset ", e.offset, " is not 4 KiB-aligned");
        SLUICE_CHECK(e.length > 0, what, ": ", id, ".length is 0");
        // Compared without overflow (any number may be huge): the padded extent must fit the file.
        const uint64_t whole_pages = m.files[e.file].bytes / k_align * k_align;
        SLUICE_CHECK(e.length <= whole_pages && e.offset <= whole_pages - io::align_up(e.length, k_align), what, ": ",
                     id, " ends past its file (", m.files[e.file].bytes, " bytes)");
        const json& parts = get_array(ej, "parts", p, what);
        SLUICE_CHECK(!parts.empty() && parts.size() <= 6, what, ": ", id, ".parts must hold 1 to 6 entries");
        uint64_t end = 0;
        for (size_t k = 0; k < parts.size(); ++k) {
            const json& pj = parts[k];
            SLUICE_CHECK(pj.is_array() && pj.size() == 2 && pj[0].is_number_unsigned() && pj[1].is_number_unsigned(),
                         what, ": ", id, ".parts[", k, "] must be [offset, length]");
            const uint64_t off = pj[0].get<uint64_t>(), len = pj[1].get<uint64_t>();
            SLUICE_CHECK(off % k_align == 0 && off >= end && len > 0 && len <= e.length && off <= e.length - len, what,
                         ": ", id,
                         ".parts[", k, "] = [", off, ", ", len, "] is unaligned, overlapping or outside the expert");
            end = off + len;
            e.parts.push_back({off, len});
        }
        m.experts.push_back(std::move(e));
    }
    return m;
}

void write_manifest_atomic(const std::string& dir, const PackedManifest& m) {
    const std::string final_path = (fs::path(dir) / k_packed_manifest_name).string();
    const std::string tmp = final_path + ".tmp";
    const std::string text = manifest_to_text(m);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    SLUICE_CHECK(fd >= 0, tmp, ": cannot create: ", std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            fail(tmp, ": write failed: ", std::strerror(err));
        }
        done += size_t(n);
    }
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    SLUICE_CHECK(synced, tmp, ": fsync failed: ", std::strerror(errno));
    SLUICE_CHECK(std::rename(tmp.c_str(), final_path.c_str()) == 0, final_path, ": cannot rename from ", tmp, ": ",
                 std::strerror(errno));
    fsync_dir(dir);
}

PackedStore open_packed_store(const std::vector<std::string>& dirs) {
    SLUICE_CHECK(!dirs.empty(), "--experts-dir: no folder given");
    PackedStore s;
    for (const auto& d : dirs) {
        SLUICE_CHECK(fs::is_directory(d), "--experts-dir: ", d, " is not a folder");
        if (s.manifest_path.empty() && fs::exists(fs::path(d) / k_packed_manifest_name))
            s.manifest_path = (fs::path(d) / k_packed_manifest_name).string();
    }
    if (s.manifest_path.empty()) {
        std::string list;
        for (const auto& d : dirs) list += (list.empty() ? "" : ", ") + d;
        fail("--experts-dir: no ", k_packed_manifest_name, " in ", list, " (write a packed store with sluice pack)");
    }
    s.manifest = parse_manifest(read_file_text(s.manifest_path), s.manifest_path);
    for (const auto& f : s.manifest.files) {
        std::vector<std::string> candidates;
        for (const auto& d : dirs) candidates.push_back((fs::path(d) / f.name).string());
        candidates.push_back((fs::path(s.manifest.dirs[f.dir]) / f.name).string());
        std::string found;
        for (const auto& c : candidates)
            if (fs::is_regular_file(c)) {
                found = c;
                break;
            }
        SLUICE_CHECK(!found.empty(), s.manifest_path, ": data file ", f.name, " not found in the --experts-dir folders",
                     " nor in ", s.manifest.dirs[f.dir]);
        const uint64_t size = fs::file_size(found);
        SLUICE_CHECK(size >= f.bytes, found, ": truncated: ", size, " bytes, but ", s.manifest_path, " says ", f.bytes,
                     " (files[].bytes)");
        s.paths.push_back(found);
    }
    return s;
}

uint64_t config_xxh3_of(const std::string& model_dir) {
    const std::string text = read_file_text((fs::path(model_dir) / "config.json").string());
    return XXH3_64bits(text.data(), text.size());
}

uint64_t tensor_names_xxh3_of(const Checkpoint& ck) {
    auto names = ck.names();
    std::sort(names.begin(), names.end());
    std::string joined;
    for (const auto& n : names) joined += n + "\n";
    return XXH3_64bits(joined.data(), joined.size());
}

ExpertLayout bind_packed_store(const PackedStore& store, const Checkpoint& ck,
                               const std::vector<std::vector<ExpertWeights>>& views) {
    const PackedManifest& m = store.manifest;
    const std::string& what = store.manifest_path;
    const uint64_t cfg = config_xxh3_of(ck.dir());
    SLUICE_CHECK(cfg == m.config_xxh3, what, ": source.config_xxh3 is ", hex64(m.config_xxh3), " but ", ck.dir(),
                 "/config.json hashes to ", hex64(cfg), ": this store was packed from another model (", m.source_dir,
                 ")");
    const uint64_t names = tensor_names_xxh3_of(ck);
    SLUICE_CHECK(names == m.tensor_names_xxh3, what, ": source.tensor_names_xxh3 is ", hex64(m.tensor_names_xxh3),
                 " but the tensors of ", ck.dir(), " hash to ", hex64(names), ": packed from a different checkpoint");

    std::map<int64_t, const PackedLayer*> layer_of;
    for (size_t i = 0; i < m.layers.size(); ++i) {
        const PackedLayer& L = m.layers[i];
        SLUICE_CHECK(L.layer >= 0 && size_t(L.layer) < views.size() && !views[size_t(L.layer)].empty(), what,
                     ": layers[", i, "].layer ", L.layer, " has no routed experts in this model");
        SLUICE_CHECK(layer_of.emplace(L.layer, &L).second, what, ": layers[", i, "].layer ", L.layer, " repeats");
    }
    ExpertLayout layout;
    layout.origin = what;
    layout.paths = store.paths;
    layout.where.resize(views.size());
    for (size_t l = 0; l < views.size(); ++l) {
        if (views[l].empty()) continue;
        auto it = layer_of.find(int64_t(l));
        SLUICE_CHECK(it != layer_of.end(), what, ": layers has no entry for layer ", l,
                     " (the model routes experts there)");
        const PackedLayer& L = *it->second;
        SLUICE_CHECK(size_t(L.n_experts) == views[l].size(), what, ": layer ", l, " n_experts is ", L.n_experts,
                     ", the model has ", views[l].size());
        for (int k = 0; k < 3; ++k) {
            const Weight& w = expert_matrix(views[l][0], k);
            const PackedMatrix& pm = L.matrices[size_t(k)];
            SLUICE_CHECK(pm.format == w.format && pm.rows == w.rows && pm.cols == w.cols, what, ": layer ", l,
                         " matrices.", k_matrix_names[k], " is ", weight_format_name(pm.format), " [", pm.rows, ", ",
                         pm.cols, "], the model's is ", weight_format_name(w.format), " [", w.rows, ", ", w.cols, "]");
        }
        layout.where[l].resize(views[l].size());
    }
    std::vector<std::vector<uint8_t>> seen(views.size());
    for (size_t l = 0; l < views.size(); ++l) seen[l].assign(views[l].size(), 0);
    for (size_t i = 0; i < m.experts.size(); ++i) {
        const PackedExpert& e = m.experts[i];
        SLUICE_CHECK(e.layer >= 0 && size_t(e.layer) < views.size() && e.expert >= 0 &&
                         size_t(e.expert) < views[size_t(e.layer)].size(),
                     what, ": experts[", i, "] (layer ", e.layer, ", expert ", e.expert,
                     ") is not an expert of this model");
        SLUICE_CHECK(!seen[size_t(e.layer)][size_t(e.expert)], what, ": experts[", i, "] (layer ", e.layer, ", expert ",
                     e.expert, ") repeats");
        seen[size_t(e.layer)][size_t(e.expert)] = 1;
        const ExpertWeights& w = views[size_t(e.layer)][size_t(e.expert)];
        const auto lens = expert_part_lengths(w);
        SLUICE_CHECK(lens.size() == e.parts.size(), what, ": experts[", i, "] (layer ", e.layer, ", expert ", e.expert,
                     ") has ", e.parts.size(), " parts, the model's expert has ", lens.size());
        ExpertLocation loc;
        loc.shape = w;
        for (size_t k = 0; k < lens.size(); ++k) {
            SLUICE_CHECK(e.parts[k][1] == lens[k], what, ": experts[", i, "] (layer ", e.layer, ", expert ", e.expert,
                         ") parts[", k, "] length is ", e.parts[k][1], ", the model's is ", lens[k]);
            loc.parts[k] = {e.file, e.offset + e.parts[k][0], e.parts[k][1], e.parts[k][0]};
        }
        loc.n_parts = int(lens.size());
        merge_reads(loc);
        SLUICE_ASSERT(loc.n_reads == 1, "packed expert must be one read");
        loc.has_checksum = true;
        loc.checksum = e.xxh3;
        loc.checksum_bytes = e.length;
        layout.where[size_t(e.layer)][size_t(e.expert)] = loc;
    }
    for (size_t l = 0; l < views.size(); ++l)
        for (size_t x = 0; x < seen[l].size(); ++x)
            SLUICE_CHECK(seen[l][x], what, ": experts has no entry for (layer ", l, ", expert ", x, ")");
    return layout;
}

std::vector<std::string> split_dir_list(const std::string& text) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string item = text.substr(i, j - i);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (!item.empty()) out.push_back(item);
        i = j + 1;
    }
    return out;
}

}  // namespace sluice
