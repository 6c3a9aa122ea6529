#!/usr/bin/env python3
"""What evaluation harnesses use, through the official `openai` client against `sluice serve` (a small synthesized
model): /v1/completions with echo and logprobs scoring the prompt (token_logprobs equal log_softmax of `sluice logits`,
null first, top_logprobs dicts, text_offset), token-id and list-of-lists prompts as choices in index order,
max_tokens 0, many prompts scored in one forward pass, the tokenizer routes (/tokenizer_info, /tokenize,
/detokenize in vLLM's shapes), and bad input as a 400 naming the field.

Usage: test_eval_endpoints.py --sluice PATH_TO_SLUICE
Exits 77 (CTest's skip code) when the openai package is not installed (scripts/python-env.sh installs it).
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util as su  # noqa: E402

openai = su.require("openai")
from test_openai_client import KEY, start_synth_server  # noqa: E402  (the same server flags: --parallel 4)

SLUICE = MODEL = ROOT = TMP = None


def client():
    return openai.OpenAI(base_url=ROOT + "/v1", api_key=KEY, max_retries=0, timeout=120)


def post(path, body):
    req = urllib.request.Request(ROOT + path, method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    try:
        return 200, json.loads(urllib.request.urlopen(req, timeout=60).read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(path):
    req = urllib.request.Request(ROOT + path, headers={"Authorization": "Bearer " + KEY})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


def read_npy_f32(path):
    """float32 [n, V] .npy as a list of rows (the header is a Python dict literal; no numpy needed)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY"
    hlen = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack("<I", data[8:12])[0]
    start = (10 if data[6] == 1 else 12) + hlen
    header = eval(data[start - hlen:start].decode("latin1"))  # noqa: S307 -- our own CLI's file
    assert header["descr"] == "<f4" and not header["fortran_order"]
    n, v = header["shape"]
    flat = struct.unpack(f"<{n * v}f", data[start:start + 4 * n * v])
    return [flat[i * v:(i + 1) * v] for i in range(n)]


def cli_logprobs(ids):
    """log_softmax of `sluice logits` rows: entry i is log p(ids[i] | ids[:i]) (None for i = 0)."""
    out = os.path.join(TMP, "logits.npy")
    subprocess.run([SLUICE, "logits", "-m", MODEL, "--ids", ",".join(map(str, ids)), "-o", out, "--threads", "1"],
                   check=True, capture_output=True)
    rows = read_npy_f32(out)
    res = [None]
    for i in range(1, len(ids)):
        row = rows[i - 1]
        mx = max(row)
        lse = mx + math.log(sum(math.exp(x - mx) for x in row))
        res.append(row[ids[i]] - lse)
    return res


def metric(name):
    text = urllib.request.urlopen(urllib.request.Request(ROOT + "/metrics", headers={"Authorization": "Bearer " + KEY}),
                                  timeout=30).read().decode()
    return float(next(l.split(" ")[1] for l in text.splitlines() if l.startswith(name + " ")))


