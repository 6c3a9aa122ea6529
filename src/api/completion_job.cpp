#include "api/completion_job.h"

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

struct CompletionJob::Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<ChoiceDelta> queue;
    std::vector<ChoiceText> texts;       // one per choice; touched only by the engine thread's callbacks
    std::vector<int64_t> generated;      // tokens per choice
    std::vector<int64_t> cached;         // prompt tokens per choice taken from the prefix cache
    std::vector<uint8_t> ended;          // 1 once the choice's last delta is queued
    // echo (completions): the prompts (copied: callbacks may outlive the job), what each echoes, and per choice
    // the logprob entries of its prompt tokens so far, whether its echo went out, and its prompt tokens' bytes
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> echo_texts;
    std::vector<nlohmann::json> prompt_entries;
    std::vector<uint8_t> echoed;
    std::vector<size_t> prompt_bytes;
    int n = 1;             // choices per prompt
    bool parse_tools = false;        // ParsedRequest::parse_tools
    std::vector<ToolCallStream> tools;  // per choice under parse_tools: its output's calls parsed as they come
    int64_t n_prompt = 0;  // all prompts' tokens
    bool cancelled = false;

    void push(ChoiceDelta d) {
        std::lock_guard lk(mu);
        if (!d.finish_reason.empty() || !d.error.empty()) ended[size_t(d.index)] = 1;
        queue.push_back(std::move(d));
        cv.notify_all();
    }
};

namespace {

int64_t now_unix_s() { return int64_t(std::time(nullptr)); }

// Under echo the choice's first delta is its prompt: the echoed text and (with logprobs) the prompt tokens' entries.
void queue_echo(CompletionJob::Shared& sh, int index) {
    ChoiceDelta d;
    d.index = index;
    d.text = sh.echo_texts[size_t(index / sh.n)];
    d.logprobs = std::move(sh.prompt_entries[size_t(index)]);
    sh.echoed[size_t(index)] = 1;
    sh.push(std::move(d));
}

// The callback of one choice: decode on the engine thread, queue the delta, stop the engine at a stop sequence.
// Prompt-logit events (echo with logprobs) make the entries of the prompt's tokens: the logits after position i
// score prompt token i + 1.
TokenCallback choice_callback(std::shared_ptr<CompletionJob::Shared> sh, const tok::Tokenizer& tok, int index,
                              bool echo, bool logprobs, int top_n) {
    return [sh = std::move(sh), &tok, index, echo, logprobs, top_n](const TokenEvent& ev) {
        {
            std::lock_guard lk(sh->mu);
            if (sh->cancelled) return false;
        }
        const size_t ci = size_t(index);
        if (ev.prompt_position >= 0) {
            const std::vector<int32_t>& prompt = sh->prompts[ci / size_t(sh->n)];
            const size_t pos = size_t(ev.prompt_position);
            nlohmann::json& entries = sh->prompt_entries[ci];
            if (pos == 0) entries.push_back(first_prompt_entry(tok, prompt[0]));
            if (pos + 1 < prompt.size()) entries.push_back(chat_logprob_entry(tok, prompt[pos + 1], ev.logits, top_n));
            if (pos + 1 == prompt.size()) queue_echo(*sh, index);
            return true;
        }
        if (echo && !sh->echoed[ci]) queue_echo(*sh, index);
        ChoiceDelta d;
        d.index = index;
        ChoiceText& text = sh->texts[ci];
        d.text_offset = sh->prompt_bytes[ci] + text.offset();
        sh->cached[ci] = ev.n_cached;
        if (ev.id >= 0) {
            sh->generated[ci] = ev.n_generated;
            d.text = text.push(ev.id);  // under parse_tools with the syntax's markers
            if (logprobs) d.logprobs.push_back(chat_logprob_entry(tok, ev.id, ev.logits, top_n));
        }
        if (text.stopped()) {
            d.finish_reason = "stop";
        } else if (ev.finish == FinishReason::stop || ev.finish == FinishReason::length ||
                   ev.finish == FinishReason::unsatisfiable) {
            d.text += text.finish();
            d.finish_reason = to_string(ev.finish);
        } else if (ev.finish == FinishReason::error) {
            d.error = ev.error.empty() ? "the engine failed" : ev.error;
        } else if (ev.finish == FinishReason::cancelled) {
            d.error = "cancelled";
        }
        const bool end = !d.finish_reason.empty() || !d.error.empty();
        if (sh->parse_tools) {
            ToolCallStream& calls = sh->tools[ci];
            ToolDelta td = calls.push(d.text);
            if (end && d.error.empty()) {
                td.append(calls.finish());
                if (calls.calls() > 0 && !calls.call_open()) d.finish_reason = "tool_calls";
            }
            d.text = std::move(td.content);
            d.tool_calls = std::move(td.calls);
        }
        sh->push(std::move(d));
        return !end;
    };
}

// The special tokens that tool-call syntaxes are made of: kept in the text that is parsed for calls.
std::vector<int32_t> tool_marker_ids(const tok::Tokenizer& tok) {
    std::vector<int32_t> ids;
    for (const std::string& m : tool_call_markers())
        if (std::optional<int32_t> id = tok.token_to_id(m); id && tok.is_special(*id)) ids.push_back(*id);
    return ids;
}

// The bytes of the prompt's tokens, as ChoiceText::offset() counts a completion's.
size_t token_bytes(const tok::Tokenizer& tok, const std::vector<int32_t>& ids) {
    size_t n = 0;
    for (int32_t id : ids)
        if (id < tok.vocab_size()) n += tok.decode_bytes({id}, false).size();
    return n;
}

}  // namespace

