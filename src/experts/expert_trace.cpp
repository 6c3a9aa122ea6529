#include "experts/expert_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/log.h"
#include "experts/expert_location.h"

namespace sluice {

namespace {
constexpr char k_magic[8] = {'S', 'L', 'T', 'R', 'A', 'C', 'E', '1'};
constexpr char k_end_magic[8] = {'S', 'L', 'T', 'R', 'E', 'N', 'D', '\0'};
constexpr uint8_t k_record_tag = 'R', k_end_tag = 'E';

template <class T>
void append(std::vector<uint8_t>& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));  // the format's hosts are little-endian (x86-64, aarch64)
}

void append_string(std::vector<uint8_t>& b, const std::string& s) {
    const size_t n = std::min<size_t>(s.size(), 255);
    append<uint8_t>(b, uint8_t(n));
    b.insert(b.end(), s.begin(), s.begin() + long(n));
}

// Bounds-checked cursor over the file's bytes: running past the end is a truncation, named with the offset.
struct Cursor {
    const std::string& path;
    const std::vector<uint8_t>& bytes;
    size_t at = 0;
    std::string what;  // what is being read, for the error
    void need(size_t n) const {
        if (bytes.size() - at < n)
            fail("expert trace ", path, " is truncated: ", what, " at byte ", at, " needs ", n, " bytes, ",
                 bytes.size() - at, " left (did the run finish?)");
    }
    template <class T>
    T get() {
        need(sizeof(T));
        T v;
        std::memcpy(&v, bytes.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    std::string get_string() {
        const size_t n = get<uint8_t>();
        need(n);
        std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
        at += n;
        return s;
    }
};
}  // namespace

ExpertTraceWriter::ExpertTraceWriter(const std::string& path, const TraceHeader& header)
    : path_(path), header_(header) {
    SLUICE_CHECK(header.n_experts > 0 && header.n_experts <= 65536 && header.n_layers > 0 && header.n_layers <= 65536,
                 "expert trace ", path, ": ", header.n_layers, " layers of ", header.n_experts,
                 " experts cannot be traced");
    f_ = std::fopen(path.c_str(), "wb");
    SLUICE_CHECK(f_, "expert trace ", path, ": cannot create: ", std::strerror(errno));
    std::vector<uint8_t> b(k_magic, k_magic + 8);
    append<uint32_t>(b, k_trace_version);
    append<uint32_t>(b, header.n_layers);
    append<uint32_t>(b, header.n_experts);
    append<uint32_t>(b, header.cache_slots);
    append<uint64_t>(b, header.config_xxh3);
    append<uint64_t>(b, header.weights_xxh3);
    append<uint8_t>(b, header.prefetch ? 1 : 0);
    append_string(b, header.architecture);
    append_string(b, header.policy);
    put(b.data(), b.size());
}

ExpertTraceWriter::~ExpertTraceWriter() {
    if (!f_) return;
    try {
        close();
    } catch (const std::exception& e) {
        log_info("warning: ", e.what());
    }
}

void ExpertTraceWriter::put(const void* p, size_t n) {
    if (!failed_ && std::fwrite(p, 1, n, f_) != n) failed_ = true;
}

void ExpertTraceWriter::write(uint16_t layer, uint8_t top_k, uint32_t n_rows, std::span<const int32_t> choices,
                              std::span<const std::pair<uint16_t, uint8_t>> distinct,
                              std::span<const std::pair<uint16_t, uint8_t>> hints) {
    SLUICE_ASSERT(f_, "expert trace written after close");
    SLUICE_ASSERT(layer < header_.n_layers && choices.size() == size_t(n_rows) * top_k && distinct.size() <= 65535 &&
                      hints.size() <= 65535,
                  "expert trace record: layer ", layer, ", ", choices.size(), " choices for ", n_rows, " rows");
    if (int32_t(layer) <= last_layer_) ++pass_;
    last_layer_ = layer;
    buf_.clear();
    append<uint8_t>(buf_, k_record_tag);
    append<uint8_t>(buf_, top_k);
    append<uint16_t>(buf_, layer);
    append<uint32_t>(buf_, pass_);
    append<uint32_t>(buf_, n_rows);
    append<uint16_t>(buf_, uint16_t(distinct.size()));
    append<uint16_t>(buf_, uint16_t(hints.size()));
    for (int32_t e : choices) append<uint16_t>(buf_, uint16_t(e));
    for (const auto& [e, f] : distinct) {
        append<uint16_t>(buf_, e);
        append<uint8_t>(buf_, f);
    }
    for (const auto& [e, f] : hints) {
        append<uint16_t>(buf_, e);
        append<uint8_t>(buf_, f);
    }
    put(buf_.data(), buf_.size());
    ++n_records_;
}

void ExpertTraceWriter::close() {
    if (!f_) return;
    std::vector<uint8_t> b;
    append<uint8_t>(b, k_end_tag);
    append<uint64_t>(b, n_records_);
    b.insert(b.end(), k_end_magic, k_end_magic + 8);
    put(b.data(), b.size());
    const bool flush_failed = std::fflush(f_) != 0;
    const bool close_failed = std::fclose(f_) != 0;
    f_ = nullptr;
    SLUICE_CHECK(!failed_ && !flush_failed && !close_failed, "expert trace ", path_, ": write failed (disk full?)");
}

ExpertTrace read_expert_trace(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    SLUICE_CHECK(in, "expert trace ", path, ": cannot open");
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Cursor c{path, bytes};
    c.what = "the header";
    c.need(8);
    SLUICE_CHECK(std::memcmp(bytes.data(), k_magic, 8) == 0, "expert trace ", path,
                 ": not an expert trace (no SLTRACE1 magic)");
    c.at = 8;
    ExpertTrace t;
    TraceHeader& h = t.header;
    h.version = c.get<uint32_t>();
    SLUICE_CHECK(h.version == k_trace_version, "expert trace ", path, ": version ", h.version, ", this build reads ",
                 k_trace_version);
    h.n_layers = c.get<uint32_t>();
    h.n_experts = c.get<uint32_t>();
    h.cache_slots = c.get<uint32_t>();
    h.config_xxh3 = c.get<uint64_t>();
    h.weights_xxh3 = c.get<uint64_t>();
    h.prefetch = c.get<uint8_t>() != 0;
    h.architecture = c.get_string();
    h.policy = c.get_string();
    SLUICE_CHECK(h.n_layers > 0 && h.n_layers <= 65536 && h.n_experts > 0 && h.n_experts <= 65536, "expert trace ",
                 path, ": header says ", h.n_layers, " layers of ", h.n_experts, " experts");
    std::vector<uint8_t> seen(h.n_experts);
    while (true) {
        c.what = cat("record ", t.records.size());
        const uint8_t tag = c.get<uint8_t>();
        if (tag == k_end_tag) {
            c.what = "the end marker";
            const uint64_t n = c.get<uint64_t>();
            c.need(8);
            SLUICE_CHECK(std::memcmp(bytes.data() + c.at, k_end_magic, 8) == 0, "expert trace ", path,
                         ": damaged end marker at byte ", c.at);
            c.at += 8;
            SLUICE_CHECK(n == t.records.size(), "expert trace ", path, ": end marker counts ", n, " records, the file has ",
                         t.records.size());
            SLUICE_CHECK(c.at == bytes.size(), "expert trace ", path, ": ", bytes.size() - c.at,
                         " bytes after the end marker");
            return t;
        }
        SLUICE_CHECK(tag == k_record_tag, "expert trace ", path, ": byte ", c.at - 1, " (", c.what,
                     ") is neither a record nor the end marker");
        TraceRecord r;
        r.top_k = c.get<uint8_t>();
        r.layer = c.get<uint16_t>();
        r.pass = c.get<uint32_t>();
        r.n_rows = c.get<uint32_t>();
        const uint16_t n_distinct = c.get<uint16_t>(), n_hints = c.get<uint16_t>();
        SLUICE_CHECK(r.layer < h.n_layers && r.top_k > 0 && r.top_k <= h.n_experts, "expert trace ", path, ": ",
                     c.what, ": layer ", r.layer, ", top_k ", int(r.top_k), " out of range");
        c.need(size_t(r.n_rows) * r.top_k * 2);
        r.choices.resize(size_t(r.n_rows) * r.top_k);
        std::fill(seen.begin(), seen.end(), 0);
        size_t n_union = 0;
        for (auto& e : r.choices) {
            e = c.get<uint16_t>();
            SLUICE_CHECK(e < h.n_experts, "expert trace ", path, ": ", c.what, ": expert ", e, " of ", h.n_experts);
            n_union += seen[e] ? 0 : 1;
            seen[e] = 1;
        }
        for (int pass = 0; pass < 2; ++pass) {
            auto& list = pass == 0 ? r.distinct : r.hints;
            const size_t n = pass == 0 ? n_distinct : n_hints;
            c.need(n * 3);
            for (size_t i = 0; i < n; ++i) {
                const uint16_t e = c.get<uint16_t>();
                const uint8_t f = c.get<uint8_t>();
                SLUICE_CHECK(e < h.n_experts, "expert trace ", path, ": ", c.what, ": expert ", e, " of ",
                             h.n_experts);
                SLUICE_CHECK(pass == 1 || seen[e], "expert trace ", path, ": ", c.what, ": expert ", e,
                             " fetched but no row chose it");
                list.emplace_back(e, f);
            }
        }
        SLUICE_CHECK(r.distinct.size() == n_union, "expert trace ", path, ": ", c.what, ": ", r.distinct.size(),
                     " experts fetched, the rows chose ", n_union);
        t.records.push_back(std::move(r));
    }
}

void check_trace_model(const ExpertTrace& t, const std::string& path, uint64_t config_xxh3, uint64_t weights_xxh3,
                       int64_t n_experts) {
    const TraceHeader& h = t.header;
    SLUICE_CHECK(h.config_xxh3 == config_xxh3, "expert trace ", path, " is for another model: config.json hash ",
                 hex64(h.config_xxh3), " vs ", hex64(config_xxh3));
    SLUICE_CHECK(h.weights_xxh3 == weights_xxh3, "expert trace ", path, " is for another model: weights hash ",
                 hex64(h.weights_xxh3), " vs ", hex64(weights_xxh3));
    SLUICE_CHECK(int64_t(h.n_experts) == n_experts, "expert trace ", path, " is for another model: ", h.n_experts,
                 " experts per layer vs ", n_experts);
}

}  // namespace sluice
