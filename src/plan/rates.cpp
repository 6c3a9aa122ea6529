#include "plan/rates.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace sluice {

double KernelRate::at(double r) const {
    SLUICE_ASSERT(!rows.empty() && rows.size() == gbps.size(), "KernelRate without points");
    if (r <= double(rows.front())) return gbps.front();
    if (r >= double(rows.back())) return gbps.back();
    size_t i = 1;
    while (double(rows[i]) < r) ++i;
    const double x0 = std::log(double(rows[i - 1])), x1 = std::log(double(rows[i]));
    const double f = (std::log(r) - x0) / (x1 - x0);
    // interpolate time per byte (1/rate), which is what adds up
    return 1.0 / ((1 - f) / gbps[i - 1] + f / gbps[i]);
}

namespace {
double positive_number(const nlohmann::json& j, const std::string& what, const std::string& field) {
    SLUICE_CHECK(j.is_number(), what, ": ", field, " must be a number");
    const double v = j.get<double>();
    SLUICE_CHECK(std::isfinite(v) && v > 0 && v < 1e9, what, ": ", field, " must be a positive rate, got ", v);
    return v;
}
}  // namespace

MachineRates parse_rates(const std::string& text, const std::string& what) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception&) {
        fail(what, ": not valid JSON (a rates file is written by sluice bench --save-rates)");
    }
    SLUICE_CHECK(j.is_object(), what, ": not a JSON object");
    SLUICE_CHECK(j.contains("sluice_rates") && j["sluice_rates"] == 1, what,
                 ": sluice_rates must be 1 (a rates file is written by sluice bench --save-rates)");
    MachineRates r;
    if (j.contains("device")) {
        SLUICE_CHECK(j["device"].is_string(), what, ": device must be a string");
        r.device = j["device"].get<std::string>();
        SLUICE_CHECK(r.device == "cpu" || r.device == "cuda", what, ": device must be cpu or cuda, got '", r.device, "'");
    }
    if (j.contains("threads")) {
        SLUICE_CHECK(j["threads"].is_number_integer() && j["threads"].get<int64_t>() > 0 &&
                         j["threads"].get<int64_t>() < 1000000,
                     what, ": threads must be a positive integer");
        r.threads = j["threads"].get<int64_t>();
    }
    SLUICE_CHECK(j.contains("drive_gbps"), what, ": drive_gbps is missing");
    r.drive_gbps = positive_number(j["drive_gbps"], what, "drive_gbps");
    if (j.contains("drive") && j["drive"].is_object() && j["drive"].contains("method") && j["drive"]["method"].is_string())
        r.drive_method = j["drive"]["method"].get<std::string>();
    if (j.contains("drive_latency_ms")) {
        SLUICE_CHECK(j["drive_latency_ms"].is_number(), what, ": drive_latency_ms must be a number");
        const double v = j["drive_latency_ms"].get<double>();
        SLUICE_CHECK(std::isfinite(v) && v >= 0 && v < 1e6, what, ": drive_latency_ms must be >= 0, got ", v);
        r.drive_latency_ms = v;
    }
    if (j.contains("matmul_overhead_us")) {
        SLUICE_CHECK(j["matmul_overhead_us"].is_number(), what, ": matmul_overhead_us must be a number");
        const double v = j["matmul_overhead_us"].get<double>();
        SLUICE_CHECK(std::isfinite(v) && v >= 0 && v < 1e6, what, ": matmul_overhead_us must be >= 0, got ", v);
        r.matmul_overhead_us = v;
    }
    SLUICE_CHECK(j.contains("kernels") && j["kernels"].is_object(), what, ": kernels must be an object");
    for (const auto& [fmt, k] : j["kernels"].items()) {
        const std::string f = "kernels." + fmt;
        SLUICE_CHECK(k.is_object() && k.contains("rows") && k.contains("gbps") && k["rows"].is_array() &&
                         k["gbps"].is_array(),
                     what, ": ", f, " must be {\"rows\": [...], \"gbps\": [...]}");
        SLUICE_CHECK(!k["rows"].empty() && k["rows"].size() == k["gbps"].size() && k["rows"].size() <= 64, what, ": ",
                     f, ": rows and gbps must be non-empty lists of the same length (at most 64)");
        KernelRate kr;
        for (size_t i = 0; i < k["rows"].size(); ++i) {
            const auto& n = k["rows"][i];
            SLUICE_CHECK(n.is_number_integer() && n.get<int64_t>() > 0 && n.get<int64_t>() <= (int64_t(1) << 30), what,
                         ": ", f, ".rows[", i, "] must be a positive integer");
            SLUICE_CHECK(kr.rows.empty() || n.get<int64_t>() > kr.rows.back(), what, ": ", f,
                         ".rows must be increasing");
            kr.rows.push_back(n.get<int64_t>());
            kr.gbps.push_back(positive_number(k["gbps"][i], what, f + ".gbps[" + std::to_string(i) + "]"));
        }
        r.kernels[fmt] = std::move(kr);
    }
    SLUICE_CHECK(!r.kernels.empty() || r.device == "cuda", what, ": kernels is empty");
    return r;
}

MachineRates load_rates(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SLUICE_CHECK(f.good(), path, ": cannot open the rates file (sluice bench --save-rates writes one)");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_rates(ss.str(), path);
}

std::string rates_to_json(const MachineRates& r) {
    nlohmann::json j;
    j["sluice_rates"] = 1;
    j["device"] = r.device;
    if (r.threads > 0) j["threads"] = r.threads;
    j["drive_gbps"] = r.drive_gbps;
    j["drive_latency_ms"] = r.drive_latency_ms;
    if (!r.drive_method.empty()) j["drive"] = {{"method", r.drive_method}};
    j["matmul_overhead_us"] = r.matmul_overhead_us;
    j["kernels"] = nlohmann::json::object();
    for (const auto& [fmt, k] : r.kernels) j["kernels"][fmt] = {{"rows", k.rows}, {"gbps", k.gbps}};
    return j.dump(1) + "\n";
}

}  // namespace sluice
