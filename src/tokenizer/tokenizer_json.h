// tokenizer.json parsed into nlohmann's DOM, except the entries of model.vocab: those go to a flat vector in file
// order. As a DOM object, a 200,000-entry vocabulary is a std::map of as many nodes, built and then torn down on
// every load; a vector of (token, id) is what the loader reads anyway.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::tok {

struct TokenizerJson {
    nlohmann::json root;
    // model.vocab was an object: its entries are here (file order; a value that is an object or an array is kept
    // as null) and the DOM holds an empty object in its place
    bool vocab_split = false;
    std::vector<std::pair<std::string, nlohmann::json>> vocab;
};

// Errors as parse_json's (config_util.h): "tokenizer: ORIGIN is not valid JSON: ..." and "... is not a JSON object".
// Empty text gives an empty object.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& origin);

}  // namespace sluice::tok