CompletionJob::CompletionJob(Engine& engine, const tok::Tokenizer& tok, ParsedRequest req)
    : engine_(engine), req_(std::move(req)), id_(new_completion_id(req_.endpoint)), created_(now_unix_s()),
      shared_(std::make_shared<Shared>()) {
    SLUICE_CHECK(req_.n >= 1, "n must be >= 1");
    if (req_.prompts.empty()) req_.prompts = {req_.params.prompt};  // a request not made by parse_request
    SLUICE_CHECK(!req_.echo || req_.echo_texts.size() == req_.prompts.size(), "echo needs every prompt's text");
    const size_t n_choices = size_t(req_.choices());
    Shared& sh = *shared_;
    for (const auto& p : req_.prompts) sh.n_prompt += int64_t(p.size());
    sh.generated.assign(n_choices, 0);
    sh.cached.assign(n_choices, 0);
    sh.ended.assign(n_choices, 0);
    sh.prompts = req_.prompts;
    sh.echo_texts = req_.echo_texts;
    sh.prompt_entries.assign(n_choices, nlohmann::json::array());
    sh.echoed.assign(n_choices, 0);
    sh.prompt_bytes.assign(n_choices, 0);
    sh.n = req_.n;
    sh.parse_tools = req_.parse_tools;
    const std::vector<int32_t> markers = req_.parse_tools ? tool_marker_ids(tok) : std::vector<int32_t>();
    // Kimi K3's output starts inside the element its generation prompt opened
    const size_t keep = std::min<size_t>(req_.prompt_text.size(), 256);
    const std::string_view tail = std::string_view(req_.prompt_text).substr(req_.prompt_text.size() - keep);
    for (size_t i = 0; i < n_choices; ++i) {
        sh.texts.emplace_back(tok, req_.stop);
        if (req_.parse_tools) {
            sh.texts.back().keep_specials(markers);
            sh.tools.emplace_back(req_.tool_syntax, tail);
        }
        if (req_.echo) sh.prompt_bytes[i] = token_bytes(tok, req_.prompts[i / size_t(req_.n)]);
    }
    try {
        // every choice of every prompt queued at once: the engine admits them in one step and batches their
        // prefills (and scoring) into shared passes
        std::vector<Engine::Submission> all;
        for (size_t i = 0; i < n_choices; ++i) {
            RequestParams p = req_.params;
            p.prompt = req_.prompts[i / size_t(req_.n)];
            p.sampling.seed += uint64_t(i % size_t(req_.n));
            if (req_.make_drafter && p.draft_tokens > 0) p.drafter = req_.make_drafter();  // its own draft state
            all.push_back({std::move(p), choice_callback(shared_, tok, int(i), req_.echo, req_.logprobs,
                                                         req_.top_logprobs)});
        }
        engine_ids_ = engine_.submit_all(std::move(all));
    } catch (...) {
        cancel();
        throw;
    }
}

CompletionJob::~CompletionJob() { cancel(); }

void CompletionJob::cancel() {
    {
        std::lock_guard lk(shared_->mu);
        if (shared_->cancelled) return;
        bool all_ended = true;
        for (auto e : shared_->ended) all_ended = all_ended && e;
        if (all_ended) return;
        shared_->cancelled = true;
    }
    for (uint64_t id : engine_ids_) engine_.cancel(id);
}

