#!/usr/bin/env python3
"""The official `openai` Python package against `sluice serve`.

Starts the server on a small synthesized model (sluice synth), then checks through the client what users rely on:
greedy text identical to `sluice generate` (one request alone, no drafts; the server speculates on greedy requests),
prefix reuse (usage.prompt_tokens_details.cached_tokens), streaming deltas that add up to the
non-streamed text, usage, n > 1, seeds, stop sequences, logprobs, concurrent requests each identical to running it
alone, errors raised as the client's typed exceptions (401, 400 naming the field, 404, context length), /metrics.

Usage: test_openai_client.py --sluice PATH_TO_SLUICE [--keep]
Exits 77 (CTest's skip code) when the openai package is not installed (scripts/python-env.sh installs it).
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util as su  # noqa: E402

openai = su.require("openai")

SLUICE = None
MODEL = None
SERVER = None
BASE_URL = None
KEY = "sk-sluice-test"
APP_ORIGIN = "http://app.example:3000"


def generate(prompt, n, chat):
    """The CLI's single-sequence greedy generation: the reference the server must match token for token."""
    cmd = [SLUICE, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--json", "--threads", "1"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def client(key=KEY, **kw):
    return openai.OpenAI(base_url=BASE_URL, api_key=key, max_retries=0, timeout=120, **kw)


class OpenAIClientTest(unittest.TestCase):
    def test_models_list(self):
        models = client().models.list()
        self.assertEqual(len(models.data), 1)
        self.assertEqual(models.data[0].id, "synth-k2")
        self.assertEqual(client().models.retrieve("synth-k2").id, "synth-k2")

    def test_chat_greedy_matches_cli(self):
        ref = generate("Hello there", 12, chat=True)
        r = client().chat.completions.create(
            model="synth-k2", messages=[{"role": "user", "content": "Hello there"}], max_tokens=12, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].message.content, ref["text"])
        self.assertEqual(r.usage.completion_tokens, ref["n_generated"])
        self.assertEqual(r.usage.prompt_tokens, ref["n_prompt"])
        self.assertEqual(r.usage.total_tokens, ref["n_prompt"] + ref["n_generated"])
        self.assertEqual(r.choices[0].finish_reason, "stop" if ref["stop_reason"] == "eos" else "length")

    def test_completions_greedy_matches_cli(self):
        ref = generate("Once upon a time", 10, chat=False)
        r = client().completions.create(model="x", prompt="Once upon a time", max_tokens=10, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].text, ref["text"])
        self.assertEqual(r.usage.completion_tokens, ref["n_generated"])

    def test_stream_adds_up_to_whole(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to five"}]
        whole = client().chat.completions.create(model="m", messages=msgs, max_tokens=16, temperature=0)
        chunks = list(client().chat.completions.create(
            model="m", messages=msgs, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        self.assertGreater(len(chunks), 2)
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, [whole.choices[0].finish_reason])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        for c in chunks[:-1]:
            self.assertIsNone(c.usage)

    def test_completions_stream(self):
        whole = client().completions.create(model="m", prompt="The sea", max_tokens=9, temperature=0)
        text = "".join(c.choices[0].text for c in client().completions.create(
            model="m", prompt="The sea", max_tokens=9, temperature=0, stream=True) if c.choices)
        self.assertEqual(text, whole.choices[0].text)

    def test_n_and_seed(self):
        kw = dict(model="m", messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=12,
                  temperature=1.0, n=3, seed=7)
        a = client().chat.completions.create(**kw)
        b = client().chat.completions.create(**kw)
        self.assertEqual([c.index for c in a.choices], [0, 1, 2])
        self.assertEqual([c.message.content for c in a.choices], [c.message.content for c in b.choices])
        self.assertGreaterEqual(a.usage.completion_tokens, 3)  # every choice's tokens are counted
        self.assertLessEqual(a.usage.completion_tokens, 36)
        # choices draw with seeds 7, 8, 9: with a random-weight model over ~260 ids they differ
        self.assertGreater(len({c.message.content for c in a.choices}), 1)
        c = client().chat.completions.create(**{**kw, "seed": 8, "n": 1})
        self.assertEqual(c.choices[0].message.content, a.choices[1].message.content)

    def test_stop_sequence(self):
        whole = client().completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0)
        text = whole.choices[0].text
        self.assertGreater(len(text), 6, "the greedy text is too short to pick a stop sequence from")
        stop = text[3:6]
        cut = text[: text.index(stop)]
        r = client().completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0,
                                        stop=[stop, "\u0000never"])
        self.assertEqual(r.choices[0].text, cut)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        s = "".join(c.choices[0].text for c in client().completions.create(
            model="m", prompt="Once upon a time", max_tokens=24, temperature=0, stop=stop, stream=True) if c.choices)
        self.assertEqual(s, cut)

    def test_logprobs(self):
        r = client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=6, temperature=0, logprobs=True,
            top_logprobs=3)
        entries = r.choices[0].logprobs.content
        self.assertEqual(len(entries), r.usage.completion_tokens)
        for e in entries:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            lps = [t.logprob for t in e.top_logprobs]
            self.assertEqual(lps, sorted(lps, reverse=True))
            # greedy: the chosen token is the most likely one
            self.assertAlmostEqual(e.logprob, lps[0], places=5)

    def test_concurrent_requests_match_alone(self):
        prompts = ["alpha beta", "the quick brown fox", "x", "a much longer prompt " * 6, "zeta", "one two three"]
        alone = [client().completions.create(model="m", prompt=p, max_tokens=10 + i, temperature=0).choices[0].text
                 for i, p in enumerate(prompts)]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
            futs = [ex.submit(lambda i, p: client().completions.create(
                model="m", prompt=p, max_tokens=10 + i, temperature=0).choices[0].text, i, p)
                for i, p in enumerate(prompts)]
            together = [f.result() for f in futs]
        self.assertEqual(together, alone)

    def test_errors(self):
        with self.assertRaises(openai.AuthenticationError):
            client(key="wrong").models.list()
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], temperature=5)
        self.assertEqual(e.exception.body.get("param"), "temperature")
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=[], max_tokens=3)
        self.assertEqual(e.exception.body.get("param"), "messages")
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                             extra_body={"bogus_field": 1})
        self.assertIn("bogus_field", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(model="m", prompt="word " * 5000, max_tokens=3)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.NotFoundError):
            client().models.retrieve("no-such-model")
        # the server is still fine after all that
        self.assertEqual(len(client().models.list().data), 1)

    def test_streamed_logprobs_match_whole(self):
        # byte-fallback tokens that hold partial UTF-8 characters: text_offset counts each token's bytes either way
        body = dict(model="m", max_tokens=10, temperature=0, logprobs=3,
                    prompt="token memory drive drive token stream shadow memory north expert quiet cloud north")
        whole = client().completions.create(**body)
        offsets = [o for c in client().completions.create(stream=True, **body) for ch in c.choices
                   if ch.logprobs for o in ch.logprobs.text_offset]
        self.assertEqual(offsets, whole.choices[0].logprobs.text_offset)
        self.assertEqual(len(offsets), 10)

    def test_prefix_cache_and_speculation(self):
        # the server speculates (--speculative 3) on greedy requests and keeps prompt states: the same request
        # twice gives the same text, the second computing only the prompt's last token
        msgs = [{"role": "user", "content": "A river that runs to the sea past seven old towns"}]
        a = client().chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0)
        b = client().chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)
        self.assertEqual(b.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens - 1)
        # turning drafts off per request changes nothing but the work done
        c = client().chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0,
                                             extra_body={"speculative": False})
        self.assertEqual(c.choices[0].message.content, a.choices[0].message.content)
        # sampled requests speculate too (exact rejection sampling): reproducible for a seed
        texts = [client().chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0.9, seed=5)
                 .choices[0].message.content for _ in range(2)]
        self.assertEqual(texts[0], texts[1])
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model="m", messages=msgs, max_tokens=3, extra_body={"speculative": "yes"})
        self.assertEqual(e.exception.body["param"], "speculative")

    def test_metrics(self):
        import urllib.error
        import urllib.request
        client().completions.create(model="m", prompt="metrics", max_tokens=3, temperature=0)
        root = BASE_URL[: -len("/v1")]
        req = urllib.request.Request(root + "/metrics", headers={"Authorization": "Bearer " + KEY})
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        values = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines()
                  if l and not l.startswith("#")}
        self.assertGreaterEqual(values["sluice_generation_tokens_total"], 3)
        self.assertGreaterEqual(values["sluice_forward_passes_total"], 1)
        self.assertIn("sluice_prompt_tokens_cached_total", values)
        self.assertIn("sluice_draft_tokens_total", values)
        self.assertGreaterEqual(values['sluice_http_responses_total{route="/v1/completions",code="200"}'], 1)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(root + "/metrics", timeout=30)
        self.assertEqual(e.exception.code, 401)
        health = urllib.request.urlopen(root + "/health", timeout=30)  # public
        self.assertEqual(health.status, 200)
        # DNS rebinding: a loopback server refuses a foreign Host header, even on /health
        evil = urllib.request.Request(root + "/health", headers={"Host": "evil.example:80"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(evil, timeout=30)
        self.assertEqual(e.exception.code, 403)
        ok = urllib.request.Request(root + "/health", headers={"Host": "localhost"})
        self.assertEqual(urllib.request.urlopen(ok, timeout=30).status, 200)

    def test_cors(self):
        import urllib.error
        import urllib.request
        root = BASE_URL[: -len("/v1")]
        # a browser's preflight: no credentials, answered before the key check
        pre = urllib.request.Request(root + "/v1/chat/completions", method="OPTIONS", headers={
            "Origin": APP_ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        r = urllib.request.urlopen(pre, timeout=30)
        self.assertEqual(r.status, 204)
        self.assertEqual(r.headers["Access-Control-Allow-Origin"], APP_ORIGIN)
        self.assertIn("POST", r.headers["Access-Control-Allow-Methods"])
        self.assertEqual(r.headers["Access-Control-Allow-Headers"], "authorization, content-type")
        # the call itself carries the header back, on success and on errors alike
        for key, code in ((KEY, 200), ("wrong", 401)):
            req = urllib.request.Request(root + "/v1/models", headers={"Origin": APP_ORIGIN,
                                                                       "Authorization": "Bearer " + key})
            try:
                resp = urllib.request.urlopen(req, timeout=30)
            except urllib.error.HTTPError as e:
                resp = e
            self.assertEqual(resp.status if hasattr(resp, "status") else resp.code, code)
            self.assertEqual(resp.headers["Access-Control-Allow-Origin"], APP_ORIGIN)
        # another origin gets no CORS header (the browser then refuses) and its preflight is refused
        req = urllib.request.Request(root + "/v1/models", headers={"Origin": "http://evil.example",
                                                                   "Authorization": "Bearer " + KEY})
        resp = urllib.request.urlopen(req, timeout=30)
        self.assertIsNone(resp.headers["Access-Control-Allow-Origin"])
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(root + "/v1/models", method="OPTIONS",
                                                          headers={"Origin": "http://evil.example"}), timeout=30)
        self.assertEqual(e.exception.code, 403)

    def test_client_disconnect_mid_stream(self):
        stream = client().completions.create(model="m", prompt="Go on", max_tokens=400, temperature=0, stream=True,
                                             extra_body={"ignore_eos": True})
        next(iter(stream))
        stream.close()
        r = client().completions.create(model="m", prompt="Go on", max_tokens=4, temperature=0)
        self.assertEqual(len(r.choices), 1)


def start_server(sluice, model, log_path):
    return su.start_server(sluice, model, ["--api-key", KEY, "--alias", "synth-k2", "--speculative", "3",
                                           "--cors-origin", APP_ORIGIN, "--parallel", "4", "--ctx", "4096",
                                           "--ping-interval", "1"], log_path)


def start_synth_server(sluice, tmp):
    """A small synthesized Kimi K2 in tmp/model, served with the flags above: (model, process, port)."""
    model = os.path.join(tmp, "model")
    su.synth_small_k2(sluice, model)
    proc, port = start_server(sluice, model, os.path.join(tmp, "server.log"))
    return model, proc, port


def main():
    global SLUICE, MODEL, SERVER, BASE_URL
    SLUICE, rest = su.sluice_args()
    with tempfile.TemporaryDirectory(prefix="sluice-openai-") as tmp:
        MODEL, SERVER, port = start_synth_server(SLUICE, tmp)
        BASE_URL = f"http://127.0.0.1:{port}/v1"
        try:
            result = su.run_tests(rest)
        finally:
            code = su.stop_server(SERVER)
        su.exit_with(result, code)


if __name__ == "__main__":
    main()
