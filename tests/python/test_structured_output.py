#!/usr/bin/env python3
"""Structured output (response_format json_object / json_schema) and tool calls (tools, tool_choice) through the
official `openai` client against `sluice serve` on the shipped trained model (models/sluice-k2-tiny, its own
vocabulary), and through `sluice batch`. The tiny model's template has no tool syntax, so the server uses the hermes
form (<tool_call>{"name", "arguments"}</tool_call>), and tool_choice "required" / a named function makes even this
model write a valid call.

Checks: chat and completions outputs parse and match the schema (an independent validator below), streamed deltas
add up to the whole answer, sampled choices (n, seed) are instances too, greedy output is the same with and
without speculative drafts, and bad schemas are 400s whose `param` is the path of the keyword in the schema.

Usage: test_structured_output.py --sluice PATH_TO_SLUICE
Exits 77 (CTest's skip code) when the openai package is not installed (scripts/python-env.sh installs it).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util as su  # noqa: E402

openai = su.require("openai")

SLUICE = MODEL = BASE_URL = TMP = None
KEY = "sk-structured"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age", "tags"],
    "properties": {
        "name": {"type": "string", "maxLength": 12},  # the tiny model's strings would otherwise outrun max_tokens
        "age": {"type": "integer"},
        "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["red", "green", "blue"]}},
        "alive": {"type": ["boolean", "null"]},
    },
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


def is_instance(v, s):
    """JSON Schema, the subset the server supports, written from the rules (not from the server's code)."""
    if "enum" in s and v not in s["enum"]:
        return False
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        ok = {"object": isinstance(v, dict), "array": isinstance(v, list), "string": isinstance(v, str),
              "integer": isinstance(v, int) and not isinstance(v, bool),
              "number": isinstance(v, (int, float)) and not isinstance(v, bool),
              "boolean": isinstance(v, bool), "null": v is None}
        if not any(ok[x] for x in types):
            return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        if any(r not in v for r in s.get("required", [])):
            return False
        for k, x in v.items():
            if k in props:
                if not is_instance(x, props[k]):
                    return False
            elif s.get("additionalProperties") is False:
                return False
    if isinstance(v, str) and not s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1 << 30):
        return False
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30):
            return False
        if "items" in s and not all(is_instance(x, s["items"]) for x in v):
            return False
    return True


def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=120)


class StructuredOutputTest(unittest.TestCase):
    def check(self, text, schema=SCHEMA):
        v = json.loads(text)
        self.assertTrue(is_instance(v, schema), text)
        return v

    def test_chat_json_schema(self):
        r = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=0,
                                             response_format=FORMAT)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.check(r.choices[0].message.content)

    def test_stream_adds_up_to_whole(self):
        whole = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=0,
                                                 response_format=FORMAT)
        parts, finish = [], None
        for chunk in client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=0,
                                                      response_format=FORMAT, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        self.assertEqual("".join(parts), whole.choices[0].message.content)
        self.assertEqual(finish, "stop")

    def test_sampled_choices_are_instances(self):
        r = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=1.0, n=4,
                                             seed=5, response_format=FORMAT)
        stopped = 0
        for c in r.choices:
            self.assertIn(c.finish_reason, ("stop", "length"))
            if c.finish_reason == "stop":
                stopped += 1
                self.check(c.message.content)
        self.assertGreaterEqual(stopped, 2)
        again = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=1.0, n=4,
                                                 seed=5, response_format=FORMAT)
        self.assertEqual([c.message.content for c in again.choices], [c.message.content for c in r.choices])

    def test_completions(self):
        r = client().completions.create(model="m", prompt="The record: ", max_tokens=200, temperature=0,
                                        extra_body={"response_format": FORMAT})
        self.assertEqual(r.choices[0].finish_reason, "stop", r.choices[0].text)
        self.check(r.choices[0].text)
        # json_object: any object; the tiny model's keys are long, so only the start is certain within max_tokens
        r = client().completions.create(model="m", prompt="The record: ", max_tokens=200, temperature=0,
                                        extra_body={"response_format": {"type": "json_object"}})
        text = r.choices[0].text
        self.assertTrue(text.lstrip().startswith("{"), text)
        if r.choices[0].finish_reason == "stop":
            self.assertIsInstance(json.loads(text), dict)

    def test_speculation_changes_nothing(self):
        a = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=0,
                                             response_format=FORMAT)
        b = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=200, temperature=0,
                                             response_format=FORMAT, extra_body={"speculative": False})
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)
        # and the mask acts: without it the greedy answer is not JSON
        c = client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=40, temperature=0)
        self.assertNotEqual(c.choices[0].message.content, a.choices[0].message.content)

    def test_bad_schemas_name_the_path(self):
        cases = [
            ({"type": "object", "properties": {"a": {"type": "strin"}}},
             "response_format.json_schema.schema.properties.a.type"),
            ({"type": "array", "minItems": 3, "maxItems": 1}, "response_format.json_schema.schema.minItems"),
            ({"type": "object", "properties": {"s": {"type": "string", "format": "email"}}},
             "response_format.json_schema.schema.properties.s.format"),
            ({"type": "object", "required": ["x"], "properties": {"x": {"$ref": "#"}}},
             "response_format.json_schema.schema"),
        ]
        for schema, param in cases:
            with self.assertRaises(openai.BadRequestError) as e:
                client().chat.completions.create(
                    model="m", messages=MESSAGES, max_tokens=8,
                    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
            self.assertEqual(e.exception.body["param"], param, e.exception.body)
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=8,
                                             response_format={"type": "json_schema", "json_schema": {"schema": {}}})
        self.assertEqual(e.exception.body["param"], "response_format.json_schema.name")
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(model="m", prompt="x", max_tokens=8,
                                        extra_body={"response_format": {"type": "yaml"}})
        self.assertEqual(e.exception.body["param"], "response_format.type")

    def test_batch_lines(self):
        inp, out = os.path.join(TMP, "in.jsonl"), os.path.join(TMP, "out.jsonl")
        bad = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "object", "pattern": "x"}}}
        with open(inp, "w") as f:
            for cid, fmt in (("good", FORMAT), ("bad", bad)):
                f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                    "body": {"model": "m", "messages": MESSAGES, "max_tokens": 200,
                                             "temperature": 0, "response_format": fmt}}) + "\n")
        p = subprocess.run([SLUICE, "batch", "-m", MODEL, "-i", inp, "-o", out, "--continue-on-invalid",
                            "--threads", "2"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            lines = [json.loads(l) for l in f]
        self.assertEqual([l["custom_id"] for l in lines], ["good"])
        self.check(lines[0]["response"]["body"]["choices"][0]["message"]["content"])
        with open(os.path.join(TMP, "out.errors.jsonl")) as f:
            errs = [json.loads(l) for l in f]
        self.assertEqual(errs[0]["custom_id"], "bad")
        self.assertIn("response_format.json_schema.schema.pattern", json.dumps(errs[0]))


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 10},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "required": ["zone"], "additionalProperties": False,
                                       "properties": {"zone": {"type": "integer"}}}}}