class EvalEndpointsTest(unittest.TestCase):
    def test_echo_logprobs_equal_sluice_logits(self):
        prompts = [[1, 40, 41, 300, 7, 99], [5, 5, 5], [200, 17]]
        r = client().completions.create(model="m", prompt=prompts, echo=True, logprobs=2, max_tokens=1,
                                        temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        for c, ids in zip(r.choices, prompts):
            lp = c.logprobs
            self.assertEqual(len(lp.tokens), len(ids) + 1)  # the prompt, then one generated token
            self.assertIsNone(lp.token_logprobs[0])
            self.assertIsNone(lp.top_logprobs[0])
            want = cli_logprobs(ids)
            for i in range(1, len(ids)):
                self.assertAlmostEqual(lp.token_logprobs[i], want[i], delta=1e-6, msg=f"{ids} token {i}")
                top = lp.top_logprobs[i]
                self.assertLessEqual(len(top), 3)  # logprobs 2 plus the prompt's own token
                self.assertIn(lp.tokens[i], top)
            self.assertEqual(lp.text_offset[0], 0)
            self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        self.assertEqual(r.usage.prompt_tokens, sum(len(p) for p in prompts))
        self.assertEqual(r.usage.completion_tokens, 3)

    def test_text_prompts_and_max_tokens_zero(self):
        r = client().completions.create(model="m", prompt=["Once upon a time", "The sea"], echo=True, logprobs=0,
                                        max_tokens=0)
        self.assertEqual([c.text for c in r.choices], ["Once upon a time", "The sea"])
        self.assertEqual([c.finish_reason for c in r.choices], ["length", "length"])
        self.assertEqual(r.usage.completion_tokens, 0)
        ids = post("/tokenize", {"prompt": "The sea"})[1]["tokens"]  # as the completion encodes it (BOS added)
        self.assertEqual(len(r.choices[1].logprobs.tokens), len(ids))
        want = cli_logprobs(ids)
        for i in range(1, len(ids)):
            self.assertAlmostEqual(r.choices[1].logprobs.token_logprobs[i], want[i], delta=1e-6)
        # several prompts without echo: each choice is that prompt's greedy completion alone
        both = client().completions.create(model="m", prompt=[[1, 2, 3], [4, 5]], max_tokens=5, temperature=0)
        for c, p in zip(both.choices, [[1, 2, 3], [4, 5]]):
            alone = client().completions.create(model="m", prompt=p, max_tokens=5, temperature=0)
            self.assertEqual(c.text, alone.choices[0].text)

    def test_streamed_echo_adds_up_to_whole(self):
        body = dict(model="m", prompt=[[1, 40, 41, 300], [5, 6]], echo=True, logprobs=1, max_tokens=4, temperature=0)
        whole = client().completions.create(**body)
        text, offsets, lps = {}, {}, {}
        for chunk in client().completions.create(stream=True, **body):
            for c in chunk.choices:
                text[c.index] = text.get(c.index, "") + c.text
                if c.logprobs:
                    offsets.setdefault(c.index, []).extend(c.logprobs.text_offset)
                    lps.setdefault(c.index, []).extend(c.logprobs.token_logprobs)
        for c in whole.choices:
            self.assertEqual(text[c.index], c.text)
            self.assertEqual(offsets[c.index], c.logprobs.text_offset)
            self.assertEqual(lps[c.index], c.logprobs.token_logprobs)

    def test_prompts_scored_in_one_pass(self):
        before = metric("sluice_forward_passes_total")
        r = client().completions.create(model="m", prompt=[[1, 2 + k, 3, 4] for k in range(4)], echo=True,
                                        logprobs=0, max_tokens=0)
        self.assertEqual(len(r.choices), 4)
        for _ in range(100):  # the pass is counted just after its tokens went out
            if metric("sluice_forward_passes_total") > before:
                break
            time.sleep(0.02)
        time.sleep(0.1)
        # the server runs 4 sequences at once, and a request's prompts are queued together
        self.assertEqual(metric("sluice_forward_passes_total") - before, 1)

    def test_tokenizer_routes(self):
        info = get("/tokenizer_info")
        self.assertIn("eos_token", info)
        self.assertIn("chat_template", info)
        self.assertGreater(info["model_max_length"], 0)
        code, t = post("/tokenize", {"prompt": "hello world", "add_special_tokens": False})
        self.assertEqual(code, 200)
        self.assertEqual(t["count"], len(t["tokens"]))
        code, d = post("/detokenize", {"tokens": t["tokens"]})
        self.assertEqual(d["prompt"], "hello world")
        self.assertEqual(d["content"], "hello world")
        code, t2 = post("/tokenize", {"content": "hello world"})  # llama.cpp's shape
        self.assertEqual(t2["tokens"], t["tokens"])
        if info["eos_token"] is not None:  # lm-eval reads eos_token_id as /tokenize of eos_token
            self.assertEqual(post("/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})[1]["tokens"],
                             [info["eos_token_id"]])

    def test_bad_input(self):
        vocab = client().models.list().data[0].model_extra["meta"]["vocab_size"]
        cases = [
            (dict(prompt=[[1, 2], [vocab, 3]], echo=True, logprobs=1, max_tokens=1), "prompt[1][0]"),
            (dict(prompt=[[1, 2], "text"]), "prompt[1]"),
            (dict(prompt=[[1], []]), "prompt[1]"),
            (dict(prompt=[1, 2], max_tokens=-1), "max_tokens"),
            (dict(prompt=[1, 2], logprobs=6, echo=True), "logprobs"),
        ]
        for kw, param in cases:
            with self.assertRaises(openai.BadRequestError, msg=str(kw)) as e:
                client().completions.create(model="m", **kw)
            self.assertEqual(e.exception.body.get("param"), param, kw)
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                             extra_body={"echo": True})
        self.assertEqual(e.exception.body.get("param"), "echo")
        code, err = post("/detokenize", {"tokens": [1, vocab + 5]})
        self.assertEqual((code, err["error"]["param"]), (400, "tokens[1]"))
        code, err = post("/tokenize", {"prompt": 5})
        self.assertEqual((code, err["error"]["param"]), (400, "prompt"))


def main():
    global SLUICE, MODEL, ROOT, TMP
    SLUICE, rest = su.sluice_args()
    with tempfile.TemporaryDirectory(prefix="sluice-eval-") as tmp:
        TMP = tmp
        MODEL, server, port = start_synth_server(SLUICE, tmp)
        ROOT = f"http://127.0.0.1:{port}"
        try:
            result = su.run_tests(rest)
        finally:
            server.terminate()
            server.wait(timeout=30)
        su.exit_with(result)


if __name__ == "__main__":
    main()
