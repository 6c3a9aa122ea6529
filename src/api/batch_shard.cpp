#include "api/batch_shard.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>

#include "api/batch_files.h"
#include "core/error.h"

namespace sluice::api {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool all_digits(const std::string& s) {
    return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t get_count(const json& obj, const char* key, const std::string& where) {
    const auto it = obj.find(key);
    SLUICE_CHECK(it != obj.end() && it->is_number_integer() && it->get<int64_t>() >= 0, where, key,
                 ": must be an integer >= 0");
    return it->get<int64_t>();
}

const json& get_object(const json& obj, const char* key, const std::string& where) {
    const auto it = obj.find(key);
    SLUICE_CHECK(it != obj.end() && it->is_object(), where, key, ": must be an object");
    return *it;
}

std::string get_string(const json& obj, const char* key, const std::string& where) {
    const auto it = obj.find(key);
    SLUICE_CHECK(it != obj.end() && it->is_string(), where, key, ": must be a string");
    return it->get<std::string>();
}

std::string spec_str(const ShardSpec& s) { return std::to_string(s.index) + "/" + std::to_string(s.count); }

// One line of a shard's output or error file, found while indexing them.
struct Entry {
    IdKey key;
    uint64_t offset = 0;
    int64_t line_no = 0;
    uint32_t length = 0;
    uint32_t file = 0;  // 2 * shard + (0: output, 1: errors)
    bool used = false;
};

// Copies byte ranges out of the shards' files; keeps a few of them open.
class RangeCopier {
public:
    explicit RangeCopier(const std::vector<std::string>& paths) : paths_(paths) {}
    ~RangeCopier() { close_all(); }
    std::string read(uint32_t file, uint64_t offset, uint32_t length) {
        auto it = fds_.find(file);
        if (it == fds_.end()) {
            if (fds_.size() >= 64) close_all();
            const int fd = ::open(paths_[file].c_str(), O_RDONLY | O_CLOEXEC);
            SLUICE_CHECK(fd >= 0, paths_[file], ": cannot read");
            it = fds_.emplace(file, fd).first;
        }
        std::string s(length, '\0');
        SLUICE_CHECK(::pread(it->second, s.data(), length, off_t(offset)) == ssize_t(length), paths_[file],
                     ": changed while merging");
        return s;
    }

private:
    void close_all() {
        for (auto& [f, fd] : fds_) ::close(fd);
        fds_.clear();
    }
    const std::vector<std::string>& paths_;
    std::map<uint32_t, int> fds_;
};

}  // namespace

ShardSpec parse_shard_spec(const std::string& t) {
    const std::string what = "--shard '" + t + "': ";
    const size_t slash = t.find('/');
    SLUICE_CHECK(!t.empty() && t[0] != '-', what, "the shard index must be 0 or more");
    SLUICE_CHECK(slash != std::string::npos && all_digits(t.substr(0, slash)) && all_digits(t.substr(slash + 1)),
                 what, "not I/N (this shard's index from 0, a slash, the number of shards: e.g. 0/4)");
    const ShardSpec s{std::stoll(t.substr(0, slash)), std::stoll(t.substr(slash + 1))};
    SLUICE_CHECK(s.count >= 1, what, "the number of shards must be at least 1");
    SLUICE_CHECK(s.count <= kMaxShards, what, "at most ", kMaxShards, " shards");
    SLUICE_CHECK(s.index < s.count, what, "shard index ", s.index, " is out of range for ", s.count,
                 " shards (0 to ", s.count - 1, ")");
    return s;
}

int64_t shard_of(const std::string& custom_id, int64_t count) {
    return int64_t(XXH3_64bits(custom_id.data(), custom_id.size()) % uint64_t(count));
}

ShardStatus parse_shard_status(const std::string& text, const std::string& path) {
    const json j = json::parse(text, nullptr, false);
    SLUICE_CHECK(!j.is_discarded() && j.is_object(), path, ": not a batch status file (not a JSON object)");
    const std::string where = path + ": ";
    ShardStatus s;
    SLUICE_CHECK(j.contains("shard"), where, "no shard field: not the status of a `sluice batch --shard I/N` run");
    const json& sh = get_object(j, "shard", where);
    s.shard.index = get_count(sh, "index", where + "shard.");
    s.shard.count = get_count(sh, "count", where + "shard.");
    SLUICE_CHECK(s.shard.count >= 1 && s.shard.count <= kMaxShards, where, "shard.count: must be 1 to ", kMaxShards,
                 ", got ", s.shard.count);
    SLUICE_CHECK(s.shard.index < s.shard.count, where, "shard.index: ", s.shard.index, " is out of range for ",
                 s.shard.count, " shards");
    s.status = get_string(j, "status", where);
    s.input_xxh3 = get_string(j, "input_xxh3", where);
    s.endpoint = get_string(j, "endpoint", where);
    s.created_at = get_count(j, "created_at", where);
    const json& rc = get_object(j, "request_counts", where);
    s.total = get_count(rc, "total", where + "request_counts.");
    s.completed = get_count(rc, "completed", where + "request_counts.");
    s.failed = get_count(rc, "failed", where + "request_counts.");
    const json& u = get_object(j, "usage", where);
    s.input_tokens = get_count(u, "input_tokens", where + "usage.");
    s.output_tokens = get_count(u, "output_tokens", where + "usage.");
    if (const auto e = j.find("errors"); e != j.end() && !e->is_null()) {
        SLUICE_CHECK(e->is_object() && e->contains("data") && (*e)["data"].is_array(), where,
                     "errors: must be null or {\"data\": [...]}");
        for (const json& d : (*e)["data"]) {
            SLUICE_CHECK(d.is_object(), where, "errors.data: each entry must be an object");
            get_count(d, "line", where + "errors.data[].");
        }
        s.errors_data = (*e)["data"];
    }
    return s;
}

MergeSummary merge_batch_shards(const MergeOptions& o) {
    SLUICE_CHECK(!o.shard_outputs.empty(), "batch --merge: no shard outputs given");
    SLUICE_CHECK(fs::exists(o.input_path), o.input_path, ": no such file");
    const std::string error_path = o.error_path.empty() ? with_suffix(o.output_path, ".errors.jsonl") : o.error_path;
    const std::string status_path = o.status_path.empty() ? with_suffix(o.output_path, ".status.json") : o.status_path;
    const std::string input_xxh3 = file_xxh3(o.input_path);

    // the statuses: one input, one split, every shard once, each completed
    std::vector<ShardStatus> st;
    std::vector<std::string> files;  // 2 * shard index + 0/1: the output and error file
    std::vector<std::string> given_as;
    for (const std::string& out : o.shard_outputs) {
        const std::string sp = with_suffix(out, ".status.json");
        SLUICE_CHECK(fs::exists(sp), sp, ": no such file (each shard's status file sits beside its output)");
        std::ifstream f(sp, std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        ShardStatus s = parse_shard_status(ss.str(), sp);
        if (!st.empty())
            SLUICE_CHECK(s.shard.count == st[0].shard.count, sp, ": shard ", spec_str(s.shard), ", but ",
                         given_as[0], " is shard ", spec_str(st[0].shard), ": shards of different splits");
        SLUICE_CHECK(s.input_xxh3 == input_xxh3, sp, ": shard ", spec_str(s.shard), " ran on another input (input_xxh3 ",
                     s.input_xxh3, ", ", o.input_path, " has ", input_xxh3, ")");
        SLUICE_CHECK(s.status == "completed", sp, ": shard ", spec_str(s.shard), " is ", s.status,
                     ", not completed (run it again with the same command to finish it)");
        for (size_t i = 0; i < st.size(); ++i)
            SLUICE_CHECK(st[i].shard.index != s.shard.index, "shard ", spec_str(s.shard), " is given twice: ",
                         given_as[i], " and ", sp);
        st.push_back(std::move(s));
        given_as.push_back(sp);
    }
    const int64_t n = st[0].shard.count;
    std::vector<int> slot(size_t(n), -1);
    for (size_t i = 0; i < st.size(); ++i) slot[size_t(st[i].shard.index)] = int(i);
    std::string missing;
    for (int64_t i = 0; i < n; ++i)
        if (slot[size_t(i)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    SLUICE_CHECK(missing.empty(), "batch --merge: shard(s) ", missing, " of ", n, " missing (", st.size(),
                 " given)");
    for (int64_t i = 0; i < n; ++i) {
        const std::string& out = o.shard_outputs[size_t(slot[size_t(i)])];
        files.push_back(out);
        files.push_back(with_suffix(out, ".errors.jsonl"));
    }
    std::error_code ec;
    for (const auto& p : {o.output_path, error_path, status_path}) {
        SLUICE_CHECK(!fs::equivalent(o.input_path, p, ec), p, ": is the input file; choose another output path");
        for (const auto& f : files) SLUICE_CHECK(!fs::equivalent(f, p, ec), p, ": is a shard's file; choose another");
        create_parent_dirs(p);
    }

    // every line of the shards' files, by custom_id (16 bytes each, not the lines)
    std::vector<Entry> entries;
    std::vector<Entry> loose;  // error lines without a custom_id (invalid input lines that are not JSON objects)
    for (uint32_t f = 0; f < files.size(); ++f) {
        const ShardSpec spec{int64_t(f / 2), n};
        SLUICE_CHECK(fs::exists(files[f]), files[f], ": no such file");
        LineReader r(files[f]);
        while (r.next()) {
            if (r.blank()) continue;
            const std::string where = files[f] + ":" + std::to_string(r.line_no()) + ": ";
            SLUICE_CHECK(r.terminated(), where, "cut off (no newline): the shard did not finish writing it");
            SLUICE_CHECK(r.end() - r.offset() < (uint64_t(1) << 32), where, "longer than 4 GiB");
            const json j = json::parse(r.text(), nullptr, false);
            SLUICE_CHECK(!j.is_discarded() && j.is_object() && j.contains("custom_id"), where,
                         "not a batch result line (custom_id)");
            Entry e{{}, r.offset(), r.line_no(), uint32_t(r.end() - r.offset()), f};
            if (j["custom_id"].is_null() && f % 2 == 1) {
                loose.push_back(e);
                continue;
            }
            SLUICE_CHECK(j["custom_id"].is_string(), where, "custom_id: must be a string");
            const std::string id = j["custom_id"].get<std::string>();
            SLUICE_CHECK(shard_of(id, n) == spec.index, where, "custom_id '", id, "' belongs to shard ",
                         shard_of(id, n), "/", n, ", not ", spec_str(spec));
            e.key = id_key(id);
            entries.push_back(e);
        }
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return std::tie(a.key, a.file, a.offset) < std::tie(b.key, b.file, b.offset);
    });

    // the input in order: each custom_id's line(s) copied from the shard that answered it
    MergeSummary sum;
    sum.shards = n;
    const std::string out_tmp = o.output_path + ".tmp", err_tmp = error_path + ".tmp";
    RangeCopier copier(files);
    fs::remove(out_tmp, ec);
    fs::remove(err_tmp, ec);
    try {
        JsonlAppender out(out_tmp), err(err_tmp);
        for (const Entry& e : loose) {
            err.write_raw(copier.read(e.file, e.offset, e.length));
            ++sum.failed;
        }
        LineReader in(o.input_path);
        while (in.next()) {
            if (in.blank()) continue;
            const json j = json::parse(in.text(), nullptr, false);
            if (j.is_discarded() || !j.is_object() || !j.contains("custom_id") || !j["custom_id"].is_string() ||
                j["custom_id"].get<std::string>().empty())
                continue;  // an invalid line without a custom_id: among the loose error lines
            const std::string id = j["custom_id"].get<std::string>();
            const IdKey key = id_key(id);
            auto it = std::lower_bound(entries.begin(), entries.end(), key,
                                       [](const Entry& a, const IdKey& k) { return a.key < k; });
            while (it != entries.end() && it->key == key && it->used) ++it;
            const int64_t shard = shard_of(id, n);
            SLUICE_CHECK(it != entries.end() && it->key == key, o.input_path, ":", in.line_no(), ": custom_id '", id,
                         "' has no result in shard ", shard, "/", n, " (", files[size_t(2 * shard)], ")");
            it->used = true;
            std::string line = copier.read(it->file, it->offset, it->length);
            if (it->file % 2 == 0) {
                out.write_raw(line);
                ++sum.completed;
            } else {
                err.write_raw(line);
                ++sum.failed;
            }
        }
        for (const Entry& e : entries)
            SLUICE_CHECK(e.used, files[e.file], ":", e.line_no, ": a result for a custom_id that ", o.input_path,
                         " does not have (or has fewer times)");
        out.sync();
        err.sync();
    } catch (...) {
        fs::remove(out_tmp, ec);  // a refused merge leaves no partial output
        fs::remove(err_tmp, ec);
        throw;
    }

    json errors = json::array();
    int64_t total = 0, in_tok = 0, out_tok = 0, created = st[0].created_at;
    for (const ShardStatus& s : st) {
        total += s.total;
        in_tok += s.input_tokens;
        out_tok += s.output_tokens;
        created = std::min(created, s.created_at);
        for (const json& d : s.errors_data) errors.push_back(d);
    }
    std::stable_sort(errors.begin(), errors.end(),
                     [](const json& a, const json& b) { return a["line"].get<int64_t>() < b["line"].get<int64_t>(); });
    const int64_t now = int64_t(std::time(nullptr));
    const json status = {{"id", "batch_" + random_hex(24)},
                         {"object", "batch"},
                         {"endpoint", st[0].endpoint},
                         {"input_file", o.input_path},
                         {"output_file", o.output_path},
                         {"error_file", error_path},
                         {"input_xxh3", input_xxh3},
                         {"merged_shards", n},
                         {"completion_window", "24h"},
                         {"created_at", created},
                         {"status", "completed"},
                         {"completed_at", now},
                         {"request_counts", {{"total", total}, {"completed", sum.completed}, {"failed", sum.failed}}},
                         {"usage", {{"input_tokens", in_tok}, {"output_tokens", out_tok}, {"total_tokens", in_tok + out_tok}}},
                         {"errors", errors.empty() ? json(nullptr) : json{{"object", "list"}, {"data", errors}}}};
    fs::rename(out_tmp, o.output_path);
    fs::rename(err_tmp, error_path);
    write_file_atomically(status_path, status.dump(2) + "\n");
    return sum;
}

}  // namespace sluice::api