TOOL_MESSAGES = [{"role": "user", "content": "What is the weather in Oslo?"}]


class ToolCallTest(unittest.TestCase):
    def call(self, **kw):
        kw.setdefault("max_tokens", 200)
        return client().chat.completions.create(model="m", messages=TOOL_MESSAGES, temperature=0,
                                                tools=[WEATHER, TIME], **kw)

    def check_call(self, c, tool):
        self.assertEqual(c.type, "function")
        self.assertTrue(c.id.startswith("call_"), c.id)
        self.assertEqual(c.function.name, tool["function"]["name"])
        args = json.loads(c.function.arguments)
        self.assertTrue(is_instance(args, tool["function"]["parameters"]), c.function.arguments)

    def test_required(self):
        r = self.call(tool_choice="required")
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertIsNone(ch.message.content)
        self.assertEqual(len(ch.message.tool_calls), 1)
        tool = WEATHER if ch.message.tool_calls[0].function.name == "get_weather" else TIME
        self.check_call(ch.message.tool_calls[0], tool)

    def test_named(self):
        for tool in (WEATHER, TIME):
            r = self.call(tool_choice={"type": "function", "function": {"name": tool["function"]["name"]}})
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            self.check_call(r.choices[0].message.tool_calls[0], tool)

    def test_streamed_deltas(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        whole = self.call(tool_choice=named).choices[0].message.tool_calls[0]
        first, args, finish, content = None, "", None, ""
        for chunk in self.call(tool_choice=named, stream=True):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                self.assertEqual(tc.index, 0)
                if first is None:
                    first = tc
                    self.assertEqual(tc.type, "function")
                    self.assertEqual(tc.function.name, "get_weather")
                    self.assertTrue(tc.id.startswith("call_"))
                else:
                    self.assertIsNone(tc.id)
                args += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertIsNotNone(first)
        self.assertEqual(args, whole.function.arguments)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "")

    def test_auto_and_none_answer_in_text(self):
        for choice in ("auto", "none"):
            r = self.call(tool_choice=choice, max_tokens=16)
            self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
            self.assertIsNone(r.choices[0].message.tool_calls)
            self.assertTrue(r.choices[0].message.content)

    def test_bad_tools_name_the_field(self):
        bad_schema = {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "strin"}}}}}
        cases = [
            ({"tools": [bad_schema]}, "tools[0].function.parameters.properties.x.type"),
            ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name"),
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
            ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "tool_choice.function.name"),
            ({"tool_choice": "required"}, "tool_choice"),
        ]
        for extra, param in cases:
            with self.assertRaises(openai.BadRequestError) as e:
                client().chat.completions.create(model="m", messages=TOOL_MESSAGES, max_tokens=8, **extra)
            self.assertEqual(e.exception.body["param"], param, e.exception.body)


def main():
    global SLUICE, MODEL, BASE_URL, TMP
    SLUICE, rest = su.sluice_args()
    MODEL = su.model_dir()
    with tempfile.TemporaryDirectory(prefix="sluice-structured-") as tmp:
        TMP = tmp
        server, port = su.start_server(SLUICE, MODEL, ["--api-key", KEY, "--speculative", "3", "--parallel", "4",
                                                       "--ctx", "4096"], os.path.join(tmp, "server.log"))
        BASE_URL = f"http://127.0.0.1:{port}/v1"
        try:
            result = su.run_tests(rest)
        finally:
            su.stop_server(server)
        su.exit_with(result)


if __name__ == "__main__":
    main()
