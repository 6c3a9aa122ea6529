#!/usr/bin/env python3
"""lm-evaluation-harness (the PyPI package lm-eval, `--model local-completions`) against `sluice serve` on the
trained model (models/sluice-k2-tiny, a real tokenizer), end to end and offline.

Writes two small local tasks (JSONL read through task YAMLs): a multiple-choice one (loglikelihood requests: echo,
logprobs, token-id prompts in batches) and a generate_until one (greedy, stop strings). lm-eval tokenizes through the
server (its remote tokenizer: /tokenizer_info, /tokenize, /detokenize). Then checks every logged sample against the
CLI: each loglikelihood equals the sum of log_softmax(`sluice logits`) over the continuation within 1e-3 (and
is_greedy the argmax test), each generation equals `sluice generate` on the same ids cut at the stop strings.

Usage: test_lm_eval.py --sluice PATH_TO_SLUICE [--keep DIR]
Exits 77 (CTest's skip code) when lm_eval is not installed (bash scripts/python-env.sh installs it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util as su  # noqa: E402

try:
    import lm_eval  # noqa: F401
    import numpy as np
except ImportError:
    print("skipped: lm_eval is not installed (bash scripts/python-env.sh)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "sluice-k2-tiny")

MC = [  # question, choices, answer index
    ("In the beginning God created the", ["heaven", "river", "idea", "seven"], 0),
    ("And God said, Let there be", ["light", "blue", "quickly", "mat"], 0),
    ("The sun rises in the", ["east", "west", "cup", "song"], 0),
    ("Water is", ["wet", "dry", "loud", "square"], 0),
    ("She opened the door and", ["walked in", "ate the moon", "purple", "seven"], 0),
    ("A dog likes to", ["play", "calculate", "melt", "orbit"], 0),
]
GEN = ["Once upon a time", "The little girl", "One day, a boy named Tim", "The dog and the cat"]


def write_tasks(d):
    with open(os.path.join(d, "mc.jsonl"), "w") as f:
        for q, choices, a in MC:
            f.write(json.dumps({"question": q, "choices": choices, "answer": a}) + "\n")
    with open(os.path.join(d, "gen.jsonl"), "w") as f:
        for p in GEN:
            f.write(json.dumps({"prompt": p, "target": ""}) + "\n")
    common = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {}\ntest_split: test\n"
    with open(os.path.join(d, "sluice_mc.yaml"), "w") as f:
        f.write("task: sluice_mc\n" + common.format(json.dumps(os.path.join(d, "mc.jsonl"))) +
                "output_type: multiple_choice\ndoc_to_text: \"{{question}}\"\ndoc_to_choice: \"{{choices}}\"\n"
                "doc_to_target: \"{{answer}}\"\nmetric_list:\n  - metric: acc\n")
    with open(os.path.join(d, "sluice_gen.yaml"), "w") as f:
        f.write("task: sluice_gen\n" + common.format(json.dumps(os.path.join(d, "gen.jsonl"))) +
                "output_type: generate_until\ndoc_to_text: \"{{prompt}}\"\ndoc_to_target: \"{{target}}\"\n"
                "generation_kwargs:\n  until: [\".\", \"\\n\"]\n  max_gen_toks: 24\n  do_sample: false\n"
                "  temperature: 0\nmetric_list:\n  - metric: exact_match\n")


def start_server(sluice, log_path):
    return su.start_server(sluice, MODEL, ["--alias", "sluice-k2-tiny", "--parallel", "8", "--ctx", "4096"], log_path)


def tokenize(port, text):
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", method="POST",
                                 data=json.dumps({"prompt": text, "add_special_tokens": False}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())["tokens"]


def encode_pair(port, context, continuation):
    """lm-eval's TemplateLM._encode_pair for a causal model, with the server's tokenizer."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole, ctx = tokenize(port, context + continuation), tokenize(port, context)
    return ctx, whole[len(ctx):]


def cli_loglikelihood(sluice, tmp, ctx, cont):
    out = os.path.join(tmp, "logits.npy")
    ids = ctx + cont
    subprocess.run([sluice, "logits", "-m", MODEL, "--ids", ",".join(map(str, ids)), "-o", out, "--threads", "2"],
                   check=True, capture_output=True)
    logits = np.load(out).astype(np.float64)
    lp = logits - logits.max(axis=1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(axis=1, keepdims=True))
    total, greedy = 0.0, True
    for i in range(len(ctx), len(ids)):
        total += lp[i - 1, ids[i]]
        greedy = greedy and int(np.argmax(logits[i - 1])) == ids[i]
    return total, greedy


