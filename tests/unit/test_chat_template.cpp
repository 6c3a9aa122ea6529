// Chat templates: every golden rendered by transformers (tests/data/templates/goldens.json, made by
// tools/reference/make_template_goldens.py) must come out byte-identical; plus interpreter semantics and errors.
#include <gtest/gtest.h>


#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../support/scratch_dir.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

using sluice::ChatRequest;
using sluice::ChatTemplate;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::tm fixed_clock() {
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 9;
    tm.tm_min = 30;
    tm.tm_wday = 4;
    tm.tm_yday = 14;
    return tm;
}

std::string render(const std::string& source, const std::string& messages_json = "[]", bool agp = false,
                   const std::string& kwargs = "{}", sluice::jinja::Limits limits = {}) {
    ChatTemplate t(source, limits);
    t.clock = fixed_clock;
    ChatRequest req;
    req.messages = nlohmann::ordered_json::parse(messages_json);
    req.add_generation_prompt = agp;
    req.kwargs = nlohmann::ordered_json::parse(kwargs);
    return t.apply(req);
}

std::string error_of(const std::string& source, sluice::jinja::Limits limits = {}) {
    try {
        render(source, "[]", false, "{}", limits);
    } catch (const sluice::Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(ChatTemplate, GoldensFromTransformers) {
    const std::string dir = SLUICE_TEST_DATA_DIR "/templates/";
    auto doc = nlohmann::ordered_json::parse(read_file(dir + "goldens.json"));
    std::map<std::string, std::pair<int, int>> per_template;  // passed, total
    std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
    ASSERT_GT(doc["goldens"].size(), 100u);
    for (const auto& g : doc["goldens"]) {
        const std::string name = g["template"].get<std::string>();
        SCOPED_TRACE(name + " " + g["case"].get<std::string>());
        auto& tpl = templates[name];
        if (!tpl) {
            tpl = std::make_unique<ChatTemplate>(read_file(dir + name + ".jinja"));
            tpl->clock = fixed_clock;
        }
        tpl->special_tokens.clear();
        for (const auto& [k, v] : g["special_tokens"].items()) tpl->special_tokens[k] = v.get<std::string>();
        ChatRequest req;
        req.messages = g["messages"];
        req.tools = g["tools"];
        req.add_generation_prompt = g["add_generation_prompt"].get<bool>();
        req.kwargs = g["kwargs"];
        auto& [passed, total] = per_template[name];
        ++total;
        if (g.contains("error")) {
            EXPECT_THROW(tpl->apply(req), sluice::Error) << "transformers failed with " << g["error"];
            bool threw = false;
            try {
                tpl->apply(req);
            } catch (const sluice::Error&) {
                threw = true;
            }
            passed += threw;
            continue;
        }
        std::string got;
        try {
            got = tpl->apply(req);
        } catch (const sluice::Error& e) {
            ADD_FAILURE() << "render failed: " << e.what();
            continue;
        }
        EXPECT_EQ(got, g["output"].get<std::string>());
        passed += got == g["output"].get<std::string>();
    }
    for (const auto& [name, counts] : per_template) {
        std::printf("  %-32s %d/%d goldens identical\n", name.c_str(), counts.first, counts.second);
    }
}

TEST(ChatTemplate, WhitespaceControl) {
    EXPECT_EQ(render("a\n  {% if true %}\n  x\n  {% endif %}\nb"), "a\n  x\nb");
    EXPECT_EQ(render("a  {%- if true -%}  x  {%- endif -%}  b"), "axb");
    EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
    EXPECT_EQ(render("{{ 'a' }}\n{# c #}\nb\n"), "a\nb");
    EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(ChatTemplate, LoopsAndScopes) {
    EXPECT_EQ(render("{% for x in [3, 4, 5] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                     "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
              "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
    EXPECT_EQ(render("{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}"
                     "{% if x == 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
              "15");
    EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }} {% endfor %}"), "b=1 a=2 ");
    // set inside a loop does not leak; namespace does.
    EXPECT_EQ(render("{% set y = 0 %}{% set ns = namespace(y=0) %}{% for i in [1,2] %}{% set y = i %}"
                     "{% set ns.y = ns.y + i %}{% endfor %}{{ y }} {{ ns.y }}"),
              "0 3");
    // macros see top-level variables as they are at call time, with defaults and keyword args.
    EXPECT_EQ(render("{% set x = 1 %}{% macro m(a, b='d') %}{{ a }}{{ b }}{{ x }}{% endmacro %}{% set x = 2 %}"
                     "{{ m('a') }} {{ m('a', b='B') }}"),
              "ad2 aB2");
    EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"), "[in]");
    EXPECT_EQ(render("{% set b %}x{{ 1 + 1 }}{% endset %}{{ b }}"), "x2");
}

TEST(ChatTemplate, ExpressionsFiltersAndMethods) {
    EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 % 3 }} {{ 3 / 2 }} {{ 2 ** 10 }} {{ 1e-5 }} {{ 0.1 + 0.2 }}"),
              "3 2 1.5 1024 1e-05 0.30000000000000004");
    EXPECT_EQ(render("{{ 'abc'[::-1] }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }} {{ [1,2,3][1:] }}"), "cba é 3 [2, 3]");
    EXPECT_EQ(render("{{ none }} {{ [1, 'a', none, true] }} {{ {'a': \"it's\"} }} {{ (1,) }}"),
              "None [1, 'a', None, True] {'a': \"it's\"} (1,)");
    EXPECT_EQ(render("{{ {'a': [1, 2.0, 'é\\n']} | tojson }}|{{ {'b': 1} | tojson(indent=2) }}"),
              "{\"a\": [1, 2.0, \"é\\n\"]}|{\n  \"b\": 1\n}");
    EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}"), "{\"a\":2,\"b\":1}");
    EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'x'.startswith(('y', 'x')) }}"),
              "a b|['a', 'b', '', 'c']|True");
    EXPECT_EQ(render("{{ 'hello world'|title }} {{ 'ab'|upper }} {{ [3,1,2]|sort|join('-') }} {{ 'héllo'|length }}"),
              "Hello World AB 1-2-3 5");
    EXPECT_EQ(render("{{ [{'n': 'a', 'k': 1}, {'n': 'b'}] | selectattr('k', 'defined') | map(attribute='n') | list }}"),
              "['a']");
    EXPECT_EQ(render("{{ {'b': 1, 'A': 2} | dictsort }}"), "[('A', 2), ('b', 1)]");
    EXPECT_EQ(render("{{ undefined_thing | default('d') }}{{ undefined_thing }}{{ undefined_thing is defined }}"),
              "dFalse");
    EXPECT_EQ(render("{{ 'a' if false }}|{{ 'a' ~ 1 ~ none }}|{{ 'x' in 'xyz' }}|{{ 2 not in [1] }}"),
              "|a1None|True|True");
    EXPECT_EQ(render("{{ '%s-%d' % ('a', 3) }} {{ '1'|int + '2.5'|float }}"), "a-3 3.5");
    // %d of floats as Python: the integer part, exactly, also past int64 (a cast there was undefined behaviour).
    EXPECT_EQ(render("{{ '%d|%d|%i' % (2.9, -2.9, 1e30) }}"), "2|-2|1000000000000000019884624838656");
    EXPECT_THROW(render("{{ '%d' % ('nan'|float) }}"), sluice::Error);
    EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}"), "2026-01-15");
}

