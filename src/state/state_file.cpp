#include "state/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/error.h"

namespace sluice {

namespace {

using json = nlohmann::json;
constexpr char k_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'T'};

std::string hex64(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
}

template <class T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_floats(std::string& out, const std::vector<float>& v) {
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
void put_rows(std::string& out, const PagedRows& r) {
    for (int64_t t = 0; t < r.rows(); ++t)
        out.append(reinterpret_cast<const char*>(r.row(t)), size_t(r.width()) * sizeof(float));
}

json layout_json(const StateLayout& l) {
    json layers = json::array();
    for (const auto& d : l.layers)
        layers.push_back({int(d.kind), d.width, d.kda_heads, d.kda_head_dim, d.conv_kernel});
    return layers;
}

// Reads sequentially from the loaded bytes; every read checks the length first.
struct Cursor {
    const std::string& path;
    std::string_view bytes;
    size_t at = 0, end = 0;
    void need(size_t n, const char* what) const {
        SLUICE_CHECK(n <= end - at, path, ": state file truncated: ", what, " needs ", n, " bytes at offset ", at,
                     ", ", end - at, " left");
    }
    template <class T>
    T get(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, bytes.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    void floats(std::vector<float>& v, uint64_t count, const char* what) {
        SLUICE_CHECK(count <= (end - at) / sizeof(float), path, ": state file truncated: ", what, " needs ", count,
                     " floats at offset ", at);
        v.resize(size_t(count));
        if (count > 0) std::memcpy(v.data(), bytes.data() + at, size_t(count) * sizeof(float));  // empty: null data
        at += size_t(count) * sizeof(float);
    }
    void rows(PagedRows& r, int64_t n, const char* what) {
        SLUICE_CHECK(uint64_t(n) * uint64_t(r.width()) <= (end - at) / sizeof(float), path, ": state file truncated: ",
                     what, " needs ", n, " rows at offset ", at);
        // a page's rows are contiguous in the page and in the file: one copy per page
        for (int64_t t = 0; t < n; t += PagedRows::k_page_rows) {
            const int64_t count = std::min(n - t, PagedRows::k_page_rows);
            const size_t bytes_now = size_t(count) * size_t(r.width()) * sizeof(float);
            std::memcpy(r.write_rows(t, count), bytes.data() + at, bytes_now);
            at += bytes_now;
        }
    }
};

}  // namespace

namespace {

std::string header_of(const SequenceState& s, const StateFileModel& model) {
    json h = {{"architecture", model.architecture},
              {"config_xxh3", hex64(model.config_xxh3)},
              {"weights_xxh3", hex64(model.weights_xxh3)},
              {"n_past", s.n_past()},
              {"snapshot_position", s.snapshot_position()},
              {"layers", layout_json(s.layout())}};
    return h.dump();
}

}  // namespace

uint64_t state_file_bytes(const SequenceState& s, const StateFileModel& model) {
    const StateLayout& L = s.layout();
    const uint64_t n = uint64_t(s.n_past());
    uint64_t floats = 0;
    for (size_t l = 0; l < L.layers.size(); ++l) {
        switch (L.layers[l].kind) {
            case StateLayout::Kind::latent: floats += n * uint64_t(s.latent(int64_t(l)).data.width()); break;
            case StateLayout::Kind::kv:
                floats += n * uint64_t(s.kv(int64_t(l)).k.width() + s.kv(int64_t(l)).v.width());
                break;
            case StateLayout::Kind::kda: {
                const KdaState& k = s.kda(int64_t(l));
                floats += k.conv.size() + k.state.size();
                if (s.snapshot_position() >= 0) floats += k.snap_conv.size() + k.snap_state.size() + k.journal.size();
                break;
            }
            case StateLayout::Kind::none: break;
        }
    }
    return sizeof k_magic + 8 + header_of(s, model).size() + n * 4 + floats * 4 + 8;
}

void save_state(const SequenceState& s, const StateFileModel& model, const std::string& path) {
    const StateLayout& L = s.layout();
    const std::string header = header_of(s, model);
    std::string out(k_magic, sizeof k_magic);
    put(out, k_state_file_version);
    put(out, uint32_t(header.size()));
    out += header;
    out.append(reinterpret_cast<const char*>(s.tokens().data()), s.tokens().size() * sizeof(int32_t));
    for (size_t l = 0; l < L.layers.size(); ++l) {
        switch (L.layers[l].kind) {
            case StateLayout::Kind::latent:
                put_rows(out, s.latent(int64_t(l)).data);
                break;
            case StateLayout::Kind::kv:
                put_rows(out, s.kv(int64_t(l)).k);
                put_rows(out, s.kv(int64_t(l)).v);
                break;
            case StateLayout::Kind::kda: {
                const KdaState& k = s.kda(int64_t(l));
                put_floats(out, k.conv);
                put_floats(out, k.state);
                if (s.snapshot_position() >= 0) {
                    put_floats(out, k.snap_conv);
                    put_floats(out, k.snap_state);
                    put_floats(out, k.journal);
                }
                break;
            }
            case StateLayout::Kind::none:
                break;
        }
    }
    put(out, uint64_t(XXH3_64bits(out.data(), out.size())));

    const std::string tmp = path + ".partial";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        SLUICE_CHECK(f.good(), path, ": cannot write the state file (", std::strerror(errno), ")");
        f.write(out.data(), std::streamsize(out.size()));
        f.flush();
        SLUICE_CHECK(f.good(), path, ": writing the state file failed (", std::strerror(errno), ")");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    SLUICE_CHECK(!ec, path, ": cannot rename the state file into place (", ec.message(), ")");
}

StateFileInfo peek_state(const std::string& path, const StateFileModel& model) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    SLUICE_CHECK(f.good(), path, ": cannot open the state file (", std::strerror(errno), ")");
    StateFileInfo info;
    info.file_bytes = uint64_t(f.tellg());
    f.seekg(0);
    char head[16];
    f.read(head, sizeof head);
    SLUICE_CHECK(f.gcount() == sizeof head && std::memcmp(head, k_magic, sizeof k_magic) == 0, path,
                 ": not a sluice state file (no \"SLUICEST\" at the start)");
    uint32_t version = 0, header_bytes = 0;
    std::memcpy(&version, head + 8, 4);
    std::memcpy(&header_bytes, head + 12, 4);
    SLUICE_CHECK(version == k_state_file_version, path, ": state file version ", version, "; this sluice reads version ",
                 k_state_file_version);
    SLUICE_CHECK(uint64_t(header_bytes) + 16 + 8 <= info.file_bytes, path, ": state file truncated (",
                 info.file_bytes, " bytes)");
    std::string text(header_bytes, '\0');
    f.read(text.data(), header_bytes);
    const json h = json::parse(text, nullptr, false);
    SLUICE_CHECK(h.is_object(), path, ": state file header is not a JSON object");
    const auto field = [&](const char* key) -> const json& {
        auto it = h.find(key);
        SLUICE_CHECK(it != h.end(), path, ": state file header field \"", key, "\" is missing");
        return *it;
    };
    SLUICE_CHECK(field("architecture") == model.architecture && field("config_xxh3") == hex64(model.config_xxh3) &&
                     field("weights_xxh3") == hex64(model.weights_xxh3),
                 path, ": state file is from another model");
    SLUICE_CHECK(field("n_past").is_number_integer() && field("snapshot_position").is_number_integer(), path,
                 ": state file header has no integer n_past and snapshot_position");
    info.n_past = field("n_past").get<int64_t>();
    info.snapshot_position = field("snapshot_position").get<int64_t>();
    SLUICE_CHECK(info.n_past >= 0 && info.snapshot_position >= -1 && info.snapshot_position <= info.n_past &&
                     uint64_t(info.n_past) <= (info.file_bytes - 16 - header_bytes - 8) / 4,
                 path, ": state file header has n_past ", info.n_past, " and snapshot_position ",
                 info.snapshot_position, " for ", info.file_bytes, " bytes");
    info.tokens.resize(size_t(info.n_past));
    f.read(reinterpret_cast<char*>(info.tokens.data()), std::streamsize(info.n_past * 4));
    SLUICE_CHECK(f.good() || info.n_past == 0, path, ": state file truncated in its token ids");
    return info;
}

namespace {

// The whole file in one buffer that nothing zeroes first, in as few pread calls as the kernel allows. (Through an
// ifstream's istreambuf_iterator a 3 MB state took 10 ms, all of the SSD tier's cost in a restarted chat turn; this
// and the copies into pages take about 3 ms.)
struct FileBytes {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    std::string_view view() const { return {data.get(), size}; }
};

FileBytes read_whole(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    SLUICE_CHECK(fd >= 0, path, ": cannot open the state file (", std::strerror(errno), ")");
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    SLUICE_CHECK(::fstat(fd, &st) == 0, path, ": cannot stat the state file (", std::strerror(errno), ")");
    FileBytes b;
    b.data.reset(new char[size_t(st.st_size) + 1]);  // + 1: a file that grew since fstat shows as longer
    while (b.size <= size_t(st.st_size)) {
        const ssize_t got = ::pread(fd, b.data.get() + b.size, size_t(st.st_size) + 1 - b.size, off_t(b.size));
        if (got < 0 && errno == EINTR) continue;
        SLUICE_CHECK(got >= 0, path, ": cannot read the state file (", std::strerror(errno), ")");
        if (got == 0) break;
        b.size += size_t(got);
    }
    return b;
}

}  // namespace

void load_state(const std::string& path, const StateFileModel& model, SequenceState& into) {
    SLUICE_CHECK(into.n_past() == 0, "load_state: the target sequence is not empty");
    const FileBytes file = read_whole(path);
    const std::string_view bytes = file.view();
    SLUICE_CHECK(bytes.size() >= sizeof k_magic && std::memcmp(bytes.data(), k_magic, sizeof k_magic) == 0, path,
                 ": not a sluice state file (no \"SLUICEST\" at the start)");
    Cursor c{path, bytes, sizeof k_magic, bytes.size()};
    const auto version = c.get<uint32_t>("the version");
    SLUICE_CHECK(version == k_state_file_version, path, ": state file version ", version, "; this sluice reads version ",
                 k_state_file_version);
    SLUICE_CHECK(bytes.size() >= c.at + 4 + 8, path, ": state file truncated (", bytes.size(), " bytes)");
    uint64_t stored = 0;
    std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
    SLUICE_CHECK(stored == XXH3_64bits(bytes.data(), bytes.size() - 8), path,
                 ": state file checksum mismatch (the file is damaged or cut short)");
    c.end = bytes.size() - 8;
    const auto header_bytes = c.get<uint32_t>("the header length");
    c.need(header_bytes, "the header");
    const json h = json::parse(bytes.substr(c.at, header_bytes), nullptr, false);  // a view: no copy
    c.at += header_bytes;
    SLUICE_CHECK(h.is_object(), path, ": state file header is not a JSON object");
    const auto str = [&](const char* key) {
        auto it = h.find(key);
        SLUICE_CHECK(it != h.end() && it->is_string(), path, ": state file header field \"", key, "\" is missing");
        return it->get<std::string>();
    };
    const auto num = [&](const char* key) {
        auto it = h.find(key);
        SLUICE_CHECK(it != h.end() && it->is_number_integer(), path, ": state file header field \"", key,
                     "\" is missing or not an integer");
        return it->get<int64_t>();
    };
    SLUICE_CHECK(str("architecture") == model.architecture, path, ": state file is from a ", str("architecture"),
                 " model, not this ", model.architecture);
    SLUICE_CHECK(str("config_xxh3") == hex64(model.config_xxh3), path,
                 ": state file is from another model (its config.json differs)");
    SLUICE_CHECK(str("weights_xxh3") == hex64(model.weights_xxh3), path,
                 ": state file is from another model (its weight files differ)");
    const StateLayout& L = into.layout();
    SLUICE_CHECK(h.contains("layers") && h["layers"] == layout_json(L), path,
                 ": state file's layer layout does not match this model's");
    const int64_t n = num("n_past"), snap = num("snapshot_position");
    SLUICE_CHECK(n >= 0 && snap >= -1 && snap <= n, path, ": state file header has n_past ", n,
                 " and snapshot_position ", snap);

    // read into a fresh copy, so `into` stays as it was when anything is wrong
    auto s = into.fork();
    SLUICE_CHECK(uint64_t(n) <= (c.end - c.at) / 4, path, ": state file truncated: ", n, " token ids at offset ",
                 c.at);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    if (n > 0) std::memcpy(tokens.data(), bytes.data() + c.at, size_t(n) * 4);
    c.at += size_t(n) * 4;
    for (size_t l = 0; l < L.layers.size(); ++l) {
        const auto& d = L.layers[l];
        switch (d.kind) {
            case StateLayout::Kind::latent:
                c.rows(s->latent(int64_t(l)).data, n, "a latent cache");
                break;
            case StateLayout::Kind::kv:
                c.rows(s->kv(int64_t(l)).k, n, "a key cache");
                c.rows(s->kv(int64_t(l)).v, n, "a value cache");
                break;
            case StateLayout::Kind::kda: {
                KdaState& k = s->kda(int64_t(l));
                const uint64_t conv = k.conv.size(), st = k.state.size();
                c.floats(k.conv, conv, "a KDA conv state");
                c.floats(k.state, st, "a KDA state");
                if (snap >= 0) {
                    c.floats(k.snap_conv, conv, "a KDA snapshot");
                    c.floats(k.snap_state, st, "a KDA snapshot");
                    c.floats(k.journal, uint64_t(n - snap) * uint64_t(k.journal_width()), "a KDA journal");
                    k.journaling = true;
                }
                break;
            }
            case StateLayout::Kind::none:
                break;
        }
    }
    SLUICE_CHECK(c.at == c.end, path, ": state file has ", c.end - c.at, " bytes after the last layer");
    s->tokens_ = std::move(tokens);
    s->snap_pos_ = snap;
    into = std::move(*s);
}

}  // namespace sluice
