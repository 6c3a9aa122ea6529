"""What the transformers fixture scripts (make_*_fixtures.py) share: the float32 logits of a prompt, greedy decoding
that recomputes the whole sequence each step, deterministic random fills, the reference files a fixture holds
(ref_logits.npy, ref_logits_b.npy, ref.json) and the scripts' command line."""
import argparse
import json
import shutil
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float32)


def greedy_steps(logits_of, ids, n):
    """n argmax steps, each recomputing the whole sequence (no KV cache): logits_of(seq) gives the rows of logits of
    seq. Returns the tokens and each step's top1-top2 gap."""
    seq, toks, gaps = list(ids), [], []
    for _ in range(n):
        logits = logits_of(seq)[-1]
        top2 = torch.topk(logits, 2).values
        gaps.append(float(top2[0] - top2[1]))
        toks.append(int(torch.argmax(logits)))
        seq.append(toks[-1])
    return toks, gaps


@torch.no_grad()
def greedy(model, ids, n):
    """greedy_steps on a transformers model's full_logits. Returns tokens and top1-top2 gaps."""
    return greedy_steps(lambda seq: full_logits(model, seq), ids, n)


def random_fillers(gen):
    """normal(t, std) and uniform(t, lo, hi): fill t in place with float32 draws from gen."""
    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float32) * std)

    def uniform(t, lo, hi):
        t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=gen, dtype=torch.float32))
    return normal, uniform


def load_eager_config(cfg_cls, out_dir):
    """The config.json written in out_dir, read back (so the reference sees what an engine sees), with eager
    attention and experts."""
    cfg = cfg_cls.from_json_file(str(out_dir / "config.json"))
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def fresh_dir(out_root, name):
    """out_root/name, emptied (made anew)."""
    out_dir = out_root / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    return out_dir


def computed_note(n_greedy):
    """The notes' sentence on how a transformers reference was computed (eager, float32, CPU, full recompute)."""
    return (f" Computed on CPU in float32 with attn_implementation=eager, experts_implementation=eager, "
            f"torch {torch.__version__.split('+')[0]}; greedy = {n_greedy} argmax steps recomputing the full "
            f"sequence (no KV cache, no EOS stop).")


def write_reference(out_dir, ref, ref_b, ids, toks, ids_b, toks_b, reference, notes):
    """A fixture's reference: the logits of prompts a and b (float32 .npy) and ref.json with the prompts, their greedy
    tokens, what computed them and the notes."""
    np.save(out_dir / "ref_logits.npy", ref.numpy().astype(np.float32))
    np.save(out_dir / "ref_logits_b.npy", ref_b.numpy().astype(np.float32))
    ref_json = OrderedDict(ids=ids, greedy=toks, ids_b=ids_b, greedy_b=toks_b, reference=reference, notes=notes)
    (out_dir / "ref.json").write_text(json.dumps(ref_json, indent=1) + "\n")


def run_fixtures(doc, fixtures, make_fixture, checks=()):
    """The scripts' main: --out (tests/data/fixtures) and --only NAME...; one thread, deterministic torch; the
    checks of transformers' behaviour first, then make_fixture(spec, out) for each fixture asked for."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "data" / "fixtures")
    ap.add_argument("--only", nargs="*", help="fixture names to (re)build")
    args = ap.parse_args()
    import transformers  # here, so the scripts that need only the helpers above need no transformers
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    for check in checks:
        check()
    names = {s["name"] for s in fixtures}
    for n in args.only or []:
        if n not in names:
            sys.exit(f"unknown fixture {n}; known: {sorted(names)}")
    for spec in fixtures:
        if not args.only or spec["name"] in args.only:
            make_fixture(spec, args.out)
