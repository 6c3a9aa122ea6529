#!/usr/bin/env python3
"""Speculative vs plain decoding in one run: `sluice generate --json` on the same target under the same memory budget
for the target (experts streamed from disk), plain, with prompt-lookup drafts and with a draft model (each with the
pays-off gate off and on: --draft-gate), on a repetitive prompt, on ordinary text and on random words. Prints tokens per verify pass, expert bytes the target read per decoded token, decode
tok/s (median of --repeat runs; each run is a fresh process, so the expert cache starts cold), and checks that every
speculative run printed exactly the plain run's ids. With --temp T every run samples (seeded), and the draft model's
rows come with drafts drawn from its distribution and with its argmax guesses.

    python3 bench/speculative.py --sluice build/release/bin/sluice \
        --target models/sluice-k2-tiny --draft models/sluice-k2-tiny-draft

The draft model's share (--draft-memory) is added on top of the target's --memory, so the target's budget, and with
it its expert cache, is the same in every row; the draft's reads are counted apart (its own expert source: draft KB
is all it read in the run, prefill included). KB/token counts the target's expert reads after the first token
(prefill excluded) per token after the first; prefetched experts count when read, used or not."""
import argparse
import json
import random
import statistics
import subprocess
import sys

PROMPTS = {
    # prompt lookup should win: the continuation repeats what the prompt already holds
    "repetitive": ("The ark was three hundred cubits long, fifty cubits wide and thirty cubits high. " * 4
                   + "The ark was three hundred"),
    # ordinary text the model has not seen verbatim
    "ordinary": "A programmer who reads the manual before asking a question is",
    # random words (a fixed draw): nothing to look up, little for a draft model to predict; the gate must keep the
    # loss small here
    "random": " ".join(random.Random(7).choice(["cubit", "lantern", "seven", "quietly", "harbour", "of", "vex",
                                                 "marble", "tomorrow", "jargon", "fig", "north"]) for _ in range(24)),
}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def run(args, extra):
    cmd = [args.sluice, "generate", "-m", args.target, "-n", str(args.tokens), "--ignore-eos", "--json",
           "-t", str(args.threads), "--ctx", str(args.ctx)] + args.extra.split() + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--memory", default="80M", help="the target's budget (small, so its experts stream)")
    ap.add_argument("--draft-memory", default="80M", help="the draft model's share, added on top")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=256, help="context reserved in each plan")
    ap.add_argument("--draft-tokens", default="2,4", help="draft lengths to try, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--extra", default="", help="more generate flags for every run, e.g. --no-prefetch")
    ap.add_argument("--temp", type=float, default=0.0,
                    help="sample at this temperature (every run seeded with --seed): the draft model's rows then come "
                         "twice, drafts drawn (--draft-sampling on) and guessed (off); the ids can no longer equal "
                         "plain decoding's, so 'same ids' checks that the repeats of a row agree")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.temp > 0:
        args.extra = (args.extra + f" --temp {args.temp} -s {args.seed}").strip()

    total = parse_size(args.memory) + parse_size(args.draft_memory)
    configs = [("plain", [])]
    for k in args.draft_tokens.split(","):
        for gate in ("off", "on"):
            g = ["--draft-gate", gate]
            configs.append((f"lookup k={k} {gate}", ["--speculative", k] + g))
            draft = ["--speculative", k, "--draft-model", args.draft, "--memory", str(total), "--draft-memory",
                     args.draft_memory] + g
            if args.temp > 0:
                configs.append((f"draft k={k} {gate} drawn", draft))
                configs.append((f"draft k={k} {gate} guess", draft + ["--draft-sampling", "off"]))
            else:
                configs.append((f"draft k={k} {gate}", draft))
    print(f"target {args.target}, draft {args.draft}; target budget {args.memory}, draft {args.draft_memory}; "
          f"{args.tokens} tokens, median of {args.repeat} runs, {args.threads} thread(s) {args.extra}")
    print(f"{'prompt':<11} {'drafter':<23} {'tok/verify':>10} {'accepted':>9} {'KB/token':>9} {'tok/s':>8} "
          f"{'vs plain':>8} {'draft ms':>8} {'draft KB':>8}  same ids")
    failed = False
    for pname, text in PROMPTS.items():
        plain_ids = None
        plain_tps = None
        for name, extra in configs:
            mem = [] if "--memory" in extra else ["--memory", args.memory]
            runs = [run(args, ["-p", text] + mem + extra) for _ in range(args.repeat)]
            tps = statistics.median(r["decode_tok_per_s"] for r in runs)
            j = runs[0]
            same = all(r["ids"] == runs[0]["ids"] for r in runs)
            if plain_ids is None:
                plain_ids, plain_tps = j["ids"], tps
            if args.temp == 0:
                same = same and j["ids"] == plain_ids
            failed |= not same
            spec = j.get("speculative", {})
            per_pass = spec.get("tokens_per_verify_pass", 1.0)
            acc = f"{spec['accepted']}/{spec['drafted']}" if spec else "-"
            kb = statistics.median(r.get("decode_expert_bytes_per_token", 0) for r in runs) / 1024
            dms = statistics.median(r["draft_ms"] for r in runs) if "draft_ms" in j else 0
            dkb = j.get("draft_expert_bytes_read", 0) / 1024
            print(f"{pname:<11} {name:<23} {per_pass:>10.2f} {acc:>9} {kb:>9.1f} {tps:>8.1f} {tps / plain_tps:>7.2f}x "
                  f"{dms:>8.1f} {dkb:>8.0f}  {'yes' if same else 'NO'}")
    if failed:
        print("error: a speculative run's ids differ from plain greedy" if args.temp == 0 else
              "error: the repeats of a seeded run gave different ids", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
