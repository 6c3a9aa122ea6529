// Where a rendered conversation closes its last assistant turn, as a prompt length: the cache points of a chat request
// (RequestParams::cache_points), so that a model whose recurrent state cannot be cut back (Kimi's KDA) leaves the
// state of the history up to each turn in the prefix cache, and a later request that shares the history up to a
// turn (a regenerated or edited last turn, another branch of the conversation) reuses it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice {
class ChatTemplate;
struct ChatRequest;
namespace tok {
class Tokenizer;
}
}  // namespace sluice

namespace sluice::api {

// For the last assistant message that some message follows: the conversation up to it is rendered without a
// generation prompt and encoded, and the number of its first tokens that `prompt` shares (all of them, for templates
// that render history the same whatever follows) is the boundary. Earlier turns' boundaries were the last ones when
// their turn was the request, so they are in the cache already; one render keeps this cheap. Empty when there is
// none, when it is 0 or the whole prompt, or when the render fails.
std::vector<int64_t> turn_boundaries(const ChatTemplate& chat_template, const ChatRequest& request,
                                     const tok::Tokenizer& tok, std::span<const int32_t> prompt);

}  // namespace sluice::api
