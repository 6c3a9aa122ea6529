// response_format (both endpoints, and batch lines through the same parser): {"type": "text"} leaves the output
// free; "json_object" and "json_schema" constrain it with a token mask (runtime/token_mask.h) built from the schema
// (runtime/json_schema.h) over the model's vocabulary. A schema that cannot be compiled is a 400 whose param is the
// path of the offending keyword ("response_format.json_schema.schema.properties.age.type").
#include <cctype>
#include <mutex>

#include "api/openai_protocol.h"
#include "core/error.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace sluice::api {

namespace {

using ojson = nlohmann::ordered_json;

}  // namespace

std::shared_ptr<const TokenTrie> LazyTokenTrie::get(const tok::Tokenizer& tok, int64_t vocab_size) {
    std::lock_guard lock(mu_);
    if (!trie_) trie_ = TokenTrie::from_tokenizer(tok, vocab_size, markers_);
    return trie_;
}

ConstraintFactory parse_response_format(const ojson& v, const ModelContext& ctx) {
    const std::string p = "response_format";
    if (!v.is_object()) bad_request(p, "Invalid type for 'response_format': expected an object.", "invalid_type");
    const auto type = v.find("type");
    if (type == v.end() || type->is_null())
        bad_request(p + ".type", "Missing required parameter: 'response_format.type'.", "missing_required_parameter");
    if (!type->is_string())
        bad_request(p + ".type", "Invalid type for 'response_format.type': expected a string.", "invalid_type");
    const std::string t = type->get<std::string>();
    if (t != "text" && t != "json_object" && t != "json_schema")
        bad_request(p + ".type", cat("Invalid value for 'response_format.type': '", t,
                                     "'. Supported values are: 'text', 'json_object', and 'json_schema'."));
    for (const auto& [key, o] : v.items())
        if (key != "type" && !(t == "json_schema" && key == "json_schema"))
            bad_request(p + "." + key, cat("Unrecognized request argument supplied: ", p, ".", key),
                        "unknown_parameter");
    if (t == "text") return {};
    schema::Grammar grammar;
    if (t == "json_object") {
        grammar = schema::any_object_grammar();
    } else {
        const std::string jp = p + ".json_schema";
        const auto js = v.find("json_schema");
        if (js == v.end() || js->is_null())
            bad_request(jp, "Missing required parameter: 'response_format.json_schema'.", "missing_required_parameter");
        if (!js->is_object())
            bad_request(jp, "Invalid type for 'response_format.json_schema': expected an object.", "invalid_type");
        const auto name = js->find("name");
        if (name == js->end() || name->is_null())
            bad_request(jp + ".name", "Missing required parameter: 'response_format.json_schema.name'.",
                        "missing_required_parameter");
        if (!name->is_string() || !valid_openai_name(name->get<std::string>()))
            bad_request(jp + ".name",
                        "Invalid 'response_format.json_schema.name': up to 64 letters, digits, '_' or '-'.");
        for (const auto& [key, o] : js->items()) {
            if (key == "name" || key == "schema" || (key == "description" && o.is_string())) continue;
            if (key == "strict" && (o.is_boolean() || o.is_null())) continue;  // always enforced
            if (key == "strict" || key == "description")
                bad_request(jp + "." + key, cat("Invalid type for '", jp, ".", key, "'."), "invalid_type");
            bad_request(jp + "." + key, cat("Unrecognized request argument supplied: ", jp, ".", key),
                        "unknown_parameter");
        }
        const auto schema = js->find("schema");
        const ojson any = ojson::object();
        try {
            grammar = schema::compile_schema(schema == js->end() || schema->is_null() ? any : *schema);
        } catch (const schema::SchemaError& e) {
            const std::string at = e.path.empty() ? jp + ".schema" : jp + ".schema." + e.path;
            bad_request(at, cat("Invalid schema for response_format '", name->get<std::string>(), "': at '", at,
                                "': ", e.what(), "."));
        }
    }
    const int64_t vocab = ctx.vocab_size > 0 ? ctx.vocab_size : ctx.tokenizer->vocab_size();
    std::shared_ptr<LazyTokenTrie> lazy = ctx.token_trie ? ctx.token_trie : std::make_shared<LazyTokenTrie>();
    return json_constraint_factory(std::make_shared<const schema::Automaton>(std::move(grammar)),
                                   lazy->get(*ctx.tokenizer, vocab));
}

}  // namespace sluice::api