def cli_generate(sluice, ids, n, until):
    out = subprocess.run([sluice, "generate", "-m", MODEL, "--ids", ",".join(map(str, ids)), "-n", str(n),
                          "--json", "--threads", "2"], check=True, capture_output=True, text=True).stdout
    text = json.loads(out.strip().splitlines()[-1])["text"]
    for u in until:
        text = text.split(u)[0]
    return text


def samples(out_dir, task):
    for root, _, files in os.walk(out_dir):
        for f in files:
            if f.startswith(f"samples_{task}_") and f.endswith(".jsonl"):
                with open(os.path.join(root, f)) as fh:
                    return [json.loads(l) for l in fh if l.strip()]
    raise AssertionError(f"lm-eval wrote no samples for {task} under {out_dir}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--keep", help="write the task files, lm-eval output and server log here")
    args = ap.parse_args()
    sluice = os.path.abspath(args.sluice)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        run_checks(sluice, os.path.abspath(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="sluice-lm-eval-") as tmp:
            run_checks(sluice, tmp)


def run_checks(sluice, tmp):
    write_tasks(tmp)
    server, port = start_server(sluice, os.path.join(tmp, "server.log"))
    failures = []
    try:
        # offline, and every cache inside the scratch folder
        env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=os.path.join(tmp, "hf"),
                   TOKENIZERS_PARALLELISM="false")
        t0 = time.time()
        model_args = (f"base_url=http://127.0.0.1:{port}/v1/completions,model=sluice-k2-tiny,"
                      "tokenizer_backend=remote,num_concurrent=1,max_retries=1,max_length=1024")
        run = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args",
                              model_args, "--tasks", "sluice_mc,sluice_gen", "--include_path", tmp, "--batch_size", "8",
                              "--output_path", os.path.join(tmp, "out"), "--log_samples"],
                             env=env, capture_output=True, text=True, timeout=600)
        print(f"lm-eval ran {time.time() - t0:.1f} s, exit {run.returncode}")
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-8000:])
            sys.exit(1)
        print("\n".join(l for l in run.stdout.splitlines() if "|" in l))
        n_ll, worst = 0, 0.0
        for s in samples(os.path.join(tmp, "out"), "sluice_mc"):
            # arguments: {"gen_args_i": {"arg_0": context, "arg_1": continuation}}; resps: [[[ll, is_greedy]]]
            # (logged as strings)
            for i, resp in enumerate(s["resps"]):
                arg = s["arguments"][f"gen_args_{i}"]
                context, continuation = arg["arg_0"], arg["arg_1"]
                got_ll, got_greedy = float(resp[0][0]), str(resp[0][1]) == "True"
                ctx, cont = encode_pair(port, context, continuation)
                want_ll, want_greedy = cli_loglikelihood(sluice, tmp, ctx, cont)
                n_ll += 1
                worst = max(worst, abs(got_ll - want_ll))
                if abs(got_ll - want_ll) > 1e-3 or got_greedy != want_greedy:
                    failures.append(f"loglikelihood of {continuation!r} after {context!r}: lm-eval "
                                    f"{got_ll} {got_greedy}, sluice logits {want_ll} {want_greedy}")
        n_gen = 0
        for s in samples(os.path.join(tmp, "out"), "sluice_gen"):
            arg = s["arguments"]["gen_args_0"]
            got = s["filtered_resps"][0]
            until = arg["arg_1"]["until"]
            want = cli_generate(sluice, tokenize(port, arg["arg_0"]), arg["arg_1"]["max_gen_toks"], until)
            n_gen += 1
            if got != want:
                failures.append(f"generation after {arg['arg_0']!r}: lm-eval {got!r}, sluice generate {want!r}")
        if n_ll != sum(len(c) for _, c, _ in MC) or n_gen != len(GEN):
            failures.append(f"lm-eval logged {n_ll} loglikelihoods and {n_gen} generations")
        print(f"checked {n_ll} loglikelihoods (largest difference from sluice logits {worst:.2e}) and {n_gen} "
              f"generations against sluice generate")
    finally:
        server.terminate()
        server.wait(timeout=30)
    for f in failures:
        print("FAIL:", f)
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
