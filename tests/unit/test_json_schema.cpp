// The structured-output schema compiler (runtime/json_schema) and its byte automaton (runtime/json_automaton):
// invalid schemas name the path of the offending keyword; the automaton accepts instances and refuses, at the
// first wrong byte, texts that are not JSON or do not match.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/json_automaton.h"
#include "runtime/json_schema.h"

using namespace sluice::schema;
using ojson = nlohmann::ordered_json;

namespace {

std::string error_path(const char* schema) {
    try {
        compile_schema(ojson::parse(schema));
    } catch (const SchemaError& e) {
        return e.path;
    }
    return "(compiled)";
}

// 1: the whole text is accepted and complete; 0: accepted but incomplete; -1 - i: byte i refused.
int run(const Automaton& a, const std::string& text) {
    State s = a.start();
    for (size_t i = 0; i < text.size(); ++i)
        if (!a.step(s, uint8_t(text[i]))) return -1 - int(i);
    return a.can_end(s) ? 1 : 0;
}

Automaton from(const char* schema) { return Automaton(compile_schema(ojson::parse(schema))); }

const char* k_person = R"({"type":"object","additionalProperties":false,"required":["name","age"],
  "properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"},
  "minItems":1,"maxItems":2},"kind":{"enum":["cat","dog",3,null]},"score":{"type":["number","null"]}}})";

}  // namespace

TEST(JsonSchema, InvalidSchemasNameThePath) {
    EXPECT_EQ(error_path(R"({"type":"strin"})"), "type");
    EXPECT_EQ(error_path(R"({"properties":{"a":{"type":["string","foo"]}}})"), "properties.a.type[1]");
    EXPECT_EQ(error_path(R"({"properties":{"xs":{"type":"array","minItems":3,"maxItems":2}}})"),
              "properties.xs.minItems");
    EXPECT_EQ(error_path(R"({"type":"object","additionalProperties":false,"required":["b"],"properties":{}})"),
              "required[0]");
    EXPECT_EQ(error_path(R"({"enum":[]})"), "enum");
    EXPECT_EQ(error_path(R"({"properties":{"s":{"type":"string","pattern":"^a"}}})"), "properties.s.pattern");
    EXPECT_EQ(error_path(R"({"$ref":"#/$defs/missing"})"), "$ref");
    EXPECT_EQ(error_path(R"({"$ref":"#"})"), "$ref");
    EXPECT_EQ(error_path(R"({"anyOf":[{"type":"object"},{"type":"object","required":["a"],"properties":{"a":{}}}]})"),
              "anyOf");
    EXPECT_EQ(error_path(R"({"anyOf":[{"type":"string"},{"const":"a"}]})"), "anyOf");
    EXPECT_EQ(error_path(R"({"type":"string","enum":["a",1]})"), "enum[1]");
    EXPECT_EQ(error_path(R"({"const":1,"enum":[2]})"), "const");
    EXPECT_EQ(error_path("5"), "");
    EXPECT_EQ(error_path("false"), "");
    EXPECT_EQ(error_path(R"({"properties":{"a\"b":{}}})"), "properties.a\"b");
    // a required property that recurses forever has no finite instance
    EXPECT_EQ(error_path(R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},
        "required":["next"]}},"$ref":"#/$defs/n"})"),
              "$defs.n");
    EXPECT_EQ(error_path(R"({"type":"array","items":{"$ref":"#"},"minItems":1})"), "");
    // nesting beyond the limit
    std::string deep = R"({"type":"string"})";
    std::string path = "";
    for (int i = 0; i <= kMaxSchemaDepth; ++i) {
        deep = R"({"type":"array","items":)" + deep + "}";
        path = path.empty() ? "items" : path + ".items";
    }
    EXPECT_EQ(error_path(deep.c_str()), path);
    // optional recursion is fine
    EXPECT_EQ(error_path(R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}}})"),
              "(compiled)");
}

