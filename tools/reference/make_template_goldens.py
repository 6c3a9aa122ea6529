#!/usr/bin/env python3
"""Render every chat template in tests/data/templates over a set of conversations with transformers' own
rendering path and write tests/data/templates/goldens.json.

The path mirrors PreTrainedTokenizerBase.apply_chat_template(tokenize=False) without needing a tokenizer:
  1. transformers.utils.chat_template_utils._normalize_chat_messages (drops None-valued message keys),
  2. template kwargs = {special tokens (bos_token, eos_token, ...), **kwargs},
  3. transformers.utils.chat_template_utils.render_jinja_template (its own sandboxed jinja2 environment:
     trim_blocks, lstrip_blocks, loopcontrols, json.dumps-based tojson, raise_exception, strftime_now, namespace).
strftime_now is pinned to FIXED_NOW so the goldens are reproducible. A render that raises is recorded as
{"error": "<message>"}; the C++ interpreter must fail on the same inputs.

Requirements: transformers (5.x), jinja2>=3.1.6 (see tools/reference/requirements.txt).
Usage: python3 tools/reference/make_template_goldens.py [--out tests/data/templates/goldens.json]
"""
import argparse
import datetime as _dt
import json
import pathlib

import transformers
from transformers.utils import chat_template_utils as ctu

FIXED_NOW = _dt.datetime(2026, 1, 15, 9, 30, 0)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads the module-level name at call time

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE_DIR = ROOT / "tests" / "data" / "templates"

KIMI_TOKENS = {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]"}
DEEPSEEK_TOKENS = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>",
                   "pad_token": "<｜end▁of▁sentence｜>"}
TEMPLATES = {
    "moonshotai-Kimi-K2": KIMI_TOKENS,
    "moonshotai-Kimi-K2-Thinking": KIMI_TOKENS,
    "moonshotai-Kimi-K3": KIMI_TOKENS,
    "deepseek-ai-DeepSeek-V3": DEEPSEEK_TOKENS,
    "deepseek-ai-DeepSeek-V3.1": DEEPSEEK_TOKENS,
    "Qwen-Qwen3-0.6B": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns ranked results.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "number", "default": 3.5},
                           "safe": {"type": "boolean"}},
            "required": ["query"],
        },
    },
}


def tool_call(name, args, call_id, as_string):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def conversations():
    sys = {"role": "system", "content": "You are a careful assistant."}
    u1 = {"role": "user", "content": "What is 2 + 2?"}
    a1 = {"role": "assistant", "content": "2 + 2 = 4."}
    u2 = {"role": "user", "content": "And times 3?"}
    unicode_user = {"role": "user", "content": "Übersetze: 你好，世界 🌍 — \"quotes\", 'apostrophes', back\\slash\n\tnew line <tag> & {{ not jinja }}"}
    cases = []

    def add(name, messages, tools=None, kwargs=None, agp_values=(False, True)):
        for agp in agp_values:
            cases.append({"case": f"{name}/agp={int(agp)}", "messages": messages, "tools": tools,
                          "add_generation_prompt": agp, "kwargs": kwargs or {}})

    add("single_user", [u1])
    add("system_user", [sys, u1])
    add("multi_turn", [sys, u1, a1, u2])
    add("two_systems", [sys, {"role": "system", "content": "Answer briefly."}, u1])
    add("unicode", [sys, unicode_user, {"role": "assistant", "content": "Hallo, Welt 🌍 — «ok»"}, u2])
    add("tools_declared", [sys, {"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL, SEARCH_TOOL])
    for as_string in (True, False):
        tag = "str" if as_string else "dict"
        calls = [tool_call("get_weather", {"city": "Paris", "unit": "celsius"}, "functions.get_weather:0", as_string),
                 tool_call("search", {"query": "Paris événements", "top_k": 2}, "functions.search:1", as_string)]
        add(f"tool_round_trip_{tag}", [
            sys, {"role": "user", "content": "Weather in Paris, and events?"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather",
             "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
            {"role": "tool", "tool_call_id": "functions.search:1", "name": "search", "content": "1. Fête de la musique"},
            {"role": "assistant", "content": "It is 21 °C and clear; the Fête de la musique is on."},
        ], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tool_call_no_content", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("get_weather", {"city": "Oslo"}, "functions.get_weather:0", True)]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather", "content": "-3 C"},
    ], tools=[WEATHER_TOOL])
    add("reasoning", [
        sys, u1,
        {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two gives four."},
        u2,
    ])
    add("reasoning_last", [
        u1, {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "Simple sum.\nDone."},
    ], agp_values=(False,))
    add("content_parts", [
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
    ])
    add("thinking_on", [sys, u1], kwargs={"thinking": True, "enable_thinking": True, "reasoning_effort": "high"})
    add("thinking_off", [sys, u1, a1, u2], kwargs={"thinking": False, "enable_thinking": False,
                                                    "reasoning_effort": "low"})
    add("extra_kwargs", [u1], kwargs={"tool_choice": "required", "thinking_effort": "low",
                                      "model_identity": "You are a test model.", "builtin_tools": ["browser"]})
    add("assistant_prefix_think", [u1, {"role": "assistant", "content": "<think>hmm</think>Four."}, u2])
    return cases


def render(template, tokens, case):
    chat = ctu._normalize_chat_messages(json.loads(json.dumps(case["messages"])))
    kwargs = {**tokens, **case["kwargs"]}
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[chat], tools=case["tools"], chat_template=template,
            add_generation_prompt=case["add_generation_prompt"], **kwargs)
        return {"output": rendered[0]}
    except Exception as exc:  # recorded: the C++ side must fail on the same input
        return {"error": f"{type(exc).__name__}: {exc}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(TEMPLATE_DIR / "goldens.json"))
    args = ap.parse_args()
    goldens = []
    for name, tokens in TEMPLATES.items():
        template = (TEMPLATE_DIR / f"{name}.jinja").read_text(encoding="utf-8")
        for case in conversations():
            entry = {"template": name, "case": case["case"], "special_tokens": tokens, "messages": case["messages"],
                     "tools": case["tools"], "add_generation_prompt": case["add_generation_prompt"],
                     "kwargs": case["kwargs"]}
            entry.update(render(template, tokens, case))
            goldens.append(entry)
    doc = {"generator": "tools/reference/make_template_goldens.py", "transformers": transformers.__version__,
           "fixed_now": FIXED_NOW.isoformat(), "goldens": goldens}
    pathlib.Path(args.out).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in g for g in goldens)
    print(f"wrote {len(goldens)} goldens ({errors} expected errors) to {args.out}")


if __name__ == "__main__":
    main()