bool CompletionJob::wait(std::vector<ChoiceDelta>& out, std::chrono::milliseconds timeout) {
    std::unique_lock lk(shared_->mu);
    if (!shared_->cv.wait_for(lk, timeout, [&] { return !shared_->queue.empty(); })) return false;
    while (!shared_->queue.empty()) {
        ChoiceDelta d = std::move(shared_->queue.front());
        shared_->queue.pop_front();
        // merge with this choice's pending delta (one delta per choice and call keeps chunks few)
        ChoiceDelta* same = nullptr;
        for (auto& o : out)
            if (o.index == d.index && o.finish_reason.empty() && o.error.empty()) same = &o;
        if (!same) {
            out.push_back(std::move(d));
            continue;
        }
        same->text += d.text;
        for (CallDelta& c : d.tool_calls) {  // fragments of the same call join
            if (!same->tool_calls.empty() && same->tool_calls.back().index == c.index && !c.first)
                same->tool_calls.back().arguments += c.arguments;
            else
                same->tool_calls.push_back(std::move(c));
        }
        for (auto& e : d.logprobs) same->logprobs.push_back(std::move(e));
        same->finish_reason = d.finish_reason;
        same->error = d.error;
    }
    return true;
}

bool CompletionJob::finished() const {
    std::lock_guard lk(shared_->mu);
    for (auto e : shared_->ended)
        if (!e) return false;
    return true;
}

ModelContext make_model_context(Engine& engine, const tok::Tokenizer& tok, const ChatTemplate* chat_template,
                                std::string model_id, int64_t default_max_tokens) {
    const ModelInfo& info = engine.model().info();
    ModelContext ctx;
    ctx.model_id = std::move(model_id);
    ctx.tokenizer = &tok;
    ctx.chat_template = chat_template;
    ctx.vocab_size = info.vocab_size;
    ctx.max_context_tokens = engine.options().max_context_tokens;
    if (info.max_position_embeddings > 0)
        ctx.max_context_tokens = std::min(ctx.max_context_tokens, info.max_position_embeddings);
    ctx.default_max_tokens = default_max_tokens;
    // only recurrent state needs them (per-token caches reuse any head); the engine is not stepping yet
    ctx.turn_cache_points = engine.prefix_cache() && engine.model().new_sequence()->layout().has_recurrent();
    return ctx;
}

bool CompletionJob::done() const {
    std::lock_guard lk(shared_->mu);
    if (!shared_->queue.empty()) return false;
    for (auto e : shared_->ended)
        if (!e) return false;
    return true;
}

Usage CompletionJob::usage() const {
    std::lock_guard lk(shared_->mu);
    Usage u;
    u.prompt_tokens = shared_->n_prompt;
    for (size_t i = 0; i < shared_->cached.size(); i += size_t(req_.n))  // n > 1: each prompt's first choice's
        u.cached_tokens += shared_->cached[i];
    for (int64_t g : shared_->generated) u.completion_tokens += g;
    return u;
}

nlohmann::json CompletionJob::wait_result(std::chrono::steady_clock::time_point deadline,
                                          const std::function<std::optional<ApiError>()>& abort) {
    std::vector<ChoiceResult> choices(size_t(req_.choices()));
    std::vector<nlohmann::json> entries(choices.size(), nlohmann::json::array());
    while (!done()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            cancel();
            throw ApiError(504, "timeout_error", "the request did not finish within the server's timeout");
        }
        if (abort)
            if (std::optional<ApiError> why = abort()) {
                cancel();
                throw *why;
            }
        std::vector<ChoiceDelta> ds;
        if (!wait(ds, std::min(left, std::chrono::milliseconds(kAbortPollMs)))) continue;
        for (auto& d : ds) {
            if (!d.error.empty()) {
                cancel();
                throw ApiError(500, "server_error", "generation failed: " + d.error);
            }
            auto& c = choices[size_t(d.index)];
            c.text += d.text;
            c.add(d.tool_calls);
            for (auto& e : d.logprobs) entries[size_t(d.index)].push_back(std::move(e));
            if (!d.finish_reason.empty()) c.finish_reason = d.finish_reason;
        }
    }
    if (req_.logprobs)
        for (size_t i = 0; i < choices.size(); ++i)
            choices[i].logprobs = logprobs_object(req_, entries[i], 0);
    return completion_json(req_, id_, created_, choices, usage());
}

}  // namespace sluice::api
