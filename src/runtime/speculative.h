// Speculative decoding: drafts (runtime/draft.h) verified by the engine (runtime/engine.h, RequestParams::
// draft_tokens); generate_speculative (runtime/generate.h) runs one request that way.
#pragma once

#include "runtime/draft.h"
#include "runtime/generate.h"
