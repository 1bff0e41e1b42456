// Chat template interpreter: the real templates in ../shared/tokenizers (Llama-3, Qwen3; Mistral
// has none and uses the built-in), the built-in ChatML / Llama-2 / Mistral / Zephyr / Llama-3
// formats, Jinja features real templates rely on, and the errors for unsupported constructs.
#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "perfx/status.h"
#include "support/test_support.h"

namespace perfx {
namespace {

using json = nlohmann::ordered_json;

json conversation(bool with_system) {
  json m = json::array();
  if (with_system) m.push_back({{"role", "system"}, {"content", "You are helpful."}});
  m.push_back({{"role", "user"}, {"content", "Hi"}});
  m.push_back({{"role", "assistant"}, {"content", "Hello! How can I help?"}});
  m.push_back({{"role", "user"}, {"content", "Tell me a joke."}});
  return m;
}

std::string render(const std::string& tpl, const json& messages, bool gen,
                   const std::string& bos = "", const std::string& eos = "",
                   const json& extra = nullptr) {
  ChatTemplate t(tpl);
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = gen;
  in.bos_token = bos;
  in.eos_token = eos;
  in.extra = extra;
  return t.render(in);
}

std::string shared_template(const std::string& model) {
  json cfg = json::parse(
      test::read_file(test::shared_path("tokenizers/" + model + "/tokenizer_config.json")));
  return cfg.value("chat_template", std::string());
}

// Renders a template with no messages (feature tests).
std::string eval(const std::string& tpl, const json& extra = nullptr) {
  return render(tpl, json::array(), true, "<s>", "</s>", extra);
}

// The error a render raises, or "(no error) " + its output.
std::string error_of_render(const ChatTemplate& t, const ChatTemplateInputs& in) {
  try {
    return "(no error) " + t.render(in);
  } catch (const Error& e) {
    return e.what();
  }
}

// The error a template raises, or "(no error) " + its output.
std::string error_of(const std::string& tpl) {
  try {
    return "(no error) " + eval(tpl);
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(ChatTemplateReal, Llama3) {
  PERFX_REQUIRE_SHARED("tokenizers/llama3/tokenizer_config.json");
  std::string tpl = shared_template("llama3");
  ASSERT_FALSE(tpl.empty());
  const std::string expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render(tpl, conversation(true), true, "<|begin_of_text|>"), expected);
  // This template always ends with the assistant header, whatever add_generation_prompt says.
  EXPECT_EQ(render(tpl, conversation(true), false, "<|begin_of_text|>"), expected);
  // Without a system message, BOS goes before the first user turn; content is trimmed.
  json m = json::array({{{"role", "user"}, {"content", "  Hi there \n"}}});
  EXPECT_EQ(render(tpl, m, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateReal, Qwen3Plain) {
  PERFX_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  std::string tpl = shared_template("qwen3");
  ASSERT_FALSE(tpl.empty());
  const std::string body =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
      "<|im_start|>user\nTell me a joke.<|im_end|>\n";
  EXPECT_EQ(render(tpl, conversation(true), true), body + "<|im_start|>assistant\n");
  EXPECT_EQ(render(tpl, conversation(true), false), body);
  EXPECT_EQ(render(tpl, conversation(true), true, "", "", {{"enable_thinking", false}}),
            body + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render(tpl, conversation(false), false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?"
            "<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n");
}

TEST(ChatTemplateReal, Qwen3Thinking) {
  PERFX_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  std::string tpl = shared_template("qwen3");
  // Reasoning is dropped from turns before the last user query and kept after it.
  json m = json::array({{{"role", "user"}, {"content", "What is 2+2?"}},
                        {{"role", "assistant"}, {"content", "<think>\nsimple\n</think>\n\n4"}},
                        {{"role", "user"}, {"content", "And 3+3?"}},
                        {{"role", "assistant"}, {"content", "<think>\nagain\n</think>\n\n6"}}});
  EXPECT_EQ(render(tpl, m, false),
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n");
  json r = json::array({{{"role", "user"}, {"content", "q1"}},
                        {{"role", "assistant"}, {"content", "a1"}, {"reasoning_content", "r1"}},
                        {{"role", "user"}, {"content", "q2"}},
                        {{"role", "assistant"}, {"content", "a2"}, {"reasoning_content", "r2"}}});
  EXPECT_EQ(render(tpl, r, false),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2"
            "<|im_end|>\n");
}

TEST(ChatTemplateReal, Qwen3Tools) {
  PERFX_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  std::string tpl = shared_template("qwen3");
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  json m = json::parse(R"([
    {"role": "system", "content": "Sys"},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "second"},
    {"role": "assistant", "content": "It is 21."}])");
  const std::string expected =
      "<|im_start|>system\nSys\n\n# Tools\n\nYou may call one or more functions to assist with the "
      "user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": "
      "\"Get weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, "
      "return a json object with function name and arguments within <tool_call></tool_call> XML "
      "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
      "</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
      "{\"temp\": 21}\n</tool_response>\n<tool_response>\nsecond\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 21.<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(render(tpl, m, true, "", "", {{"tools", tools}, {"enable_thinking", false}}), expected);
}

TEST(ChatTemplateReal, MistralConfigHasNoTemplateSoBuiltinIsUsed) {
  PERFX_REQUIRE_SHARED("tokenizers/mistral/tokenizer_config.json");
  EXPECT_TRUE(shared_template("mistral").empty());
  EXPECT_EQ(render(builtin_chat_template("mistral"), conversation(true), true, "<s>", "</s>"),
            "<s>[INST] You are helpful.\n\nHi [/INST]Hello! How can I help?</s>"
            "[INST] Tell me a joke. [/INST]");
  EXPECT_EQ(render(builtin_chat_template("mistral"), conversation(false), false, "<s>", "</s>"),
            "<s>[INST] Hi [/INST]Hello! How can I help?</s>[INST] Tell me a joke. [/INST]");
}

TEST(ChatTemplateBuiltin, ChatML) {
  std::string tpl = builtin_chat_template("chatml");
  const std::string body =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
      "<|im_start|>user\nTell me a joke.<|im_end|>\n";
  EXPECT_EQ(render(tpl, conversation(true), true), body + "<|im_start|>assistant\n");
  EXPECT_EQ(render(tpl, conversation(true), false), body);
}

TEST(ChatTemplateBuiltin, Llama2) {
  std::string tpl = builtin_chat_template("llama2");
  EXPECT_EQ(render(tpl, conversation(true), true, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! How can I help? "
            "</s><s>[INST] Tell me a joke. [/INST]");
  EXPECT_EQ(render(tpl, conversation(false), false, "<s>", "</s>"),
            "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]");
  json bad =
      json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  try {
    render(tpl, bad, true, "<s>", "</s>");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat template raised: conversation roles must alternate"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplateBuiltin, Zephyr) {
  std::string tpl = builtin_chat_template("zephyr");
  const std::string body =
      "<|system|>\nYou are helpful.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello! How can I help?"
      "</s>\n<|user|>\nTell me a joke.</s>\n";
  EXPECT_EQ(render(tpl, conversation(true), true, "<s>", "</s>"), body + "<|assistant|>\n");
  EXPECT_EQ(render(tpl, conversation(true), false, "<s>", "</s>"), body);
}

TEST(ChatTemplateBuiltin, Llama3RespectsGenerationPrompt) {
  std::string tpl = builtin_chat_template("llama3");
  const std::string body =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>";
  EXPECT_EQ(render(tpl, conversation(false), true, "<|begin_of_text|>"),
            body + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(tpl, conversation(false), false, "<|begin_of_text|>"), body);
  EXPECT_TRUE(builtin_chat_template("nope").empty());
}

TEST(ChatTemplateJinja, WhitespaceControlTrimAndLstripBlocks) {
  // transformers renders with trim_blocks and lstrip_blocks.
  EXPECT_EQ(eval("  {% if true %}\n    yes\n  {% endif %}\n  {#- c -#}\n  {% for i in [1,2] %}\n"
                 "    item {{ i }}\n  {% endfor %}\n{%+ if true %}keep{% endif %}\n"
                 "{% raw %}{{ not parsed }}{% endraw %}\ndone\n"),
            "    yes\n    item 1\n    item 2\nkeep{{ not parsed }}done");
  EXPECT_EQ(eval("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(eval("x\n{%- if true -%}\n  y  \n{%- endif %}z"), "xyz");
}

TEST(ChatTemplateJinja, LoopsScopesAndNamespaces) {
  EXPECT_EQ(eval("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
                 "{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}"),
            "10TrueFalse33;21FalseFalse32;32FalseTrue31;");
  // A set inside a loop does not leak out of it; a namespace does.
  EXPECT_EQ(
      eval("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}"
           "{% set x = x + 10 %}{% set ns.n = ns.n + i %}{{ x }},{% endfor %}|{{ x }}|{{ ns.n }}"),
      "11,11,11,|1|3");
  EXPECT_EQ(eval("{% for i in range(10) if i is odd %}{% if i > 6 %}{% break %}{% endif %}"
                 "{{ i }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}"),
            "135|empty");
  EXPECT_EQ(eval("{% for k, v in {'b': 2, 'a': 1}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "b=2;a=1;");
  EXPECT_EQ(
      eval("{% macro m(x, p='> ') %}{{ p }}{{ x }}{% endmacro %}{{ m('a') }}|{{ m('b', p='# ') }}"),
      "> a|# b");
  EXPECT_EQ(eval("{% set b %}in {{ 1 + 1 }}{% endset %}[{{ b }}]{% filter upper %}x{{ 'y' }}"
                 "{% endfilter %}"),
            "[in 2]XY");
}

TEST(ChatTemplateJinja, ExpressionsFiltersTestsMethods) {
  EXPECT_EQ(eval("{{ 3/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7%3 }} {{ 2**10 }} {{ 10/5 }} {{ 'a' ~ 1 ~ "
                 "none }}"),
            "1.5 3 -4 2 1024 2.0 a1None");
  EXPECT_EQ(eval("{{ [1, 'a', none, true, 0.1, 1e20] }} {{ {'k': 'v'} }} {{ (1, 2) }}"),
            "[1, 'a', None, True, 0.1, 1e+20] {'k': 'v'} (1, 2)");
  EXPECT_EQ(
      eval("{{ 'héllo wörld'[::-1] }}|{{ 'héllo'|length }}|{{ [1,2,3][-2] }}|{{ [1,2,3,4][1:3] }}"),
      "dlröw olléh|5|2|[2, 3]");
  EXPECT_EQ(eval("{{ '  a b  '|trim }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|"
                 "{{ ' a  b '.split() }}|{{ 'Hello'.startswith('He') }}|{{ "
                 "'Hello'.endswith(('x','lo')) }}|"
                 "{{ 'aaa'.replace('a','b',2) }}|{{ '-'.join(['a','b']) }}|{{ 'ab cd'.title() }}"),
            "a b|hi|['a', 'b', '', 'c']|['a', 'b']|True|True|bba|a-b|Ab Cd");
  EXPECT_EQ(eval("{{ x is defined }}{{ none is none }}{{ 4 is divisibleby 2 }}{{ 3 is even }}"
                 "{{ undefined_var|default('dv') }}{{ ''|default('e', true) }}{{ 1 < 2 < 3 }}"
                 "{{ 3 > 2 > 2 }}{{ 'b' not in 'abc' }}{{ 'k' in {'k': 1} }}"),
            "FalseTrueTrueFalsedveTrueFalseFalseTrue");
  json extra = {
      {"items", json::array({{{"role", "user"}, {"n", 2}}, {{"role", "tool"}, {"n", 1}}})}};
  EXPECT_EQ(eval("{{ items|map(attribute='role')|join(',') }}|"
                 "{{ items|selectattr('role','equalto','user')|list|length }}|"
                 "{{ items|rejectattr('role','eq','user')|map(attribute='n')|list }}|"
                 "{{ [3,1,2]|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ [1,1,2]|unique|list }}|"
                 "{{ items|first }}",
                 extra),
            "user,tool|1|[1]|[1, 2, 3][3, 2, 1][1, 2]|{'role': 'user', 'n': 2}");
  EXPECT_EQ(
      eval("{{ 'yes' if 1 else 'no' }}{{ 'x' if false }}{{ '\\u00e9\\x41\\n' }}{{ \"it's\" }}"),
      "yes\xc3\xa9"
      "A\nit's");
}

TEST(ChatTemplateJinja, ToJsonLikeTransformers) {
  json extra = {{"t", json::parse(R"({"b": [1, 2.5, null, true], "a": "x\"y\n", "u": "é"})")}};
  EXPECT_EQ(eval("{{ t|tojson }}", extra),
            "{\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\\n\", \"u\": \"é\"}");
  EXPECT_EQ(eval("{{ t.b|tojson(indent=2) }}", extra), "[\n  1,\n  2.5,\n  null,\n  true\n]");
}

TEST(ChatTemplateErrors, NameTheUnsupportedConstruct) {
  EXPECT_EQ(error_of("line1\n{% include 'x.jinja' %}"),
            "chat template: unsupported statement 'include' at line 2");
  EXPECT_EQ(error_of("{% call foo() %}{% endcall %}"),
            "chat template: unsupported statement 'call' at line 1");
  EXPECT_EQ(error_of("{{ 'x'|frobnicate }}"),
            "chat template: unsupported filter 'frobnicate' at line 1");
  EXPECT_EQ(error_of("{{ 1 is prime }}"), "chat template: unsupported test 'prime' at line 1");
  EXPECT_EQ(error_of("{{ 'x'.zfill(3) }}"),
            "chat template: unsupported method 'zfill' of string at line 1");
  EXPECT_EQ(error_of("{% for x in y %}"), "chat template: missing {% endfor %} at line 1");
  EXPECT_EQ(error_of("{{ 'abc }}"), "chat template: unterminated string literal at line 1");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "chat template: unsupported operand types for +: string and int at line 1");
  EXPECT_EQ(error_of("{{ raise_exception('bad roles') }}"), "chat template raised: bad roles");
  EXPECT_EQ(error_of("{{ [].append(1) }}"),
            "chat template: unsupported method 'append' (lists are immutable in chat templates) at "
            "line 1");
}

TEST(ChatTemplateErrors, EndlessRecursionAndDeepNestingAreErrors) {
  // Found by tests/fuzz/fuzz_chat_template (corpus regress-macro-recursion): a macro calling itself
  // overflowed the stack, as did very deep nesting of expressions or blocks (parser, evaluator and
  // the tree's destructor all recurse).
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
            "chat template: macro 'f' nested more than 64 calls deep (endless recursion?) at "
            "line 1");
  // Bounded recursion still works.
  EXPECT_EQ(eval("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                 "{{ f(5) }}"),
            "54321");
  const auto rep = [](const std::string& s, int n) {
    std::string o;
    for (int i = 0; i < n; ++i) o += s;
    return o;
  };
  for (const std::string& tpl :
       {"{{ " + rep("(", 5000) + "1" + rep(")", 5000) + " }}", "{{ 1" + rep(" + 1", 20000) + " }}",
        "{{ " + rep("not ", 20000) + "1 }}", "{{ " + rep("-", 20000) + "1 }}",
        "{{ x" + rep(".a", 20000) + " }}", "{{ x" + rep("|trim", 20000) + " }}",
        "{{ " + rep("[", 5000) + rep("]", 5000) + " }}",
        rep("{% if 1 %}", 5000) + "x" + rep("{% endif %}", 5000)}) {
    EXPECT_THAT(error_of(tpl), ::testing::HasSubstr("levels deep at line 1")) << tpl.substr(0, 40);
  }
  // Real nesting depths are far below the limit.
  EXPECT_EQ(eval("{{ " + rep("(", 50) + "1" + rep(")", 50) + " }}"), "1");
  EXPECT_EQ(eval(rep("{% if 1 %}", 50) + "x" + rep("{% endif %}", 50)), "x");
}

TEST(ChatTemplateErrors, MacroCallsCannotStackTheNestingLimits) {
  // A review of the fuzz work: the parser bounds one template's nesting and the evaluator bounds
  // macro calls, but the two multiplied (64 calls x 200 blocks x 200 expression levels could
  // exhaust the stack). One counter now bounds the evaluator's recursion as a whole. Each call of
  // m() below is 40 levels deep, so 30 calls pass 1000 levels (the fix's limit) well before the
  // 64-call macro limit; the ASan build checks that reaching the limit does not overflow the stack.
  std::string ifs, endifs;
  for (int i = 0; i < 39; ++i) ifs += "{% if n > 0 %}", endifs += "{% endif %}";
  const std::string m = "{% macro m(n) %}" + ifs + "{{ m(n - 1) }}" + endifs + "{% endmacro %}";
  EXPECT_THAT(error_of(m + "{{ m(30) }}"),
              ::testing::HasSubstr("nested more than 1000 levels deep (counting macro calls)"));
  EXPECT_EQ(eval(m + "{{ m(10) }}x"), "x");  // 10 calls: about 400 levels
  // The same with expressions: 39 nested list displays around each call.
  const std::string l = "{% macro l(n) %}{% if n > 0 %}{{ " + std::string(39, '[') + "l(n - 1)" +
                        std::string(39, ']') + " }}{% endif %}{% endmacro %}";
  EXPECT_THAT(error_of(l + "{{ l(30) }}"),
              ::testing::HasSubstr("nested more than 1000 levels deep (counting macro calls)"));
  EXPECT_EQ(eval(l + "{{ l(1) }}"), std::string(39, '[') + "''" + std::string(39, ']'));
}

TEST(ChatTemplateErrors, NamespacesThatHoldThemselvesOrLongChains) {
  // A review of the fuzz work. A namespace stored in itself was a shared_ptr cycle (a leak per
  // render: LeakSanitizer reports it in the ASan build) and printing it recursed without end.
  EXPECT_EQ(eval("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.a }}"
                 "{{ ns == ns.me }}"),
            "1True");
  EXPECT_THAT(error_of("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}"),
              ::testing::HasSubstr("a value nested more than 512 levels deep to print"));
  EXPECT_THAT(error_of("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns|tojson }}"),
              ::testing::HasSubstr("a value nested more than 512 levels deep to print"));
  // A loop deepened a list without bound (its destructor then recursed as deep as the loop ran).
  EXPECT_THAT(error_of("{% set ns = namespace(a=[]) %}{% for i in range(100000) %}"
                       "{% set ns.a = [ns.a] %}{% endfor %}"),
              ::testing::HasSubstr("value assigned to 'ns.a' nested more than 256 levels deep"));
  EXPECT_EQ(eval("{% set ns = namespace(a=[]) %}{% for i in range(3) %}{% set ns.a = [ns.a] %}"
                 "{% endfor %}{{ ns.a }}"),
            "[[[[]]]]");
  // A chain of 50,000 namespaces built head first: destroying its head recursed 50,000 levels.
  EXPECT_EQ(eval("{% set st = namespace(cur=namespace()) %}{% set head = st.cur %}"
                 "{% for i in range(50000) %}{% set nxt = namespace() %}{% set c = st.cur %}"
                 "{% set c.x = nxt %}{% set st.cur = nxt %}{% endfor %}{{ head.x.x.x is defined }}"),
            "True");
}

TEST(ChatTemplateErrors, RunawayTemplatesAreErrorsNotHangsOrOutOfMemory) {
  // fuzz_chat_template on 16 cores (regress-nested-loops-timeout): nested loops ran past the
  // 30 s timeout. A render now has a work budget (ChatTemplateInputs::max_work) and size limits.
  EXPECT_THAT(error_of("{% for i in range(1500) %}{% for j in range(1500) %}x{% endfor %}"
                       "{% endfor %}"),
              ::testing::HasSubstr("needs more than 1048576 steps of work"));
  EXPECT_THAT(error_of("{% for i in range(1000000) %}{% for j in [] %}{% endfor %}{% endfor %}"),
              ::testing::HasSubstr("steps of work"));
  // The budget is the caller's: the same loop within a larger one, or past a smaller one.
  {
    ChatTemplate t("{% for i in range(1000) %}{{ i % 10 }}{% endfor %}");
    ChatTemplateInputs in;
    EXPECT_EQ(t.render(in).size(), 1000u);
    in.max_work = 1000;
    EXPECT_THAT(error_of_render(t, in), ::testing::HasSubstr("needs more than 1000 steps of work"));
  }
  // A filter fed its own output: repr doubles the backslashes each time (fuzz_chat_template, an
  // hour on the VM: out-of-memory; regress-repr-growth).
  EXPECT_THAT(error_of("{% set ns = namespace(a=[]) %}{% for i in range(3000) %}"
                       "{% set ns.a = [ns.a]|title %}{% endfor %}{{ ns.a|length }}"),
              ::testing::HasSubstr("would be longer than 16777216 bytes"));
  // Exponential fan-out through recursion.
  EXPECT_THAT(error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                       "{% endmacro %}{{ f(40) }}"),
              ::testing::HasSubstr("steps of work"));
  // Strings and lists that would not fit in memory, made by one filter or operator.
  EXPECT_THAT(error_of("{{ 'x'|indent(1000000000000) }}"),
              ::testing::HasSubstr("the indent width would be longer than 16777216 bytes"));
  EXPECT_THAT(error_of("{{ ('a' * 4096)|replace('a', 'b' * 8192) }}"),
              ::testing::HasSubstr("the result of replace would be longer than 16777216 bytes"));
  EXPECT_THAT(error_of("{{ [1, 2]|tojson(indent=1000000000) }}"),
              ::testing::HasSubstr("tojson indent must be in [0, 1024]"));
  EXPECT_THAT(error_of("{{ ([0] * 1048576 + [1])|length }}"),
              ::testing::HasSubstr("the result of + would be longer than 1048576 items"));
  EXPECT_THAT(error_of("{% set s = 'x' * 16000000 %}{{ s ~ s }}"),
              ::testing::HasSubstr("the result of ~ would be longer than 16777216 bytes"));
  EXPECT_THAT(error_of("{% set s = 'x' * 16000000 %}{{ s }}{{ s }}"),
              ::testing::HasSubstr("the rendered text would be longer than 16777216 bytes"));
  EXPECT_THAT(error_of("{% for c in 'x' * 2000000 %}{% endfor %}"),
              ::testing::HasSubstr("the list of a string's characters would be longer"));
  // Shared parts: 64 doublings make a value of 2^64 paths through 65 lists. Storing it is cheap
  // (each list is measured once); printing and comparing it stop at the walk limit, and < walks
  // each level once (it compared a < b and then b < a at every level: 2^depth steps).
  EXPECT_EQ(eval("{% set ns = namespace(x=0) %}{% for i in range(64) %}"
                 "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x|length }}"),
            "2");
  EXPECT_THAT(error_of("{% set ns = namespace(x=0) %}{% for i in range(64) %}"
                       "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}"),
              ::testing::HasSubstr("too large to print or compare"));
  EXPECT_EQ(eval("{% set ns = namespace(a=0, b=0) %}{% for i in range(200) %}"
                 "{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}{% endfor %}"
                 "{{ ns.a < ns.b }}{{ ns.a <= ns.b }}{{ ns.a == ns.b }}"),
            "FalseTrueTrue");
  // Deep values built around the namespace attribute check (a second review).
  EXPECT_THAT(error_of("{% set st = namespace(cur=namespace(a=0)) %}{% for i in range(300) %}"
                       "{% set st.cur = namespace(a=[st.cur.a]) %}{% endfor %}"),
              ::testing::HasSubstr("value assigned to 'namespace(a=...)' nested more than 256"));
  std::string sets;
  for (int i = 0; i < 300; ++i) sets += "{% set x = [x] %}";
  EXPECT_THAT(error_of("{% set x = 0 %}" + sets),
              ::testing::HasSubstr("value assigned to 'x' nested more than 256 levels deep"));
  // Python's order for lists: the first unequal items decide.
  EXPECT_EQ(eval("{{ [1, 2] < [1, 3] }}{{ [1, [2]] < [1, [2], 0] }}{{ [2] < [1, 9] }}"),
            "TrueTrueFalse");
}

TEST(ChatTemplateErrors, IntegerOverflowAndHugeRepetitionsAreErrors) {
  // Found in review of the fuzz work: int64 arithmetic overflowed (UB: UBSan aborts), INT64_MIN
  // // -1 trapped (SIGFPE), 2 ** 10**13 looped 10^13 times and 'x' * 10**12 ran out of memory.
  for (const char* tpl :
       {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
        "{{ 4294967296 * 4294967296 }}", "{{ 2 ** 10000000000000 }}", "{{ 3 ** 40 }}",
        "{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}"}) {
    EXPECT_THAT(error_of(tpl), ::testing::HasSubstr("integer overflow")) << tpl;
  }
  EXPECT_THAT(error_of("{{ 'x' * 1000000000000 }}"), ::testing::HasSubstr("too large"));
  EXPECT_THAT(error_of("{{ [1, 2] * 100000000 }}"), ::testing::HasSubstr("too large"));
  // In range, Python's answers.
  EXPECT_EQ(eval("{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 1 ** 10000000000000 }}|{{ (-1) ** 7 }}"),
            "4611686018427387904|-9223372036854775808|1|-1");
  EXPECT_EQ(eval("{{ (-9223372036854775807 - 1) % -1 }}|{{ 7 // -1 }}|{{ -7 // 2 }}|{{ -7 % 2 }}"),
            "0|-7|-4|1");
  EXPECT_EQ(eval("{{ 'ab' * 3 }}|{{ range(9223372036854775806, 9223372036854775807, 5)|list }}"),
            "ababab|[9223372036854775806]");
}

TEST(ChatTemplateLoad, BuiltinNamesJsonAndJinjaFiles) {
  EXPECT_EQ(load_chat_template("chatml"), builtin_chat_template("chatml"));
  EXPECT_THROW(load_chat_template("/nonexistent/template.jinja"), Error);
  std::string dir = ::testing::TempDir();
  {
    std::string p = dir + "/perfx_ct_test.jinja";
    FILE* f = std::fopen(p.c_str(), "w");
    std::fputs("{{ messages|length }}", f);
    std::fclose(f);
    EXPECT_EQ(load_chat_template(p), "{{ messages|length }}");
  }
  {
    std::string p = dir + "/perfx_ct_test.json";
    FILE* f = std::fopen(p.c_str(), "w");
    std::fputs(R"({"chat_template": [{"name": "tool_use", "template": "T"},
                   {"name": "default", "template": "D"}]})",
               f);
    std::fclose(f);
    EXPECT_EQ(load_chat_template(p), "D");
  }
}

}  // namespace
}  // namespace perfx
