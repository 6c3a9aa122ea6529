#!/usr/bin/env python3
"""Check `sluice plan` against measured runs of `sluice bench` on this machine.

For each model (three small `sluice synth` models, K2-, K3- and Qwen3-like, and the shipped trained
models/sluice-k2-tiny) and three budgets (the expert cache holding about 20%, 50% and 80% of the routed experts),
runs `sluice bench` (cold decode, experts read with O_DIRECT, so the page cache does not serve them) --reps times
and takes the median decode tok/s, then asks `sluice plan` for the same model, budget and --ctx with the rates
that the same bench run measured right after its decode (`--save-rates`: kernels for the model's formats, one
read's latency, the raw drive rate), so both see the same machine load, and prints the median projection next to
the median measurement with the error.

Routing (--routing): `trace` (the default): for each model a first bench run with another seed records the
routing (--trace-experts), and plan replays that trace through its cache simulation for the decode hit rate;
`counts`: the trained model's usage counts (--usage-stats), uniform routing for the synth models; `uniform`: plan's
default for every model. Uses only the standard library.

    python3 bench/plan_check.py --sluice build/release/bin/sluice [--reps 3] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "models", "sluice-k2-tiny")

SYNTH = [
    ("k2-like", ["--like", "kimi-k2", "--layers", "4", "--experts", "32", "--scale-down", "8"]),
    ("k3-like", ["--like", "kimi-k3", "--layers", "4", "--experts", "32", "--scale-down", "8", "--expert-dtype", "mxfp4"]),
    ("qwen3-like", ["--like", "qwen3-moe", "--layers", "4", "--experts", "32", "--scale-down", "4"]),
]
SHARES = [0.2, 0.5, 0.8]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1,
                    help="compute threads of bench (and so of its rates); 1 keeps a loaded machine's descheduled "
                         "workers from stalling every matmul's barrier")
    ap.add_argument("--no-prefetch", action="store_true",
                    help="bench without the look-ahead reads (plan does not model their wasted guesses)")
    ap.add_argument("--routing", choices=["trace", "counts", "uniform"], default="trace",
                    help="what plan is told of the routing (see above)")
    ap.add_argument("--timing", choices=["pipeline", "overlap", "serial"], default="pipeline",
                    help="plan's time model")
    ap.add_argument("--no-overhead", dest="overhead", action="store_false",
                    help="do not tell plan the per-token compute outside the matmuls that a resident run of the "
                         "model measured (with --routing trace, that run is the trace run)")
    ap.add_argument("--models", help="only these models, comma-separated (k2-like, k3-like, qwen3-like, sluice-k2-tiny)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--work", help="folder for the synth models and rates (default: a temporary one)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="plan_check_")
    os.makedirs(work, exist_ok=True)
    S = a.sluice

    models = []
    for name, args in SYNTH:
        d = os.path.join(work, name)
        if a.models and name not in a.models.split(","):
            models.append((name, d))
            continue
        if not os.path.exists(os.path.join(d, "config.json")):
            run([S, "synth", *args, "--no-sync", "--force", "-o", d])
        models.append((name, d))
    models.append(("sluice-k2-tiny", os.path.abspath(TINY)))
    if a.models:
        wanted = a.models.split(",")
        unknown = [m for m in wanted if m not in [n for n, _ in models]]
        if unknown:
            sys.exit("plan_check: unknown model(s) %s" % ",".join(unknown))
        models = [(n, d) for n, d in models if n in wanted]

    common = ["--ctx", str(a.ctx), "--prompt-tokens", "16", "--raw-seconds", "1",
              "-t", str(a.threads)]
    if a.no_prefetch:
        common.append("--no-prefetch")

    rows = []
    for name, d in models:
        routing = []  # what plan is told of this model's routing, recorded by a run with another seed
        overhead = []  # and of its compute outside the matmuls, from a resident run with another seed
        if a.routing == "trace":
            trace = os.path.join(work, name + ".trace")
            resident = last_json(run([S, "bench", "-m", d, "--memory", "100G", *common, "--tokens", "128", "--seed",
                                      "7", "--trace-experts", trace, "--json"]).stdout)
            routing = ["--trace", trace]
            if a.overhead:
                overhead = ["--token-overhead-ms", "%.4f" % resident["other_ms_per_token"]]
        elif a.routing == "counts" and name == "sluice-k2-tiny":  # trained routing is skewed: its use counts
            usage = os.path.join(work, "tiny_usage.json")
            if os.path.exists(usage):
                os.remove(usage)
            run([S, "bench", "-m", d, "--memory", "100G", *common, "--tokens", str(a.tokens), "--seed", "7",
                 "--usage-stats", usage])
            routing = ["--usage-stats", usage]
        big = last_json(run([S, "plan", "-m", d, "--memory", "100G", "--ctx", str(a.ctx), "--drives", "1GB/s",
                             "--json"]).stdout)
        minimum = big["memory_plan"]["min_bytes"]
        all_slots = big["model"]["moe_layers"] * big["model"]["experts"] * big["model"]["expert_slot_bytes"]
        for share in SHARES:
            budget = minimum + int(share * all_slots) + 4096
            meas, proj = [], []
            for rep in range(a.reps):
                # each run measures its own rates right after its decode (kernels for this model's formats, one
                # read's latency, the raw drive rate), so projection and measurement see the same machine load
                rates = os.path.join(work, "rates_%s_%d.json" % (name, rep))
                meas.append(last_json(run([S, "bench", "-m", d, "--memory", str(budget), *common, "--json",
                                           "--tokens", str(a.tokens),
                                           "--seed", str(rep + 1), "--save-rates", rates,
                                           "--rates-formats", "model"]).stdout))
                cmd = [S, "plan", "-m", d, "--memory", str(budget), "--ctx", str(a.ctx), "--drives",
                       "%.4fGB/s" % meas[-1]["raw_read_gbps"], "--rates", rates, "--timing", a.timing, "--json",
                       *routing, *overhead]
                proj.append(last_json(run(cmd).stdout))
            tok = statistics.median(m["tok_per_s"] for m in meas)
            raw = statistics.median(m["raw_read_gbps"] for m in meas)
            p = proj[0]
            p["decode"]["tok_per_s"] = statistics.median(q["decode"]["tok_per_s"] for q in proj)
            row = {
                "model": name, "budget_mib": budget / 2**20, "cache_share": p["cache_share"],
                "hit_rate_plan": p["hit_rate"], "hit_rate_bench": statistics.median(m["hit_rate"] for m in meas),
                "mb_per_token_plan": p["decode"]["bytes_read_per_token"] / 1e6,
                "mb_per_token_bench": statistics.median(m["bytes_read_per_token"] for m in meas) / 1e6,
                "tok_s_plan": p["decode"]["tok_per_s"], "tok_s_bench": tok,
                "tok_s_bench_runs": [m["tok_per_s"] for m in meas], "raw_gbps": raw,
                "tok_s_plan_runs": [q["decode"]["tok_per_s"] for q in proj],
            }
            # each projection against its own run (same load), the median of those ratios; and medians against medians
            row["error"] = statistics.median(q["decode"]["tok_per_s"] / m["tok_per_s"] for q, m in zip(proj, meas)) - 1
            row["error_of_medians"] = row["tok_s_plan"] / tok - 1
            rows.append(row)
            print("%-15s %8.1f MiB  cache %5.1f%%  hit plan %5.1f%% bench %5.1f%%  MB/tok plan %7.3f bench %7.3f  "
                  "tok/s plan %8.1f bench %8.1f (runs: plan %s, bench %s)  error %+6.1f%%" % (
                      name, row["budget_mib"], 100 * row["cache_share"], 100 * row["hit_rate_plan"],
                      100 * row["hit_rate_bench"], row["mb_per_token_plan"], row["mb_per_token_bench"],
                      row["tok_s_plan"], tok, ",".join("%.0f" % q for q in row["tok_s_plan_runs"]),
                      ",".join("%.0f" % m["tok_per_s"] for m in meas), 100 * row["error"]),
                  flush=True)
    print("error: the median over runs of projected / measured, each run against the rates it measured itself")
    within = sum(1 for r in rows if abs(r["error"]) <= 0.15)
    print("%d of %d within 15%%; median |error| %.1f%%" % (
        within, len(rows), 100 * statistics.median(abs(r["error"]) for r in rows)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