TEST(JsonAutomaton, AcceptsInstances) {
    const Automaton a = from(k_person);
    EXPECT_EQ(run(a, R"({"name":"Ann","age":31})"), 1);
    EXPECT_EQ(run(a, R"({ "age" : -0 , "name" : "A\"\u00e9\n" , "tags" : ["x", "y"], "kind": null })"), 1);
    EXPECT_EQ(run(a, R"({"kind":3,"name":"","age":12,"score":-1.5e+3})"), 1);
    EXPECT_EQ(run(a, R"({"kind":"dog","name":"","age":1,"score":null})"), 1);
    EXPECT_EQ(run(a, "\n{\"name\":\"x\",\n  \"age\": 7\n}"), 1);
    EXPECT_EQ(run(a, R"({"name":"x)"), 0);
}

TEST(JsonAutomaton, RefusesAtTheFirstWrongByte) {
    const Automaton a = from(k_person);
    EXPECT_EQ(run(a, R"({"name":"x"})"), -1 - 11);            // '}' before the required "age"
    EXPECT_EQ(run(a, R"({"nam":1})"), -1 - 5);                // no property is "nam"
    EXPECT_EQ(run(a, R"({"other":1})"), -1 - 2);              // additionalProperties false
    EXPECT_EQ(run(a, R"({"age":1,"age":2})"), -1 - 10);       // the same property twice
    EXPECT_EQ(run(a, R"({"age":"1"})"), -1 - 7);              // wrong type
    EXPECT_EQ(run(a, R"({"age":1.5})"), -1 - 8);              // an integer has no fraction
    EXPECT_EQ(run(a, R"({"age":01})"), -1 - 8);               // leading zero
    EXPECT_EQ(run(a, R"({"tags":[]})"), -1 - 9);              // minItems 1
    EXPECT_EQ(run(a, R"({"tags":["a","b","c"]})"), -1 - 16);  // maxItems 2
    EXPECT_EQ(run(a, R"({"kind":"cow"})"), -1 - 10);          // not in the enum
    EXPECT_EQ(run(a, R"({"name":"a\qb"})"), -1 - 11);         // bad escape
    EXPECT_EQ(run(a, R"({"name":"\ud800"})"), -1 - 12);       // a surrogate escape
    EXPECT_EQ(run(a, "{\"name\":\"a\tb\"}"), -1 - 10);        // a raw control character
    EXPECT_EQ(run(a, R"({"name":"","age":1} )"), -1 - 19);    // nothing after the value
    EXPECT_EQ(run(a, std::string(max_whitespace(1) + 1, ' ')), -1 - max_whitespace(1));
    // pretty-printed: a newline and two spaces a level
    EXPECT_EQ(run(a, "{\n  \"name\": \"x\",\n  \"age\": 1,\n  \"pets\": 1\n}"), -1 - 32);  // no "pets" here
    EXPECT_EQ(run(a, "{\n  \"name\": \"x\",\n  \"tags\": [\n    \"a\"\n  ],\n  \"age\": 1\n}"), 1);
    EXPECT_EQ(run(a, "{\"name\":      \"x\"}"), -1 - 13);
}

TEST(JsonAutomaton, LiteralsThatArePrefixesOfOthers) {
    const Automaton a = from(R"({"type":"array","items":{"enum":[1,12,"a","ab",true]}})");
    EXPECT_EQ(run(a, R"([1,12,"a","ab",true])"), 1);
    EXPECT_EQ(run(a, "[13]"), -1 - 2);
    EXPECT_EQ(run(a, R"(["abc"])"), -1 - 4);
    const Automaton top = from(R"({"enum":[1,12]})");
    EXPECT_EQ(run(top, "1"), 1);   // may end, or go on to 12
    EXPECT_EQ(run(top, "12"), 1);
    EXPECT_EQ(run(top, "123"), -1 - 2);
}

TEST(JsonAutomaton, StringLengthsCountCharacters) {
    const Automaton a = from(R"({"type":"string","minLength":2,"maxLength":3})");
    EXPECT_EQ(run(a, R"("ab")"), 1);
    EXPECT_EQ(run(a, R"("a")"), -1 - 2);
    EXPECT_EQ(run(a, R"("abcd")"), -1 - 4);
    EXPECT_EQ(run(a, "\"\xc3\xa9\\n\xe2\x82\xac\""), 1);  // three characters: an accent, an escape, a euro sign
    EXPECT_EQ(error_path(R"({"type":"string","minLength":3,"maxLength":2})"), "minLength");
}

// Strings are valid UTF-8 (JSON text is), and a character of several bytes counts once toward maxLength: a
// continuation byte without its lead, a lead without its continuation, overlong forms, surrogates and code points
// past U+10FFFF are refused at their byte.
TEST(JsonAutomaton, StringsAreValidUtf8) {
    const Automaton a = from(R"({"type":"string","maxLength":2})");
    EXPECT_EQ(run(a, "\"\xf0\x9f\x98\x80\xc3\xa9\""), 1);  // two characters, six bytes
    EXPECT_EQ(run(a, "\"\x80\""), -1 - 1);
    EXPECT_EQ(run(a, "\"a\x80\x80\x80\""), -1 - 2);  // continuation bytes do not make a long string short
    EXPECT_EQ(run(a, "\"\xc3\""), -1 - 2);
    EXPECT_EQ(run(a, "\"\xc0\xaf\""), -1 - 1);
    EXPECT_EQ(run(a, "\"\xe0\x80\x80\""), -1 - 2);
    EXPECT_EQ(run(a, "\"\xed\xa0\x80\""), -1 - 2);
    EXPECT_EQ(run(a, "\"\xf4\x90\x80\x80\""), -1 - 2);
    EXPECT_EQ(run(a, "\"\xf5\x80\""), -1 - 1);
    const Automaton any = from(R"({"type":"string"})");
    EXPECT_EQ(run(any, "\"\xe2\x82\xac \xed\x9f\xbf \xf4\x8f\xbf\xbf\""), 1);
    EXPECT_EQ(run(any, "\"\xe2\x82x\""), -1 - 3);
    const Automaton obj = Automaton(any_object_grammar());  // keys of any object too
    EXPECT_EQ(run(obj, "{\"\xc3\xa9\":1}"), 1);
    EXPECT_EQ(run(obj, "{\"a\x80\":1}"), -1 - 3);
    EXPECT_EQ(run(obj, "{\"\xc3\":1}"), -1 - 3);
}

// Integer bounds: a digit is taken only while some integer that starts so is within them, and the value must be
// within them where it ends; fractions round inward, exclusive bounds step in by one.
TEST(JsonAutomaton, IntegerBounds) {
    const Automaton a = from(R"({"type":"integer","minimum":-5,"maximum":12})");
    for (const char* ok : {"-5", "-0", "0", "7", "12", "10"}) EXPECT_EQ(run(a, ok), 1) << ok;
    EXPECT_EQ(run(a, "13"), -1 - 1);
    EXPECT_EQ(run(a, "120"), -1 - 2);
    EXPECT_EQ(run(a, "-6"), -1 - 1);
    EXPECT_EQ(run(a, "-51"), -1 - 2);
    const Automaton below = from(R"({"type":"integer","maximum":-10})");
    EXPECT_EQ(run(below, "5"), -1 - 0);
    EXPECT_EQ(run(below, "-9"), 0);  // -90 .. -99 are still ahead, but -9 cannot end
    EXPECT_EQ(run(below, "-95"), 1);
    EXPECT_EQ(run(below, "-99999999999999999999999"), 1);  // past 64 bits, still below the bound
    const Automaton excl = from(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":3})");
    EXPECT_EQ(run(excl, "0"), -1 - 0);
    EXPECT_EQ(run(excl, "2"), 1);
    EXPECT_EQ(run(excl, "3"), -1 - 0);
    EXPECT_EQ(run(excl, "-"), -1 - 0);
    const Automaton frac = from(R"({"type":"integer","minimum":1.5,"exclusiveMaximum":4.0})");
    EXPECT_EQ(run(frac, "1"), -1 - 0);  // 2 and 3 only: nothing starts with 1
    EXPECT_EQ(run(frac, "2"), 1);
    EXPECT_EQ(run(frac, "4"), -1 - 0);
    const Automaton big = from(R"({"type":["integer","null"],"minimum":0})");
    EXPECT_EQ(run(big, "123456789012345678901234567890"), 1);
    EXPECT_EQ(run(big, "-1"), -1 - 1);
    EXPECT_EQ(run(big, "null"), 1);
    const Automaton obj = from(R"({"type":"object","properties":{"n":{"type":"integer","maximum":9}}})");
    EXPECT_EQ(run(obj, R"({"n":9})"), 1);
    EXPECT_EQ(run(obj, R"({"n":10})"), -1 - 6);
    const Automaton neg = from(R"({"type":"object","properties":{"n":{"type":"integer","maximum":-10}}})");
    EXPECT_EQ(run(neg, R"({"n":-9})"), -1 - 7);  // the value ends above the bound at the brace
    EXPECT_EQ(run(neg, R"({"n":-90})"), 1);
    // bounds the mask does not enforce are refused, naming the keyword
    EXPECT_EQ(error_path(R"({"type":"number","minimum":0})"), "minimum");
    EXPECT_EQ(error_path(R"({"maximum":0})"), "maximum");
    EXPECT_EQ(error_path(R"({"type":["integer","number"],"maximum":0})"), "maximum");
    EXPECT_EQ(error_path(R"({"type":"integer","enum":[1,2],"minimum":2})"), "minimum");
    EXPECT_EQ(error_path(R"({"properties":{"x":{"type":"integer","minimum":5,"maximum":4}}})"), "properties.x.minimum");
    EXPECT_EQ(error_path(R"({"type":"integer","exclusiveMinimum":true})"), "exclusiveMinimum");
    EXPECT_EQ(error_path(R"({"type":"integer","maximum":1e30})"), "maximum");
}

TEST(JsonAutomaton, AnyObjectAndRecursion) {
    const Automaton any = Automaton(any_object_grammar());
    EXPECT_EQ(run(any, R"({"a":[1,{"b":null,"c":[true,false,"x",-2.5E-3]}],"":{}})"), 1);
    EXPECT_EQ(run(any, "[1]"), -1);  // json_object: the top level is an object
    EXPECT_EQ(run(any, R"({"a":1,"a":2})"), 1);  // keys of an unconstrained object are not tracked
    const Automaton tree =
        from(R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},
                 "required":["v"],"additionalProperties":false})");
    EXPECT_EQ(run(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"), 1);
    EXPECT_EQ(run(tree, R"({"v":1,"kids":[{}]})"), -1 - 16);
    // nesting past the stack is refused, not a crash
    std::string deep;
    for (int i = 0; i < kMaxStack + 2; ++i) deep += R"({"a":)";
    EXPECT_LT(run(any, deep), 0);
    const Automaton nullable = from(R"({"type":["integer","null"]})");
    EXPECT_EQ(run(nullable, "null"), 1);
    EXPECT_EQ(run(nullable, "-7"), 1);
    EXPECT_EQ(run(nullable, "7.5"), -1 - 1);
}
