#include "runtime/draft_model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace sluice {

namespace {

std::string ids_text(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + "]";
}

// The file's bytes; nullopt-like: `present` false when it does not exist.
struct FileBytes {
    bool present = false;
    std::string bytes;
};
FileBytes read_if_present(const std::filesystem::path& p) {
    FileBytes f;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) return f;
    std::ifstream in(p, std::ios::binary);
    SLUICE_CHECK(in, p.string(), ": cannot open");
    f.present = true;
    f.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return f;
}

}  // namespace

void check_draft_compatible(const ModelInfo& target, const std::string& target_dir, const ModelInfo& draft,
                            const std::string& draft_dir) {
    const std::string who = cat("draft model ", draft_dir, ": ");
    SLUICE_CHECK(draft.vocab_size == target.vocab_size, who, "vocab_size ", draft.vocab_size,
                 " differs from the target's ", target.vocab_size, " (a draft must share the target's tokenizer)");
    SLUICE_CHECK(draft.bos_token_id == target.bos_token_id, who, "bos_token_id ", draft.bos_token_id,
                 " differs from the target's ", target.bos_token_id);
    auto de = draft.eos_token_ids, te = target.eos_token_ids;
    std::sort(de.begin(), de.end());
    std::sort(te.begin(), te.end());
    SLUICE_CHECK(de == te, who, "eos_token_id ", ids_text(de), " differs from the target's ", ids_text(te));
    namespace fs = std::filesystem;
    for (const char* name : {"tokenizer.json", "tiktoken.model"}) {
        const FileBytes d = read_if_present(fs::path(draft_dir) / name);
        const FileBytes t = read_if_present(fs::path(target_dir) / name);
        SLUICE_CHECK(d.present == t.present, who, name, d.present ? " is present but the target has none"
                                                                 : " is missing but the target has one");
        SLUICE_CHECK(d.bytes == t.bytes, who, name, " differs from the target's (", d.bytes.size(), " vs ",
                     t.bytes.size(), " bytes): a draft must share the target's tokenizer");
    }
}

MemorySplit split_memory_budget(uint64_t total_bytes, uint64_t draft_bytes) {
    if (total_bytes == 0) return {0, draft_bytes};
    const uint64_t d = draft_bytes > 0 ? draft_bytes : total_bytes / 4;
    SLUICE_CHECK(d < total_bytes, "--draft-memory (", format_bytes(d), ") must be less than --memory (",
                 format_bytes(total_bytes), "): the target needs the rest");
    return {total_bytes - d, d};
}

struct DraftModel::Seq {
    std::unique_ptr<SequenceState> state;
    std::vector<float> logits;  // next-token logits after the state's last token
};

DraftModel::DraftModel(std::unique_ptr<Model> model, int64_t prefill_chunk)
    : model_(std::move(model)), ctx_(make_exec_context(*model_)), chunk_(prefill_chunk) {
    SLUICE_CHECK(model_, "draft model: none given");
    SLUICE_CHECK(chunk_ > 0, "draft model: prefill chunk must be > 0, got ", chunk_);
}

std::unique_ptr<DraftModel> DraftModel::load(const std::string& draft_dir, const LoadOptions& options,
                                             const Model& target, const std::string& target_dir,
                                             int64_t prefill_chunk) {
    auto m = load_model(draft_dir, options);
    check_draft_compatible(target.info(), target_dir, m->info(), draft_dir);
    return std::make_unique<DraftModel>(std::move(m), prefill_chunk);
}

Drafter DraftModel::drafter() {
    auto s = std::make_shared<Seq>();
    s->state = model_->new_sequence();
    return [this, s](std::span<const int32_t> context, int64_t max_tokens, const SequenceState*,
                     const DraftPick* pick) { return draft(*s, context, max_tokens, pick); };
}

void DraftModel::feed(Seq& s, std::span<const int32_t> tokens) {
    SequenceState* seqs[] = {s.state.get()};
    Batch b;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i0 = 0; i0 < tokens.size(); i0 += size_t(chunk_)) {
        const size_t i1 = std::min(tokens.size(), i0 + size_t(chunk_));
        b.clear();
        const int64_t pos0 = s.state->n_past();
        for (size_t i = i0; i < i1; ++i) b.add(tokens[i], pos0 + int64_t(i - i0), 0, i + 1 == tokens.size());
        model_->forward(*ctx_, b, seqs, s.logits);
        ++stats_.forward_passes;
    }
    stats_.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int32_t> DraftModel::draft(Seq& s, std::span<const int32_t> context, int64_t max_tokens,
                                       const DraftPick* pick) {
    if (max_tokens <= 0 || context.empty()) return {};
    // the draft's positions end at its max_position_embeddings: draft only as far as they go
    const int64_t n = int64_t(context.size());
    if (const int64_t max_pos = model_->info().max_position_embeddings; max_pos > 0) {
        if (n >= max_pos) return {};
        max_tokens = std::min(max_tokens, max_pos - n);
    }
    ++stats_.calls;
    SequenceState& st = *s.state;
    // Bring the state to context[0..n-1) at most, so feeding the rest gives the logits after the whole context.
    const auto have = st.tokens();
    const int64_t common =
        int64_t(std::mismatch(have.begin(), have.end(), context.begin(), context.end()).first - have.begin());
    int64_t keep = std::min(common, n - 1);
    if (keep < st.n_past() && keep > 0 && keep < st.rollback_floor()) {
        keep = 0;  // recurrent state cannot go back that far: start again
        ++stats_.resets;
    }
    st.truncate(keep);
    const auto missing = context.subspan(size_t(keep));
    stats_.fed_tokens += int64_t(missing.size());
    feed(s, missing);
    // Draft from here, then come back to exactly the context.
    st.snapshot();
    std::vector<int32_t> out;
    const size_t V = size_t(model_->info().vocab_size);
    for (int64_t j = 0; j < max_tokens; ++j) {
        out.push_back(pick_draft(pick, std::span<const float>(s.logits.data(), V)));
        if (j + 1 < max_tokens) feed(s, std::span<const int32_t>(&out.back(), 1));
    }
    st.truncate(n);
    stats_.drafted += int64_t(out.size());
    return out;
}

}  // namespace sluice
