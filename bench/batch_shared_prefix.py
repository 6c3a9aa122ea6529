"""Batch lines that share a long instruction: prompt tokens computed against the ideal (the first line's tokens plus
each later line's tokens past its longest common prefix with an earlier line), and wall time with the prefix cache on
and off, on the shipped trained model by default.

    python3 bench/batch_shared_prefix.py --sluice build/release/bin/sluice [--lines 100 --instruction-words 500]

Issue 22's size (200 lines sharing a 2,000-token instruction) needs more positions than the trained model's 1024: a
synthesized model, e.g. `sluice synth --like kimi-k3 --layers 4 --experts 32 --scale-down 8 -o K3` (byte-level
tokenizer), with --model K3 --lines 200 --instruction-tokens 2000 --memory 1G.
"""
import argparse
import json
import os
import random
import subprocess
import tempfile
import time

WORDS = ("love light earth heaven water spirit king house word day night man woman city river mountain bread wine "
         "stone field harvest law prophet servant shepherd sword temple").split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "models", "sluice-k2-tiny"))
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--instruction-words", type=int, default=500)
    ap.add_argument("--instruction-tokens", type=int, default=0, help="cut the instruction to this many tokens")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--memory", default="200M")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--skip-off", action="store_true", help="only the run with the cache")
    args = ap.parse_args()
    rng = random.Random(1)

    def tokenize(text):
        return json.loads(subprocess.run([args.sluice, "tokenize", "-m", args.model, "--special"], input=text,
                                         capture_output=True, text=True, check=True).stdout)

    instr = "You are a careful reader. Answer in one short sentence. " + " ".join(
        rng.choice(WORDS) for _ in range(args.instruction_words))
    if args.instruction_tokens:
        while len(tokenize(instr)) < args.instruction_tokens:
            instr += " " + " ".join(rng.choice(WORDS) for _ in range(50))
        lo, hi = 0, len(instr)  # the shortest head of the text with that many tokens
        while lo < hi:
            mid = (lo + hi) // 2
            if len(tokenize(instr[:mid])) >= args.instruction_tokens:
                hi = mid
            else:
                lo = mid + 1
        instr = instr[:lo]
    n_instr = len(tokenize(instr))
    print(f"instruction: {n_instr} tokens; {args.lines} lines")
    with tempfile.TemporaryDirectory(prefix="sluice-bsp-") as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        prompts = []
        with open(inp, "w") as f:
            for i in range(args.lines):
                p = instr + "\nQuestion: " + " ".join(rng.choice(WORDS) for _ in range(8)) + "\nAnswer:"
                prompts.append(p)
                f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                    "body": {"model": "m", "prompt": p, "max_tokens": 4, "temperature": 0}}) + "\n")
        toks = [tokenize(p) for p in prompts]
        ideal = len(toks[0])
        for i in range(1, len(toks)):
            best = 0
            for j in range(i):
                k = 0
                while k < min(len(toks[i]), len(toks[j])) and toks[i][k] == toks[j][k]:
                    k += 1
                best = max(best, k)
            ideal += len(toks[i]) - min(best, len(toks[i]) - 1)  # the last prompt token is always computed
        results = {}
        for cache in (["auto"] if args.skip_off else ["0", "auto"]):
            out = os.path.join(tmp, f"out-{cache}.jsonl")
            t0 = time.monotonic()
            subprocess.run([args.sluice, "batch", "-m", args.model, "-i", inp, "-o", out, "--parallel",
                            str(args.parallel), "--ctx", str(args.ctx), "--memory", args.memory, "--prefix-cache", cache,
                            "--progress-interval", "0"], check=True, capture_output=True)
            wall = time.monotonic() - t0
            usage = [json.loads(l)["response"]["body"]["usage"] for l in open(out)]
            prompt = sum(u["prompt_tokens"] for u in usage)
            cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
            texts = sorted((json.loads(l)["custom_id"], json.loads(l)["response"]["body"]["choices"][0]["text"])
                           for l in open(out))
            results[cache] = (prompt - cached, wall, texts)
            # issue 22's measure: against the instruction once plus every line's tokens after it; "the ideal" is
            # stricter: every line's tokens after its longest common prefix with an earlier line
            issue = n_instr + sum(len(t) - n_instr for t in toks)
            print(f"prefix cache {cache:>4}: {prompt - cached} of {prompt} prompt tokens computed "
                  f"({(prompt - cached) / issue:.3f} x the instruction + unique tokens {issue}; "
                  f"{(prompt - cached) / ideal:.3f} x the ideal {ideal}), {wall:.2f} s")
        if "0" in results:
            print("same answers with and without the cache:", results["0"][2] == results["auto"][2])
            print(f"wall time ratio (off / on): {results['0'][1] / results['auto'][1]:.1f}x")


if __name__ == "__main__":
    main()
