#!/usr/bin/env python3
"""Routing evidence from sluice expert traces (`sluice generate|bench --trace-experts FILE`).

    analyze_trace.py --name trained --out docs/routing [--model DIR] TRACE [TRACE ...]

Several traces (one per prompt, all of one model) are read as one workload served in order. Writes into --out:
  NAME_skew.png      per MoE layer: expert use sorted, as a share of the layer's rows, against uniform
  NAME_cache.png     hit rate against cache size (experts) for LRU, LFU, next-use, markov and Belady's optimum,
                     replayed offline
  NAME_prefetch.png  the look-ahead's precision and recall per layer
  NAME_distinct.png  distinct experts per layer for B rows (consecutive, independent) next to E(1-(1-k/E)^B)
  NAME.md            the same numbers as Markdown tables
Needs numpy and matplotlib (`pip install numpy matplotlib`; xxhash too for --model's config hash check).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_format as tf  # noqa: E402
from cache_replay import POLICIES, accesses_of, replay  # noqa: E402


def moe_layers(traces):
    return sorted({r.layer for t in traces for r in t.records})


def use_counts(traces, n_experts):
    counts = {}
    for t in traces:
        for r in t.records:
            c = counts.setdefault(r.layer, [0] * n_experts)
            for row in r.choices:
                for e in row:
                    c[e] += 1
    return counts


def skew(traces, n_experts, out, name, plt, np):
    counts = use_counts(traces, n_experts)
    layers = sorted(counts)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    rows = []
    for layer in layers:
        c = np.array(sorted(counts[layer], reverse=True), dtype=float)
        share = c / c.sum()
        ax.plot(np.arange(1, n_experts + 1), share, marker="o", ms=3, label=f"layer {layer}")
        med = float(np.median(c))
        p = share[share > 0]
        entropy = float(-(p * np.log(p)).sum() / np.log(n_experts))
        top = max(1, n_experts // 4)
        rows.append((layer, int(c.sum()), share[0], share[:top].sum(), c[0] / med if med > 0 else float("inf"),
                     int((c == 0).sum()), entropy))
    ax.axhline(1.0 / n_experts, color="k", ls="--", lw=1, label="uniform")
    ax.set_xlabel("expert rank (most used first)")
    ax.set_ylabel("share of the layer's routed rows")
    ax.set_yscale("log")
    ax.set_title(f"{name}: expert use per layer, sorted")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}_skew.png"), dpi=110)
    plt.close(fig)
    top = max(1, n_experts // 4)
    md = [f"| layer | routed rows | top expert's share | top {top} experts' share (uniform {top / n_experts:.0%}) | "
          f"top / median | unused | normalised entropy |", "|---|---|---|---|---|---|---|"]
    for layer, n, s0, s_top, ratio, unused, ent in rows:
        md.append(f"| {layer} | {n} | {s0:.1%} | {s_top:.1%} | {ratio:.1f}x | {unused} | {ent:.3f} |")
    return "\n".join(md)


def cache_curves(traces, n_experts, out, name, plt):
    layers = moe_layers(traces)
    total = len(layers) * n_experts
    sizes = sorted({s for s in [2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, total] if s <= total})
    acc = [a for t in traces for a in accesses_of(t)]
    n_access = sum(len(a) for a in acc)
    curves = {p: [replay(acc, s, p, n_experts)[0] / n_access for s in sizes] for p in POLICIES}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for p, style in zip(POLICIES, ["o-", "s-", "^-", "v-", "d-"]):
        ax.plot(sizes, [100 * h for h in curves[p]], style, ms=4, label=p)
    # the engine's own hit rate at the size it ran (prefetch included), from the traces' flags
    hits = sum(1 for t in traces for r in t.records for _, f in r.distinct if f & tf.HIT)
    slots = traces[0].cache_slots
    if 0 < slots <= total and all(t.cache_slots == slots for t in traces):
        ax.plot([slots], [100 * hits / n_access], "k*", ms=12,
                label=f"engine run ({traces[0].policy}{', look-ahead on' if traces[0].prefetch else ''})")
    ax.set_xlabel(f"cache size (experts; {total} routed experts in all)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{name}: expert cache hit rate, offline replay of {n_access} fetches")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}_cache.png"), dpi=110)
    plt.close(fig)
    online = [p for p in POLICIES if p != "belady"]
    md = ["| cache (experts) | " + " | ".join(POLICIES) + " | " + " | ".join(f"{p} / Belady" for p in online[2:]) + " |",
          "|---|" + "---|" * (len(POLICIES) + len(online) - 2)]
    for i, s in enumerate(sizes):
        b = curves["belady"][i]
        md.append(f"| {s} | " + " | ".join(f"{100 * curves[p][i]:.1f}%" for p in POLICIES) + " | " +
                  " | ".join(f"{100 * curves[p][i] / b:.0f}%" if b > 0 else "-" for p in online[2:]) + " |")
    # the engine runs each trace (prompt) in its own process, from a cold cache: the same replay, trace by trace
    cold = {p: [sum(replay(accesses_of(t), s, p, n_experts)[0] for t in traces) / n_access for s in sizes]
            for p in online[2:] + ["belady"]}
    md += ["", "Each trace replayed from a cold cache (as the engine runs them), hits summed over the traces:", "",
           "| cache (experts) | " + " | ".join(cold) + " | " + " | ".join(f"{p} / Belady" for p in online[2:]) + " |",
           "|---|" + "---|" * (2 * len(cold) - 1)]
    for i, s in enumerate(sizes):
        b = cold["belady"][i]
        md.append(f"| {s} | " + " | ".join(f"{100 * cold[p][i]:.1f}%" for p in cold) + " | " +
                  " | ".join(f"{100 * cold[p][i] / b:.0f}%" if b > 0 else "-" for p in online[2:]) + " |")
    md.append("")
    md.append(f"Engine run: {hits} hits of {n_access} fetched experts ({100 * hits / n_access:.1f}%) with {slots} cache "
              f"slots, policy {traces[0].policy}, look-ahead {'on' if traces[0].prefetch else 'off'}.")
    return "\n".join(md), curves, sizes


def prefetch(traces, out, name, plt, np):
    layers = [l for l in moe_layers(traces)]
    stats = {l: dict(guessed=0, actual=0, both=0, issued=0, issued_used=0, skipped=0, calls=0) for l in layers}
    for t in traces:
        for r in t.records:
            if not r.hints:
                continue
            s = stats[r.layer]
            actual = {e for e, _ in r.distinct}
            guessed = {e for e, _ in r.hints}
            issued = {e for e, o in r.hints if o == tf.HINT_READ}
            s["calls"] += 1
            s["guessed"] += len(guessed)
            s["actual"] += len(actual)
            s["both"] += len(guessed & actual)
            s["issued"] += len(issued)
            s["issued_used"] += len(issued & actual)
            s["skipped"] += 1 if any(o == tf.HINT_SKIPPED for _, o in r.hints) else 0
    shown = [l for l in layers if stats[l]["calls"] > 0]
    md = ["| layer | fetches with a guess | precision (guessed & used / guessed) | recall (guessed & used / used) | "
          "reads issued | issued & used | hints skipped |", "|---|---|---|---|---|---|---|"]
    prec, rec = [], []
    for l in shown:
        s = stats[l]
        p = s["both"] / s["guessed"] if s["guessed"] else 0
        q = s["both"] / s["actual"] if s["actual"] else 0
        prec.append(p)
        rec.append(q)
        iu = f"{s['issued_used'] / s['issued']:.1%}" if s["issued"] else "-"
        md.append(f"| {l} | {s['calls']} | {p:.1%} | {q:.1%} | {s['issued']} | {iu} | {s['skipped']} |")
    if not shown:
        return "No look-ahead hints in the trace (look-ahead off, or a single MoE layer)."
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, [100 * p for p in prec], 0.4, label="precision")
    ax.bar(x + 0.2, [100 * q for q in rec], 0.4, label="recall")
    ax.set_xticks(x, [f"layer {l}" for l in shown])
    ax.set_ylim(0, 100)
    ax.set_ylabel("%")
    ax.set_title(f"{name}: look-ahead guess (next layer's router on this layer's input)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}_prefetch.png"), dpi=110)
    plt.close(fig)
    return "\n".join(md)


def distinct(traces, n_experts, out, name, plt, np, seed=1):
    layers = moe_layers(traces)
    k = traces[0].records[0].top_k
    # each layer's rows, in the order they ran, per trace (one request each)
    seqs = {l: [] for l in layers}
    for t in traces:
        per = {l: [] for l in layers}
        for r in t.records:
            per[r.layer].extend(r.choices)
        for l in layers:
            seqs[l].append(per[l])
    rng = random.Random(seed)
    bs = [b for b in [1, 2, 4, 8, 16, 32, 64, 128] if b <= min(len(s) for l in layers for s in seqs[l]) or b <= 8]
    consec, indep = {}, {}
    for l in layers:
        all_rows = [row for s in seqs[l] for row in s]
        for b in bs:
            vals = []
            for s in seqs[l]:
                for start in range(0, max(0, len(s) - b + 1), max(1, b // 2)):
                    vals.append(len({e for row in s[start:start + b] for e in row}))
            consec.setdefault(b, []).append(np.mean(vals) if vals else float("nan"))
            draws = [len({e for row in rng.sample(all_rows, min(b, len(all_rows))) for e in row}) for _ in range(200)]
            indep.setdefault(b, []).append(np.mean(draws))
    formula = [n_experts * (1 - (1 - k / n_experts) ** b) for b in bs]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(bs, [np.nanmean(consec[b]) for b in bs], "o-", label="B consecutive rows (one request)")
    ax.plot(bs, [np.mean(indep[b]) for b in bs], "s-", label="B independent rows (random positions and prompts)")
    ax.plot(bs, formula, "k--", label=f"independent routing: E(1-(1-k/E)^B), E={n_experts}, k={k}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows in the batch (B)")
    ax.set_ylabel("distinct experts per layer (mean over layers)")
    ax.set_title(f"{name}: experts a layer must read for B rows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}_distinct.png"), dpi=110)
    plt.close(fig)
    md = ["| B | consecutive | independent | E(1-(1-k/E)^B) |", "|---|---|---|---|"]
    for b, f in zip(bs, formula):
        md.append(f"| {b} | {np.nanmean(consec[b]):.2f} | {np.mean(indep[b]):.2f} | {f:.2f} |")
    return "\n".join(md)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--name", required=True, help="prefix of the files written (e.g. trained, synth)")
    ap.add_argument("--out", required=True, help="folder for the PNGs and the Markdown")
    ap.add_argument("--model", help="model folder: check that the traces were recorded on it")
    args = ap.parse_args(argv)
    try:
        traces = [tf.read_trace(p) for p in args.traces]
        tf.check_same_model(traces)
        checked = tf.check_model(traces[0], args.model) if args.model else None
    except (tf.TraceError, OSError) as e:
        print(f"analyze_trace: {e}", file=sys.stderr)
        return 2
    if not any(t.records for t in traces):
        print("analyze_trace: the traces have no records", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    os.makedirs(args.out, exist_ok=True)
    t0 = traces[0]
    n_rows = sum(r.n_rows for t in traces for r in t.records if r.layer == moe_layers(traces)[0])
    n_passes = sum(len({r.pass_index for r in t.records}) for t in traces)
    parts = [f"# Routing: {args.name}", "",
             f"{len(traces)} trace(s) of {t0.architecture} (config xxh3 {t0.config_xxh3:016x}), "
             f"{len(moe_layers(traces))} MoE layers of {t0.n_experts} experts, top-{t0.records[0].top_k}; "
             f"{n_passes} forward passes, {n_rows} token rows." + (f" Checked against the model: {checked}." if checked else ""),
             "", "## Expert use per layer", "", skew(traces, t0.n_experts, args.out, args.name, plt, np), ""]
    md, _, _ = cache_curves(traces, t0.n_experts, args.out, args.name, plt)
    parts += ["## Cache hit rate against cache size (offline replay)", "", md, ""]
    parts += ["## Look-ahead", "", prefetch(traces, args.out, args.name, plt, np), ""]
    parts += ["## Distinct experts per layer against batch size", "",
              distinct(traces, t0.n_experts, args.out, args.name, plt, np), ""]
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write("\n".join(parts))
    print(f"analyze_trace: wrote {args.name}.md and 4 PNGs to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
