#!/usr/bin/env python3
"""A multi-turn chat against `sluice serve`, with the prefix cache on and off: each turn's time to first token.

Issue 22's benchmark: with the cache, a turn should cost about what prefilling only its new tokens costs. For every
turn this prints the turn's prompt tokens, how many came from the cache (usage.prompt_tokens_details.cached_tokens),
its time to first token with the cache on and off, and the time to first token of a fresh request whose prompt is
only as long as the turn's new tokens (no reuse possible: the ratio's denominator), all measured in one run; and
the same conversation with the server restarted before every turn and --state-dir, so only the SSD tier remembers.
Each fresh prompt runs right after its turn on the same server, so the ratio's two times see the same machine load;
the ratios are also given in the server's CPU time to first token, which other load does not stretch.

After a restart the turn is the new process's first real pass (after a one-token warm-up): its buffers, activation
memory and expert slots are touched for the first time (page faults: about 130 MB on the K3 slice), which a fresh
prompt run after it on the same, now warm, server does not pay. So the restarted turn gets two denominators: that
warm fresh prompt (restart/warm, what earlier runs reported), and the same fresh prompt as the first real pass of a
server restarted again the same way (restart/cold): both sides of restart/cold pay a new process's first pass and
differ only in the reuse, which is what the SSD tier is judged by. Neither time counts model load or server start.

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
    cold, cold_cpu = [], []  # restart: the fresh prompt as a restarted server's first pass; turn CPU / its CPU
    state_dir = tempfile.mkdtemp(prefix="sluice-bench-states-")
    for label, extra in (("on", ["--prefix-cache", "256M"]), ("off", ["--prefix-cache", "0"]),
                         ("restart", ["--prefix-cache", "256M", "--state-dir", state_dir])):
        if label == "off" and a.skip_off:
            runs["off"] = [(float("nan"), 0, 0)] * a.turns
            continue
        proc, client = start(a.sluice, a.model, extra)

        def restart(old):
            old.terminate()
            old.wait(timeout=60)
            new, c = start(a.sluice, a.model, extra)
            ttft(c, [{"role": "user", "content": "warm up"}], 1)  # a new process's first pass
            return new, c

        try:
            ttft(client, [{"role": "user", "content": "warm up"}], 1)
            msgs, out = [], []
            for turn in range(a.turns):
                if label == "restart" and turn > 0:  # a new process before every turn: only the SSD tier remembers
                    proc, client = restart(proc)
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
                if label == "restart":
                    # the fair denominator after a restart: the same fresh prompt as a restarted server's first pass
                    # (other ids of the same count: the state directory now holds the warm fresh prompt's state)
                    proc, client = restart(proc)
                    cold.append(ttft_ids(client, [3 + (i + 250) % 500 for i in ids]))
                    cold_cpu.append(cpu_turn / CPU["last"])
                print(f"{label} turn {turn + 1}: {out[-1]} fresh {fresh.get(label, [None])[-1]}", file=sys.stderr,
                      flush=True)
            runs[label] = out
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    shutil.rmtree(state_dir, ignore_errors=True)
    print("turn  prompt  cached  new   ttft_on_s  ttft_off_s  fresh_ttft_s  on/fresh  restart_cached  ttft_restart_s  "
          "fresh_warm_s  fresh_cold_s  restart/warm  restart/cold")
    ratios, warm_ratios, cold_ratios = [], [], []
    for i, ((t_on, n, cached), (t_off, _, _), (t_f, _), (t_r, _, cached_r), (t_fr, _), t_fc) in enumerate(
            zip(runs["on"], runs["off"], fresh["on"], runs["restart"], fresh["restart"], cold)):
        ratios.append(t_on / t_f)
        warm_ratios.append(t_r / t_fr)
        cold_ratios.append(t_r / t_fc)
        print(f"{i + 1:4d}  {n:6d}  {cached:6d}  {n - cached:4d}  {t_on:9.3f}  {t_off:10.3f}  {t_f:12.3f}  "
              f"{ratios[-1]:8.2f}  {cached_r:14d}  {t_r:14.3f}  {t_fr:12.3f}  {t_fc:12.3f}  {warm_ratios[-1]:12.2f}  "
              f"{cold_ratios[-1]:12.2f}")
    med = statistics.median
    print(f"wall time, medians over turns 2..{a.turns}: on/fresh {med(ratios[1:]):.2f}; after a restart with "
          f"--state-dir: restart/cold {med(cold_ratios[1:]):.2f} (restart/warm {med(warm_ratios[1:]):.2f}); total ttft "
          f"on {sum(r[0] for r in runs['on']):.2f} s, off {sum(r[0] for r in runs['off']):.2f} s, restarted "
          f"{sum(r[0] for r in runs['restart']):.2f} s")
    print(f"server CPU time to first token (robust to other load on the machine), medians over turns 2..{a.turns}: "
          f"on/fresh {med(cpu['on'][1:]):.2f}, restart/cold {med(cold_cpu[1:]):.2f} (restart/warm "
          f"{med(cpu['restart'][1:]):.2f})")
    for name, xs in (("on/fresh", cpu["on"]), ("restart/cold", cold_cpu), ("restart/warm", cpu["restart"])):
        print(f"  CPU {name} per turn: " + " ".join(f"{x:.2f}" for x in xs))


if __name__ == "__main__":
    sys.exit(main())
