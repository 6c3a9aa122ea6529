// A JSON Schema compiled into the node graph that runtime/json_automaton walks byte by byte (structured output).
// Supported: type (one name or an array of them), properties, required, additionalProperties (false, true or a
// schema), items, minItems, maxItems, minLength, maxLength (characters), enum, const, anyOf / oneOf (alternatives told apart by their first byte: one
// per JSON type, literals merged), $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion included);
// annotations (title, description, default, examples, $schema, $id, $comment) are ignored. Everything else that
// constrains values (pattern, format, minimum, multipleOf, ...) is refused rather than silently not enforced.
//
// Compile errors are SchemaError: the message and the path of the offending keyword inside the schema
// ("properties.items.items.type[1]"). Refused too: schemas with no finite instance (a required property or minItems
// that recurses forever, an empty enum, minItems > maxItems, a required property that cannot appear), nesting
// deeper than kMaxSchemaDepth levels, more than kMaxNodes nodes, more than kMaxProperties properties in one
// object, and property names that would need escaping in JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace sluice::schema {

class SchemaError : public Error {
public:
    SchemaError(std::string path, const std::string& message) : Error(message), path(std::move(path)) {}
    std::string path;  // inside the schema, dotted ("" = the schema itself)
};

constexpr int kMaxSchemaDepth = 32;
constexpr int kMaxNodes = 4096;
constexpr int kMaxProperties = 64;

struct SchemaNode {
    // sequence (not made from a schema: tool calls, api/tool_choice): its parts one after the other
    enum class Kind : uint8_t { object, array, string, number, integer, literals, choice, sequence };
    Kind kind = Kind::string;
    // object: property names in byte order, each one's schema, which are required (bit i: keys[i]), and the schema
    // of other keys (-1: none allowed)
    std::vector<std::string> keys;
    std::vector<int32_t> key_nodes;
    uint64_t required = 0;
    int32_t additional = -1;
    // array
    int32_t items = -1;  // -1: no item may appear (maxItems 0 or items: false)
    uint32_t min_items = 0, max_items = UINT32_MAX;
    // string: length in characters (code points; an escape is one)
    uint32_t min_length = 0, max_length = UINT32_MAX;
    // integer: inclusive bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum folded in), where given
    bool has_min = false, has_max = false;
    int64_t min_int = 0, max_int = 0;
    // literals (enum, const, boolean, null): the values' JSON texts, distinct, in byte order
    std::vector<std::string> literals;
    std::vector<int32_t> then;  // literals: per literal, a node read right after it (-1: none); empty: none
    std::vector<int32_t> parts;  // sequence
    // choice: alternatives, each a node of another kind, whose first bytes do not overlap
    std::vector<int32_t> alts;
};

struct Grammar {
    std::vector<SchemaNode> nodes;
    int32_t root = 0;
};

// The schema of {"type": "json_object"}: any JSON object.
Grammar any_object_grammar();
// Throws SchemaError.
Grammar compile_schema(const nlohmann::ordered_json& schema);

// Copies g's nodes into `into` (ids shifted) and returns g's root there.
int32_t append_grammar(Grammar& into, const Grammar& g);

// Whether `b` can be the first byte of a value of node n (choice: of any alternative).
bool starts_value(const Grammar& g, int32_t n, uint8_t b);

}  // namespace sluice::schema
