#!/usr/bin/env python3
"""`sluice generate --trace-experts` end to end with the Python reader (tools/routing): a traced streaming run gives
one record per MoE layer and pass whose hits the offline replay reproduces, expert by expert, under every policy; a resident run refuses to trace; a
truncated trace and a trace for another model are clear errors from the reader and from analyze_trace.py (which
fails on them before it needs numpy). Standard library only.

    test_trace_tools.py --sluice BUILD/bin/sluice
"""
import argparse
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, "tools", "routing"))
import cache_replay  # noqa: E402
import trace_format as tf  # noqa: E402

failures = n_passed = 0


def check(cond, what):
    global failures, n_passed
    print(("ok   " if cond else "FAIL ") + what)
    failures += 0 if cond else 1
    n_passed += 1 if cond else 0


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    sluice = ap.parse_args().sluice
    with tempfile.TemporaryDirectory() as tmp:
        model, other = os.path.join(tmp, "m"), os.path.join(tmp, "other")
        for out, layers in ((model, 3), (other, 4)):
            r = run(sluice, "synth", "--like", "kimi-k2", "--layers", layers, "--experts", 8, "--top-k", 2,
                    "--scale-down", 32, "--vocab-size", 512, "-o", out, "--no-sync")
            if r.returncode != 0:
                print(r.stderr)
                return 1
        trace = os.path.join(tmp, "t.trace")
        n_new = 6
        # a budget that leaves the cache some slots; no look-ahead, so that the replay must match the engine exactly
        r = run(sluice, "generate", "-m", model, "--memory", "67M", "--ctx", 64, "--no-prefetch", "-t", 1, "--ids",
                "1,2,3,4,5", "-n", n_new, "--ignore-eos", "--trace-experts", trace)
        check(r.returncode == 0, f"traced generate runs ({r.stderr.strip()[-200:]})")
        t = tf.read_trace(trace)
        layers = sorted({rec.layer for rec in t.records})
        check(layers == [1, 2], f"MoE layers 1 and 2 traced (got {layers})")
        passes = sorted({rec.pass_index for rec in t.records})
        check(passes == list(range(n_new)), f"{n_new} passes: one prefill, then one per token (got {len(passes)})")
        check(len(t.records) == 2 * n_new, f"one record per layer and pass ({len(t.records)})")
        check(t.records[0].n_rows == 5 and all(rec.n_rows == 1 for rec in t.records[2:]), "rows: 5 prompt, then 1")
        check(all(rec.top_k == 2 and len(rec.choices[0]) == 2 for rec in t.records), "top-2 choices per row")
        engine_hits = sum(1 for rec in t.records for _, f in rec.distinct if f & tf.HIT)
        acc = cache_replay.accesses_of(t)
        check(cache_replay.replay(acc, t.cache_slots, "lru", t.n_experts)[0] == engine_hits,
              f"replay at the engine's {t.cache_slots} slots gives its {engine_hits} hits")
        check(tf.check_model(t, model).startswith("layers"), "check_model accepts the model it was recorded on")
        # every policy: the engine's hits (no look-ahead) equal the replay's, over a run long enough to evict
        for policy in ("lru", "lfu", "next-use", "markov"):
            pt = os.path.join(tmp, f"{policy}.trace")
            r = run(sluice, "generate", "-m", model, "--memory", "67M", "--ctx", 64, "--no-prefetch", "-t", 1,
                    "--ids", "1,2,3,4,5", "-n", 40, "--temp", 0.8, "--seed", 5, "--ignore-eos", "--cache-policy",
                    policy, "--trace-experts", pt)
            if r.returncode != 0:
                check(False, f"{policy}: traced generate runs ({r.stderr.strip()[-200:]})")
                continue
            pt = tf.read_trace(pt)
            engine = [[bool(f & tf.HIT) for _, f in rec.distinct] for rec in pt.records]
            flags = []
            got = cache_replay.replay(cache_replay.accesses_of(pt), pt.cache_slots, policy, pt.n_experts, flags)[0]
            hits = sum(map(sum, engine))
            check(pt.policy == policy and flags == engine and hits > 0,
                  f"{policy}: replay at {pt.cache_slots} slots hits where the engine's {hits} hits are (replay {got})")

        r = run(sluice, "generate", "-m", model, "-t", 1, "--ids", "1,2", "-n", 2, "--trace-experts",
                os.path.join(tmp, "resident.trace"))
        check(r.returncode != 0 and "--memory SIZE or --stream" in r.stderr, "a resident run refuses to trace")

        data = open(trace, "rb").read()
        cut = os.path.join(tmp, "cut.trace")
        bad_cuts = []
        for n in range(0, len(data), max(1, len(data) // 97)):
            with open(cut, "wb") as f:
                f.write(data[:n])
            try:
                tf.read_trace(cut)
                bad_cuts.append(n)
            except tf.TraceError as e:
                if "truncated" not in str(e) and "not an expert trace" not in str(e):
                    bad_cuts.append(n)
        check(not bad_cuts, f"every truncation is reported as truncated (failed at {bad_cuts[:5]})")
        analyze = os.path.join(root, "tools", "routing", "analyze_trace.py")
        r = run(sys.executable, analyze, "--name", "x", "--out", os.path.join(tmp, "out"), cut)
        check(r.returncode == 2 and "truncated" in r.stderr, f"analyze_trace.py: truncated ({r.stderr.strip()})")
        r = run(sys.executable, analyze, "--name", "x", "--out", os.path.join(tmp, "out"), "--model", other, trace)
        check(r.returncode == 2 and "for another model" in r.stderr,
              f"analyze_trace.py: another model ({r.stderr.strip()})")
    print(f"{n_passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
