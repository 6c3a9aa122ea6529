#!/usr/bin/env python3
"""What an online cache policy could gain from knowing more: next-use (cache_replay.py) given oracle knowledge.

    policy_bounds.py [--sizes 8,16,32,48,64,96] TRACE [TRACE ...]

Replays the traces as one stream (as analyze_trace.py does) through next-use whose estimate of an expert's next use is
given knowledge no engine has, and prints each as a fraction of Belady's hits at the same size:
  pass    the experts every remaining MoE layer of the current forward pass will fetch (a perfect look-ahead for all
          later layers; the engine's look-ahead guesses the next layer only, right by about 70%)
  next    whether the next visit of the expert's layer (usually the next token's) will choose it: q = 1 or 0
  next/A  the same blended with what next-use knows: q = A * (1 or 0) + (1 - A) * p, A in 0.5, 0.3 (a predictor
          that is partly right)
An expert's expected next use is d + (1 - q) L / p layer visits, d the visits until its layer runs again, L the
layers, p next-use's moving average (q = p is next-use itself). Standard library only; slow (pure Python).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cache_replay  # noqa: E402
import trace_format as tf  # noqa: E402

W = cache_replay.NEXT_USE_WEIGHT


def replay(acc, passes, n_experts, slots, mode, alpha=1.0):
    """Hits of next-use with oracle mode 'none' | 'pass' | 'next'."""
    layers, visit, use, cur = [], {}, {}, [None]
    nxt_rec, last_rec, last_of_layer = [None] * len(acc), {}, {}
    sets = [set(k) for k in acc]
    for i in range(len(acc) - 1, -1, -1):
        layer = acc[i][0] // n_experts
        nxt_rec[i] = last_rec.get(layer)
        last_rec[layer] = i
    resident, clock, hits = {}, 0, 0
    for i, keys in enumerate(acc):
        known = {}
        if mode == "pass":
            j = i + 1
            while j < len(acc) and passes[j] == passes[i]:
                known[acc[j][0] // n_experts] = sets[j]
                j += 1

        def note(k):
            layer = k // n_experts
            if layer != cur[0]:
                cur[0] = layer
                if layer not in layers:
                    layers.append(layer)
                    layers.sort()
                visit[layer] = visit.get(layer, 0) + 1
            last_of_layer[layer] = i
            avg, v = use.get(k, (0.0, 0))
            if v != visit[layer] or avg == 0:
                use[k] = (avg * (1 - W) ** (visit[layer] - v) + 1.0, visit[layer])

        def score(r):
            layer, n = r // n_experts, len(layers)
            avg, v = use[r]
            p = min(1.0, max(1e-4, W * avg * (1 - W) ** (visit[layer] - v)))
            d = (layers.index(layer) - layers.index(cur[0])) % n or n
            if mode == "pass" and layer in known:
                return d if r in known[layer] else d + n + n * (1 - p) / p
            if mode == "next":
                j = nxt_rec[last_of_layer[layer]]
                if j is None:
                    return float("inf")
                q = alpha * (r in sets[j]) + (1 - alpha) * p
                return d + (1 - q) * n / p
            return d + n * (1 - p) / p

        pinned, missed = set(), []
        for k in keys:
            clock += 1
            note(k)
            if k in resident:
                hits += 1
                resident[k] = clock
                pinned.add(k)
            else:
                missed.append(k)
        for k in missed:
            if len(resident) >= slots:
                cands = [r for r in resident if r not in pinned]
                if not cands:
                    continue
                victim = max(cands, key=lambda r: (score(r), -resident[r]))
                if score(k) > score(victim):
                    continue
                del resident[victim]
            resident[k] = clock
            pinned.add(k)
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="8,16,32,48,64,96")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()
    traces = [tf.read_trace(p) for p in args.traces]
    tf.check_same_model(traces)
    acc, passes = [], []
    for n, t in enumerate(traces):
        acc += cache_replay.accesses_of(t)
        passes += [(n, r.pass_index) for r in t.records]
    e = traces[0].n_experts
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = [("next-use", "none", 1.0), ("pass", "pass", 1.0), ("next", "next", 1.0), ("next/0.5", "next", 0.5),
            ("next/0.3", "next", 0.3)]
    print("| of Belady's hits, cache (experts) | " + " | ".join(str(s) for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    belady = [cache_replay.replay(acc, s, "belady", e)[0] for s in sizes]
    for name, mode, alpha in rows:
        got = [replay(acc, passes, e, s, mode, alpha) / b for s, b in zip(sizes, belady)]
        print(f"| {name} | " + " | ".join(f"{100 * x:.0f}%" for x in got) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
