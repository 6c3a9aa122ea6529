#!/usr/bin/env python3
"""Tool calls in each of the four syntaxes the server parses, end to end through the official `openai` client:
small synthesized models (sluice synth: Kimi K3's architecture for its syntax, Kimi K2's for the others) that carry
the family's real chat template (tests/data/templates) and its marker tokens as special tokens, so that the server
picks that family's syntax. Random weights do not call tools by themselves, so tool_choice "required" or a named
function makes the model write a call (the constraint forces the syntax and the arguments' schema).

Checks per family: the call comes back as message.tool_calls (finish_reason "tool_calls", content null) with
arguments that match the parameters; streamed, the deltas are in OpenAI's shape (a call's first delta has index,
id, type and name; later ones only the index and a fragment), the arguments arrive in several chunks while they are
generated, and the accumulated stream equals the non-streamed answer exactly. With tool_choice "auto" and no call,
content is streamed as it comes (several chunks) and adds up to the non-streamed content.

Usage: test_tool_syntaxes.py --sluice PATH_TO_SLUICE
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

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "templates")
KEY = "sk-tools"
# family: (synth layout, template, marker tokens made special, chat_template_kwargs for an answer in the content)
FAMILIES = {
    "hermes": ("kimi-k2", "Qwen-Qwen3-0.6B.jinja", [], {"enable_thinking": False}),
    "kimi": ("kimi-k2", "moonshotai-Kimi-K2.jinja",
             ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>"], {}),
    "kimi_k3": ("kimi-k3", "moonshotai-Kimi-K3.jinja", ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
                {"thinking": False}),
    "harmony": ("kimi-k2", "openai-gpt-oss-120b.jinja",
                ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"], {}),
}
NOTE = {"type": "function", "function": {
    "name": "write_note", "description": "Write a note",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["title", "body"],
                   "properties": {"title": {"type": "string", "maxLength": 8},
                                  "body": {"type": "string", "minLength": 40, "maxLength": 60}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone",
    "parameters": {"type": "object", "required": ["zone"], "additionalProperties": False,
                                       "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}}}}}
MESSAGES = [{"role": "user", "content": "Write a note about the sea."}]
SLUICE = TMP = None


def make_model(family):
    like, template, markers, _ = FAMILIES[family]
    d = os.path.join(TMP, family)
    subprocess.run([SLUICE, "synth", "--like", like, "--layers", "2", "--experts", "8", "--scale-down", "32",
                    "--vocab-size", "1024", "--no-sync", "-o", d], check=True, capture_output=True)
    with open(os.path.join(d, "tokenizer.json")) as f:
        tok = json.load(f)
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    next_id = 1 + max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"]))
    for i, m in enumerate(markers):
        entry = {"content": m, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True}
        tok["added_tokens"].append(dict(entry, id=next_id + i))
        cfg["added_tokens_decoder"][str(next_id + i)] = entry
    cfg.pop("chat_template", None)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(TEMPLATES, template)) as src, open(os.path.join(d, "chat_template.jinja"), "w") as dst:
        dst.write(src.read())
    return d


def accumulate(stream):
    """The streamed chunks as one message, checking the shape of each tool-call delta."""
    content, calls, finish, arg_chunks, content_chunks = "", [], None, 0, 0
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if d.content:
            content += d.content
            content_chunks += 1
        for tc in d.tool_calls or []:
            if tc.index == len(calls):  # a new call: index, id, type and name, arguments ""
                assert tc.id and tc.type == "function" and tc.function.name, tc
                assert tc.function.arguments == "", tc
                calls.append({"id": tc.id, "name": tc.function.name, "arguments": ""})
            else:
                assert tc.index == len(calls) - 1, tc
                assert tc.id is None and tc.type is None and tc.function.name is None, tc
                assert tc.function.arguments, tc
                calls[tc.index]["arguments"] += tc.function.arguments
                arg_chunks += 1
        finish = chunk.choices[0].finish_reason or finish
    return content, calls, finish, arg_chunks, content_chunks


class Family:
    """One server per family; the tests are made per family below."""

    def __init__(self, family):
        self.family = family
        self.server, port = su.start_server(SLUICE, make_model(family), ["--api-key", KEY, "--parallel", "2",
                                                                          "--ctx", "8192"],
                                            os.path.join(TMP, family + ".log"))
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=120)

    def create(self, **kw):
        kw.setdefault("max_tokens", 400)
        return self.client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, tools=[NOTE, TIME],
                                                   **kw)

    def stop(self):
        self.server.terminate()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()


class ToolSyntaxTest(unittest.TestCase):
    family = None
    fam = None

    @classmethod
    def setUpClass(cls):
        cls.fam = Family(cls.family)

    @classmethod
    def tearDownClass(cls):
        cls.fam.stop()

    def check_forced(self, tool_choice, extra):
        whole = self.fam.create(tool_choice=tool_choice, extra_body=extra)
        ch = whole.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls", ch)
        self.assertIsNone(ch.message.content)
        self.assertEqual(len(ch.message.tool_calls), 1)
        call = ch.message.tool_calls[0]
        self.assertEqual(call.type, "function")
        if self.family == "kimi":
            self.assertEqual(call.id, f"functions.{call.function.name}:0")
        else:
            self.assertTrue(call.id.startswith("call_"), call.id)
        args = json.loads(call.function.arguments)
        if call.function.name == "write_note":
            self.assertEqual(set(args), {"title", "body"})
            self.assertLessEqual(len(args["title"]), 8)
            self.assertTrue(40 <= len(args["body"]) <= 60, args)
        else:
            self.assertEqual(call.function.name, "get_time")
            self.assertIsInstance(args["zone"], int)
            self.assertTrue(-12 <= args["zone"] <= 14, args)

        content, calls, finish, arg_chunks, _ = accumulate(
            self.fam.create(tool_choice=tool_choice, extra_body=extra, stream=True))
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "")
        self.assertEqual([(c["name"], c["arguments"]) for c in calls],
                         [(call.function.name, call.function.arguments)])
        if self.family == "kimi":
            self.assertEqual(calls[0]["id"], call.id)
        return arg_chunks

    def test_named_call_streams_its_arguments(self):
        named = {"type": "function", "function": {"name": "write_note"}}
        arg_chunks = self.check_forced(named, None)
        self.assertGreater(arg_chunks, 1, "the arguments must arrive in fragments as they are generated")

    def test_required_call(self):
        self.check_forced("required", {"chat_template_kwargs": FAMILIES[self.family][3]} if self.family == "kimi_k3"
                          else None)

    def test_auto_streams_content_as_it_comes(self):
        kw = dict(tool_choice="auto", max_tokens=48, extra_body={"chat_template_kwargs": FAMILIES[self.family][3]})
        whole = self.fam.create(**kw).choices[0]
        content, calls, finish, _, content_chunks = accumulate(self.fam.create(stream=True, **kw))
        self.assertEqual(content, whole.message.content or "")
        self.assertEqual(finish, whole.finish_reason)
        self.assertEqual([(c["name"], c["arguments"]) for c in calls],
                         [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []])
        if self.family != "harmony":  # harmony's content is only its final channel, which random text lacks
            self.assertGreater(len(content), 0)
            self.assertGreater(content_chunks, 1, "content must not wait for the end")


def main():
    global SLUICE, TMP
    SLUICE, _ = su.sluice_args()
    suite = unittest.TestSuite()
    with tempfile.TemporaryDirectory(prefix="sluice-tools-") as tmp:
        TMP = tmp
        for family in FAMILIES:
            cls = type(f"ToolSyntax_{family}", (ToolSyntaxTest,), {"family": family})
            suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(cls))
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
