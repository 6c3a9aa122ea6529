"""Soak test for `sluice serve` (loopback only, standard library only): for --seconds, --clients threads mix valid
requests (greedy, streamed and not, whose text must equal the answer the same request got alone), malformed bodies,
protocol errors, clients that disconnect mid-request or mid-stream, slow headers, chunked giants and pipelined
requests. Fails on any 5xx, any request that hangs past its timeout, a valid answer that differs, or memory that
does not stay flat. CI runs it for 20 s (ctest ServerSoak); run it longer by hand:

    python3 tests/python/soak_server.py --sluice build/release/bin/sluice --seconds 600
"""
import argparse
import collections
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util as su  # noqa: E402

ARGS = ["--memory", "200M", "--parallel", "4", "--ctx", "8192", "--http-threads", "16", "--max-connections", "64",
        "--header-timeout", "2", "--body-timeout", "2", "--max-body", "1M", "--drain-timeout", "5"]
PROMPTS = ["Love is", "In the beginning", "The LORD said", "A fortune:"]
BAD_BODIES = [
    b"{", b"[]", b"null", b"\"text\"", b"{\"model\": \"m\"}", b"{\"model\": \"m\", \"prompt\": 5}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"max_tokens\": -1}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"temperature\": 9}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"n\": 100000}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"unknown_field\": 1}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"logit_bias\": {\"999999\": 1}}",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}",
    b"{\"model\": \"m\", \"messages\": [{\"role\": \"nobody\", \"content\": \"x\"}]}",
    b"{\"model\": \"m\", \"prompt\": \"\\ud800\"}",
    b"\xff\xfe\x00garbage",
    b"{\"model\": \"m\", \"prompt\": \"x\", \"top_p\": \"high\"}",
    b"{\"model\": \"m\", \"prompt\": \"" + b"word " * 4000 + b"\"}",  # longer than the model's positions
]
RAW_BAD = [
    b"GET /health HTTP/1.1\nHost: 127.0.0.1\n\n",
    b"GET /health HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffff\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: br\r\n\r\n",
    b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n",
]


