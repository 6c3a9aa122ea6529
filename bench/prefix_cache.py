#!/usr/bin/env python3
"""A multi-turn chat against `sluice serve`, with the prefix cache on and off: each turn's time to first token.

Issue 22's benchmark: with the cache, a turn should cost about what prefilling only its new tokens costs. For every
turn this prints the turn's prompt tokens, how many came from the cache (usage.prompt_tokens_details.cached_tokens),
its time to first token with the cache on and off, and the time to first token of a fresh request whose prompt is
only as long as the turn's new tokens (no reuse possible: the ratio's denominator), all measured in one run; and
the same conversation with the server restarted before every turn and --state-dir, so only the SSD tier remembers.
Each fresh prompt runs right after its turn on the same server, so the ratio's two times see the same machine load;
the ratios are also given in the server's CPU time to first token, which other load does not stretch.

Usage: bench/prefix_cache.py --sluice build/release/bin/sluice --model DIR [--turns 10] [--user-words 60]
Needs the openai package (scripts/python-env.sh puts it in .venv).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import openai

WORDS = ("river stone memory north light quiet engine garden thunder market copper window harbor lantern "
         "meadow signal winter orchard").split()


def start(sluice, model, extra):
    proc = subprocess.Popen([sluice, "serve", "-m", model, "--port", "0", "--threads", "2", "--parallel", "1",
                             "--ctx", "8192"] + extra, stderr=subprocess.PIPE, text=True)
    SERVER["pid"] = proc.pid
    for line in proc.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            return proc, openai.OpenAI(base_url=f"http://127.0.0.1:{m.group(1)}/v1", api_key="x", max_retries=0,
                                       timeout=600)
    raise RuntimeError("sluice serve did not start")


SERVER = {"pid": None}
CPU = {"last": float("nan")}  # the server's CPU seconds up to the last measured first token


def server_cpu_s():
    """The server's CPU time so far (user + system, all threads): unlike wall time, not stretched by other load."""
    with open(f"/proc/{SERVER['pid']}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ttft(client, messages, max_tokens):
    t0, c0 = time.perf_counter(), server_cpu_s()
    first, text, usage = None, "", None
    for chunk in client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content and first is None:
            first = time.perf_counter() - t0
            CPU["last"] = server_cpu_s() - c0
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    return first, text, usage


def ttft_ids(client, ids):
    t0, c0 = time.perf_counter(), server_cpu_s()
    first = None
    # read the stream to its end: leaving it half read lets the garbage collector close it later, inside the
    # connection pool's lock (a deadlock in httpcore)
    for chunk in client.completions.create(model="m", prompt=ids, max_tokens=1, temperature=0, stream=True):
        if chunk.choices and first is None:
            first = time.perf_counter() - t0
            CPU["last"] = server_cpu_s() - c0
    return first if first is not None else time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--user-words", type=int, default=60)
    ap.add_argument("--reply-tokens", type=int, default=8)
    ap.add_argument("--skip-off", action="store_true", help="no run with the cache off (its column shows nan)")
    a = ap.parse_args()

    def user(turn):
        return " ".join(WORDS[(turn * 7 + i * 3) % len(WORDS)] for i in range(a.user_words))

    runs, fresh, cpu = {}, {}, {}  # cpu[label]: per turn, the server CPU time to first token / the fresh prompt's
    state_dir = tempfile.mkdtemp(prefix="sluice-bench-states-")
    for label, extra in (("on", ["--prefix-cache", "256M"]), ("off", ["--prefix-cache", "0"]),
                         ("restart", ["--prefix-cache", "256M", "--state-dir", state_dir])):
        if label == "off" and a.skip_off:
            runs["off"] = [(float("nan"), 0, 0)] * a.turns
            continue
        proc, client = start(a.sluice, a.model, extra)
        try:
            ttft(client, [{"role": "user", "content": "warm up"}], 1)
            msgs, out = [], []
            for turn in range(a.turns):
                if label == "restart" and turn > 0:  # a new process before every turn: only the SSD tier remembers
                    proc.terminate()
                    proc.wait(timeout=60)
                    proc, client = start(a.sluice, a.model, extra)
                    ttft(client, [{"role": "user", "content": "warm up"}], 1)  # a new process's first pass
                msgs.append({"role": "user", "content": user(turn)})
                t, text, usage = ttft(client, msgs, a.reply_tokens)
                n, cached = usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
                out.append((t, n, cached))
                cpu_turn = CPU["last"]
                msgs.append({"role": "assistant", "content": text})
                if label != "off":
                    # the denominator, measured right after on the same server (the machine's load drifts): a fresh
                    # prompt of exactly the turn's new tokens (ids nothing has seen before)
                    ids = [3 + (turn * 131 + j * 17) % 500 for j in range(n - cached)]
                    fresh.setdefault(label, []).append((ttft_ids(client, ids), n - cached))
                    cpu.setdefault(label, []).append(cpu_turn / CPU["last"])
                print(f"{label} turn {turn + 1}: {out[-1]} fresh {fresh.get(label, [None])[-1]}", file=sys.stderr,
                      flush=True)
            runs[label] = out
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    shutil.rmtree(state_dir, ignore_errors=True)
    print("turn  prompt  cached  new   ttft_on_s  ttft_off_s  fresh_ttft_s  on/fresh  restart_cached  ttft_restart_s  "
          "fresh_restart_s  restart/fresh")
    ratios, restart_ratios = [], []
    for i, ((t_on, n, cached), (t_off, _, _), (t_f, _), (t_r, _, cached_r), (t_fr, _)) in enumerate(
            zip(runs["on"], runs["off"], fresh["on"], runs["restart"], fresh["restart"])):
        ratios.append(t_on / t_f)
        restart_ratios.append(t_r / t_fr)
        print(f"{i + 1:4d}  {n:6d}  {cached:6d}  {n - cached:4d}  {t_on:9.3f}  {t_off:10.3f}  {t_f:12.3f}  "
              f"{ratios[-1]:8.2f}  {cached_r:14d}  {t_r:14.3f}  {t_fr:15.3f}  {restart_ratios[-1]:13.2f}")
    print(f"median on/fresh over turns 2..{a.turns}: {statistics.median(ratios[1:]):.2f}; after a restart with "
          f"--state-dir: {statistics.median(restart_ratios[1:]):.2f}; total ttft on "
          f"{sum(r[0] for r in runs['on']):.2f} s, off {sum(r[0] for r in runs['off']):.2f} s, restarted "
          f"{sum(r[0] for r in runs['restart']):.2f} s")
    print(f"the same ratios in server CPU time to first token (robust to other load on the machine): median "
          f"{statistics.median(cpu['on'][1:]):.2f}, after a restart {statistics.median(cpu['restart'][1:]):.2f}; "
          f"per turn: " + " ".join(f"{x:.2f}" for x in cpu["on"]))


if __name__ == "__main__":
    sys.exit(main())
