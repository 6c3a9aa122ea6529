#include "common.h"

#include <cstdio>

#include "core/error.h"

namespace sluice::cli {

std::vector<int32_t> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    size_t i = 0;
    int item = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string tok = text.substr(i, j - i);
        while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
        while (!tok.empty() && tok.back() == ' ') tok.pop_back();
        SLUICE_CHECK(!tok.empty(), "--ids: item ", item, " is empty (expected comma-separated integers like 5,17,3)");
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(tok, &used);
        } catch (...) {
            used = 0;
        }
        SLUICE_CHECK(used == tok.size(), "--ids: item ", item, " ('", tok, "') is not an integer");
        SLUICE_CHECK(v >= 0 && v <= INT32_MAX, "--ids: item ", item, " (", v, ") is out of range");
        ids.push_back(int32_t(v));
        ++item;
        i = j + 1;
    }
    return ids;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\r': o += "\\r"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    o += buf;
                } else {
                    o += char(c);
                }
        }
    }
    return o;
}

}  // namespace sluice::cli
