// Small helpers several test files share: a file's bytes in and out, a shell command's output, the message of the
// error a call throws, and the relative error the project quotes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "core/error.h"
#include "models/synth.h"

namespace sluice::test {

inline std::string read_bytes(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
}

// Runs `cmd` through the shell; its stdout (and whatever the command line redirects into it), and its exit status
// in *status when given.
inline std::string run_command(const std::string& cmd, int* status = nullptr) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    while (p && fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    const int s = p ? pclose(p) : -1;
    if (status) *status = WEXITSTATUS(s);
    return out;
}

// What `sluice synth --like kimi-k2` takes for a small test checkpoint in out_dir: `layers` layers of `experts`
// experts, dimensions divided by scale_down, a 512-id vocabulary, written without fsync.
inline SynthOptions small_k2_options(const std::string& out_dir, int64_t layers, int64_t experts, int64_t scale_down) {
    SynthOptions o;
    o.like = "kimi-k2";
    o.layers = layers;
    o.experts = experts;
    o.scale_down = scale_down;
    o.vocab_size = 512;
    o.out_dir = out_dir;
    o.sync = false;
    return o;
}

// The message of the sluice::Error that fn() throws, or "" when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// max |a - ref| / max |ref|
template <typename Ref>
double rel_error(const std::vector<float>& a, const std::vector<Ref>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num = std::max(num, std::fabs(double(a[i]) - double(ref[i])));
        den = std::max(den, std::fabs(double(ref[i])));
    }
    return num / den;
}

}  // namespace sluice::test
