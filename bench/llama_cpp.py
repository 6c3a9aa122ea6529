#!/usr/bin/env python3
"""In-memory prefill and decode, sluice against llama.cpp on the same model and threads (issue 25's comparison).

sluice runs `generate --json` on a Hugging Face folder with --memory 0 (weights served from the memory map); llama.cpp
runs through its Python package (llama-cpp-python, which you install and build yourself, e.g. with
CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python) on a GGUF of the same weights (llama.cpp's
convert_hf_to_gguf.py with --outtype bf16). Both read the same 256 random token ids (a fixed draw), prefill them in
one chunk of 256 rows and decode --tokens greedy tokens after a warm-up; runs alternate (llama.cpp, sluice, ...)
--repeat times and the medians are printed with their ratio. Both files are read once first, so the runs measure
the page cache, not the drive: this is the "model fits in memory" case, and each process loads its model anew.

    python3 bench/llama_cpp.py --sluice build/release/bin/sluice --model ds8 --gguf ds8.gguf --threads 2

A DeepSeek-V3-shaped BF16 model for it: `sluice synth --like deepseek-v3 --layers 8 --experts 32 --scale-down 2
--vocab-size 129280 -o ds8` with the DeepSeek-V3 tokenizer files copied in (the converter needs a tokenizer it
knows; tests/data/tokenizers/deepseek_v3 holds one)."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

PROMPT_TOKENS = 256


def prompt_ids():
    r = random.Random(7)
    return [r.randrange(1000, 120000) for _ in range(PROMPT_TOKENS)]


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def run_sluice(args, ids):
    cmd = [args.sluice, "generate", "-m", args.model, "--memory", "0", "-t", str(args.threads), "--ids",
           ",".join(map(str, ids)), "-n", str(args.tokens), "--ignore-eos", "--temp", "0", "--chunk",
           str(PROMPT_TOKENS), "--ctx", str(PROMPT_TOKENS + args.tokens + 16), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d["prefill_tok_per_s"], d["decode_tok_per_s"]


LLAMA_CHILD = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
path, threads, n_gen, ids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=len(ids) + n_gen + 16,
            n_batch=len(ids) + n_gen + 16, n_ubatch=len(ids), verbose=False)
llm.eval(ids[:8]); llm.reset()  # warm-up, as llama-bench does
t0 = time.perf_counter(); llm.eval(ids); t1 = time.perf_counter()
for _ in range(n_gen):
    llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
t2 = time.perf_counter()
print(json.dumps([len(ids) / (t1 - t0), n_gen / (t2 - t1)]))
"""


def run_llama(args, ids):
    # A child process per run, as for sluice: each loads its model anew.
    out = subprocess.run([args.python, "-c", LLAMA_CHILD, args.gguf, str(args.threads), str(args.tokens),
                          json.dumps(ids)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"llama-cpp-python failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True, help="sluice binary")
    ap.add_argument("--model", required=True, help="Hugging Face model folder (sluice's input)")
    ap.add_argument("--gguf", required=True, help="the same weights as a GGUF file (llama.cpp's input)")
    ap.add_argument("--python", default=sys.executable, help="a Python with llama_cpp importable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32, help="tokens to decode")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for p in (args.model, args.gguf):
        if not os.path.exists(p):
            sys.exit(f"{p}: not found")
    weights = [os.path.join(args.model, f) for f in sorted(os.listdir(args.model)) if f.endswith(".safetensors")]
    if not weights:
        sys.exit(f"{args.model}: no .safetensors files")
    t = time.perf_counter()
    warm(weights + [args.gguf])
    print(f"read both models once ({time.perf_counter() - t:.1f} s); {args.threads} threads, {PROMPT_TOKENS}-token "
          f"prompt, {args.tokens} tokens decoded, {args.repeat} alternating runs each")
    ids = prompt_ids()
    rows = {"llama.cpp": [], "sluice": []}
    for i in range(args.repeat):
        for name, fn in (("llama.cpp", run_llama), ("sluice", run_sluice)):
            pp, tg = fn(args, ids)
            rows[name].append((pp, tg))
            print(f"  run {i + 1} {name:9s} prefill {pp:8.2f} tok/s  decode {tg:7.2f} tok/s", flush=True)
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
    for k, (pp, tg) in med.items():
        print(f"median {k:9s} prefill {pp:8.2f} tok/s  decode {tg:7.2f} tok/s")
    print(f"sluice / llama.cpp: prefill {med['sluice'][0] / med['llama.cpp'][0]:.2f}x, "
          f"decode {med['sluice'][1] / med['llama.cpp'][1]:.2f}x")


if __name__ == "__main__":
    main()
