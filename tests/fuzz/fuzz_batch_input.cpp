// libFuzzer target: OpenAI Batch input files (api/batch_job parse_batch_input), line splitting, the envelope
// (custom_id, method, url, body) and each body through parse_request, against the qwen3_small tokenizer and Qwen3's
// chat template. Invariants: only ApiError comes out per line, every non-blank line is either valid or one error
// with its line number, custom_ids of valid lines are unique, and the shares of 3 shards add up to the valid lines.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "api/batch_job.h"
#include "api/openai_protocol.h"
#include "fuzz_api_util.h"

namespace {

using namespace sluice;
using namespace sluice::api;

using fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const fuzz::ApiFixture fx;
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::istringstream in(text);
    const BatchInput b = parse_batch_input(in, fx.ctx);
    int64_t non_blank = 0, n = 0;
    std::istringstream again(text);
    for (std::string line; std::getline(again, line);) {
        ++n;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // as the parser: a byte order mark
        if (line.find_first_not_of(" \t") != std::string::npos) ++non_blank;
    }
    check(int64_t(b.lines.size() + b.errors.size()) == non_blank);
    std::set<std::string> ids;
    for (const auto& l : b.lines) {
        check(l.line_no >= 1 && l.line_no <= n && !l.custom_id.empty() && ids.insert(l.custom_id).second);
        check(!l.request.params.prompt.empty() && !l.request.stream);
    }
    // the shards' shares of the valid lines add up to all of them
    int64_t in_shards = 0;
    for (int64_t i = 0; i < 3; ++i) {
        std::istringstream part(text);
        const BatchValidation v = validate_batch_input(part, fx.ctx, ShardSpec{i, 3});
        check(v.valid == int64_t(b.lines.size()) && v.errors.size() == b.errors.size());
        in_shards += v.valid_in_shard;
    }
    check(in_shards == int64_t(b.lines.size()));
    for (const auto& e : b.errors) {
        check(e.line_no >= 1 && e.line_no <= n && e.error.status == 400);
        (void)error_json(e.error).dump();
    }
    return 0;
}