TEST(ChatTemplate, ReasoningFieldsAreAliasedLikeTransformers) {
    EXPECT_EQ(render("{% for m in messages %}{{ m | tojson }}{% endfor %}",
                     R"([{"role": "assistant", "content": "x", "reasoning": "r", "tool_calls": null}])"),
              R"({"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"})");
}

TEST(ChatTemplate, ErrorsNameTheLine) {
    std::string e = error_of("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
    EXPECT_NE(e.find("line 3"), std::string::npos) << e;
    e = error_of("a\nb\n{% for x in y %}no end");
    EXPECT_NE(e.find("line 3"), std::string::npos) << e;
    EXPECT_NE(e.find("endfor"), std::string::npos) << e;
    e = error_of("a\n{% include 'x.j2' %}");
    EXPECT_NE(e.find("not supported"), std::string::npos) << e;
    e = error_of("{{ 'unterminated }}");
    EXPECT_NE(e.find("unterminated"), std::string::npos) << e;
}

TEST(ChatTemplate, RuntimeErrorsSurface) {
    std::string e = error_of("\n\n{{ raise_exception('Only user and assistant roles are supported!') }}");
    EXPECT_NE(e.find("Only user and assistant roles are supported!"), std::string::npos) << e;
    EXPECT_NE(e.find("line 3"), std::string::npos) << e;
    e = error_of("{{ foo.bar }}");
    EXPECT_NE(e.find("'foo' is undefined"), std::string::npos) << e;
    e = error_of("{{ 'a' + 1 }}");
    EXPECT_NE(e.find("unsupported operand"), std::string::npos) << e;
    e = error_of("{% set l = [] %}{% set _ = l.append(1) %}");
    EXPECT_NE(e.find("unsafe"), std::string::npos) << e;
    e = error_of("{% set ns = namespace(_x=1) %}");
    EXPECT_NE(e.find("underscore"), std::string::npos) << e;
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
    sluice::jinja::Limits tight;
    tight.max_loop_iterations = 1000;
    tight.max_output_bytes = 4096;
    tight.max_call_depth = 20;
    std::string e = error_of("{% for a in range(100) %}{% for b in range(100) %}{% endfor %}{% endfor %}", tight);
    EXPECT_NE(e.find("loop iterations"), std::string::npos) << e;
    sluice::jinja::Limits small_output = tight;
    small_output.max_loop_iterations = 100000;
    e = error_of("{% for a in range(1000) %}{{ 'xxxxxxxxxx' }}{% endfor %}", small_output);
    EXPECT_NE(e.find("limit"), std::string::npos) << e;
    e = error_of("{{ 'x' * 100000 }}", tight);
    EXPECT_NE(e.find("limit"), std::string::npos) << e;
    e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", tight);
    EXPECT_NE(e.find("nested deeper"), std::string::npos) << e;
    e = error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", tight);
    EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
    e = error_of("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}", tight);
    EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
}

TEST(ChatTemplate, LoadsFromModelDirectory) {
    const std::string dir = SLUICE_TEST_DATA_DIR "/tokenizers/deepseek_v3";  // the real tokenizer_config.json
    ChatTemplate t = ChatTemplate::from_model_dir(dir);
    EXPECT_EQ(t.special_tokens.at("bos_token"), "<｜begin▁of▁sentence｜>");
    ChatRequest req;
    req.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    req.add_generation_prompt = true;
    EXPECT_EQ(t.apply(req), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
}

TEST(ChatTemplate, CliRendersNamedTemplateWithTokensAndKwargs) {
    if (!std::ifstream(SLUICE_BINARY)) GTEST_SKIP() << "sluice binary not built";
    namespace fs = std::filesystem;
    const fs::path dir = sluice::test::scratch_dir("tpl");
    nlohmann::ordered_json config = {
        {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
        {"eos_token", "</s>"},
        {"chat_template",
         {{{"name", "default"}, {"template", "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]"
                                             "{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ x }}"}},
          {{"name", "tool_use"}, {"template", "tools={{ tools | length }}{{ eos_token }}"}}}}};
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    std::ofstream(dir / "plain.json") << R"([{"role": "user", "content": "hé"}])";
    std::ofstream(dir / "tools.json") << R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"a": 1}]})";
    auto run = [&](const std::string& args) {
        fs::path out = dir / "out.txt";
        std::string cmd = std::string(SLUICE_BINARY) + " template -m " + dir.string() + " " + args + " > " + out.string();
        int rc = std::system(cmd.c_str());
        return rc == 0 ? read_file(out.string()) : "(exit " + std::to_string(rc) + ")";
    };
    EXPECT_EQ(run("--messages " + (dir / "plain.json").string() + " --add-generation-prompt --kwargs '{\"x\": 7}'"),
              "<s>[user:hé]>7");
    EXPECT_EQ(run("--messages " + (dir / "plain.json").string()), "<s>[user:hé]");
    EXPECT_EQ(run("--messages " + (dir / "tools.json").string()), "tools=1</s>");
    EXPECT_NE(run("--messages " + (dir / "missing.json").string()).find("exit"), std::string::npos);
    fs::remove_all(dir);
}