class Soak:
    def __init__(self, port, seconds, clients, seed, only=None):
        self.only = only
        self.port, self.seconds, self.clients = port, seconds, clients
        self.rng = random.Random(seed)
        self.counts = collections.Counter()
        self.failures = []
        self.lock = threading.Lock()
        self.reference = {}

    def fail(self, what):
        with self.lock:
            self.failures.append(what)

    def count(self, kind):
        with self.lock:
            self.counts[kind] += 1

    def body(self, prompt, stream=False):
        return {"model": "m", "prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": stream}

    def check_status(self, kind, status, allowed):
        if status is None or status not in allowed:
            self.fail(f"{kind}: status {status}, expected one of {sorted(allowed)}")

    def valid(self, rng):
        p = rng.choice(PROMPTS)
        status, got = su.call(self.port, "POST", "/v1/completions", self.body(p), timeout=60)
        self.check_status("valid", status, {200})
        if status == 200 and got["choices"][0]["text"] != self.reference[p]:
            self.fail(f"valid: {p!r} gave {got['choices'][0]['text']!r}, alone {self.reference[p]!r}")

    def valid_stream(self, rng):
        p = rng.choice(PROMPTS)
        s = su.connect(self.port, 60)
        try:
            s.sendall(su.request_bytes("POST", "/v1/completions", json.dumps(self.body(p, True)).encode(),
                                       {"Connection": "close"}))
            status, _, data = su.read_response(s, 60)
        finally:
            s.close()
        self.check_status("stream", status, {200})
        text = ""
        events = [l[6:] for l in data.decode().split("\n") if l.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return self.fail(f"stream: no [DONE] at the end ({events[-1:]})")
        for e in events[:-1]:
            text += json.loads(e)["choices"][0]["text"]
        if text != self.reference[p]:
            self.fail(f"stream: {p!r} gave {text!r}, alone {self.reference[p]!r}")

    def bad_body(self, rng):
        raw = rng.choice(BAD_BODIES)
        s = su.connect(self.port, 30)
        try:
            s.sendall(su.request_bytes("POST", rng.choice(["/v1/completions", "/v1/chat/completions"]), raw,
                                       {"Connection": "close"}))
            status, _, data = su.read_response(s, 30)
        finally:
            s.close()
        self.check_status("bad body", status, {400, 413})
        if status in (400, 413) and "error" not in json.loads(data):
            self.fail("bad body: no error envelope")

    def raw_bad(self, rng):
        s = su.connect(self.port, 30)
        try:
            s.sendall(rng.choice(RAW_BAD))
            status, _, _ = su.read_response(s, 30)
        except (BrokenPipeError, ConnectionResetError):
            status = 400
        finally:
            s.close()
        self.check_status("protocol error", status, {400, 403, 404, 413, 501, 505})

    def disconnect(self, rng):
        s = su.connect(self.port, 30)
        stream = rng.random() < 0.5
        s.sendall(su.request_bytes("POST", "/v1/completions",
                                   json.dumps(dict(self.body(rng.choice(PROMPTS), stream), max_tokens=400)).encode()))
        time.sleep(rng.uniform(0, 0.3))
        s.close()

    def slow_headers(self, rng):
        s = su.connect(self.port, 30)
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            status, _, _ = su.read_response(s, 30)  # --header-timeout 2
        finally:
            s.close()
        self.check_status("slow headers", status, {408})

    def chunked_giant(self, rng):
        s = su.connect(self.port, 30)
        status = None
        try:
            s.sendall(su.request_bytes("POST", "/v1/completions", None, {"Transfer-Encoding": "chunked"}))
            chunk = b"8000\r\n" + b"x" * 0x8000 + b"\r\n"
            for _ in range(64):  # 2 MiB against the 1 MiB cap
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            status, _, _ = su.read_response(s, 30)
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        self.check_status("chunked giant", status, {413})

    def pipelined(self, rng):
        s = su.connect(self.port, 30)
        try:
            s.sendall(su.request_bytes("GET", "/health") + su.request_bytes("GET", "/v1/models"))
            a, b = su.read_response(s, 30)[0], su.read_response(s, 30)[0]
        finally:
            s.close()
        self.check_status("pipelined", a, {200})
        self.check_status("pipelined", b, {200})

    def client(self, seed, end):
        rng = random.Random(seed)
        actions = [(self.valid, 3), (self.valid_stream, 2), (self.bad_body, 4), (self.raw_bad, 3),
                   (self.disconnect, 2), (self.slow_headers, 1), (self.chunked_giant, 1), (self.pipelined, 2)]
        pool = [a for a, w in actions for _ in range(w) if not self.only or a.__name__ == self.only]
        while time.monotonic() < end:
            action = rng.choice(pool)
            try:
                action(rng)
            except socket.timeout:
                self.fail(f"{action.__name__}: no answer in time (a hang)")
            except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the soak
                self.fail(f"{action.__name__}: {type(e).__name__}: {e}")
            self.count(action.__name__)

    def run(self, pid):
        for p in PROMPTS:
            status, got = su.call(self.port, "POST", "/v1/completions", self.body(p), timeout=60)
            assert status == 200, got
            self.reference[p] = got["choices"][0]["text"]
        end = time.monotonic() + self.seconds
        threads = [threading.Thread(target=self.client, args=(self.rng.random(), end)) for _ in range(self.clients)]
        rss = []
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            rss.append(su.rss_kb(pid))
        for t in threads:
            t.join()
        # flat memory: the last quarter of the run no higher than the second quarter, give or take 16 MiB + 10%
        q = max(1, len(rss) // 4)
        early, late = max(rss[q:2 * q] or rss), max(rss[-q:])
        if late > early * 1.10 + 16 * 1024:
            self.fail(f"memory grew: {early} kB early, {late} kB late")
        return early, late


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="run only this kind of client action (valid, bad_body, disconnect, ...)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-soak-") as tmp:
        # Under AddressSanitizer freed memory waits in a quarantine (256 MB by default) before it is reused, so RSS
        # climbs until the quarantine is full, later the fewer large buffers a pass frees: a small one lets the
        # memory check see live memory (release builds ignore the variable).
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = ":".join(x for x in [env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=16"] if x)
        proc, port = su.start_server(os.path.abspath(args.sluice), su.model_dir(), ARGS, os.path.join(tmp, "log"), env)
        soak = Soak(port, args.seconds, args.clients, args.seed, args.only)
        try:
            early, late = soak.run(proc.pid)
            health = su.call(port, "GET", "/health", timeout=5)[0]
            if health != 200:
                soak.fail(f"/health answered {health} after the soak")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        if code != 0:
            soak.fail(f"sluice serve exited with {code} after SIGTERM")
        total = sum(soak.counts.values())
        print(f"soak: {total} client actions in {args.seconds:.0f} s by {args.clients} clients: " +
              ", ".join(f"{k} {v}" for k, v in sorted(soak.counts.items())))
        print(f"soak: server RSS {early} kB early, {late} kB late")
        if soak.failures:
            print(f"soak: {len(soak.failures)} failures, the first ones:")
            for f in soak.failures[:20]:
                print("  " + f)
            print(open(os.path.join(tmp, "log")).read()[-3000:])
            sys.exit(1)
        print("soak: no 5xx, no hangs, every valid answer exact, memory flat")


if __name__ == "__main__":
    main()
