#!/usr/bin/env python3
"""Would draft trees pay where sluice runs?  Chains against trees, priced in experts read.

A verify pass of r rows reads the union of its rows' experts, so a tree of drafts (EAGLE's top-k > 1) buys
acceptance with rows.  This script measures both sides on a trained target and its draft model, in transformers
(independent of sluice's own code):

* Acceptance, exactly for greedy decoding.  The target's greedy continuation S of each prompt is computed once;
  the draft model's logits over S (teacher forcing) give, at every position, the rank the draft gives the target's
  token.  Every node on an accepted path has exactly the committed context, so a verify starting after S[:i+1]
  accepts as long as (rank at i, rank at i+1, ...) stays a path of the tree: tokens per verify for any static tree
  follow from the ranks alone.
* Bytes, with the experts the rows really route to: each verify's rows (the decode row and one per tree node) are
  run through the target with their own contexts (nodes off the accepted path are drafted tokens the target would
  reject), and the union of the routed experts of each MoE layer is counted.  Every expert is counted as a read
  (no cache): the drive bytes of a pass with a cold cache, which is what the draft gate of `runtime/draft_gate.h`
  prices too.  Plain decoding reads top-k experts a layer a token.
* Beside it, the same acceptance priced by the gate's independent-routing formula E (1 - (1 - k/E)^r) at a given
  E and k (default: Kimi K3's 896 and 16), for a target whose routing is that of random rows.

The draft model's own passes (one per tree level) are left out, which favours trees (they have more draft rows).

    python3 bench/spec_trees.py --target models/sluice-k2-tiny --draft models/sluice-k2-tiny-draft
"""
from __future__ import annotations

import argparse
import json
import os
import sys

PROMPTS = [  # tools/routing/make_traces.sh: the six tuning prompts and the six held-out ones
    "And it came to pass in those days, that",
    "The programmer looked at the terminal and said",
    "A fool and his money are soon",
    "In the beginning of the winter the farmers of the valley",
    "Hacker, n. A person who enjoys exploring the details of",
    "Love is patient and kind; the letter said that",
    "Blessed are they that mourn, for",
    "The system administrator rebooted the server because",
    "He who laughs last",
    "Dear Sir, I write to inform you that the ship",
    "Kludge, n. A clever programming trick that",
    "The old man walked along the river and thought about",
]


def chain(k):
    return {(0,) * j for j in range(1, k + 1)}


def chain_with_siblings(depth):
    """The top-1 chain of `depth` drafts, and beside each of its nodes the draft's second choice as a leaf."""
    nodes = set()
    for j in range(depth):
        nodes.add((0,) * (j + 1))
        nodes.add((0,) * j + (1,))
    return nodes


def branches(widths):
    """Every node at depth d has widths[d] children (the draft's top widths[d])."""
    nodes, level = set(), [()]
    for w in widths:
        level = [p + (r,) for p in level for r in range(w)]
        nodes.update(level)
    return nodes


def two_chains(length):
    """The root's top two drafts, each followed by a top-1 chain of length - 1: 2 * length nodes."""
    return {(r,) + (0,) * j for r in (0, 1) for j in range(length)}


SHAPES = [(f"chain {k}", chain(k)) for k in range(1, 7)] + [
    ("chain 2 + the second choice beside each node", chain_with_siblings(2)),
    ("chain 3 + the second choice beside each node", chain_with_siblings(3)),
    ("the root's top 2, each followed by a chain of 1", two_chains(2)),
    ("the root's top 2, each followed by a chain of 2", two_chains(3)),
    ("binary, depth 2", branches([2, 2])),
    ("binary, depth 3", branches([2, 2, 2])),
    ("the root's top 3, each followed by a chain of 1", {(r,) + (0,) * j for r in (0, 1, 2) for j in range(2)}),
]


class Routed:
    """A model with a hook on every MoE gate that keeps the experts each row routed to."""

    def __init__(self, path, torch, transformers):
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.model.eval()
        self.routes = []
        self.moe_layers = 0
        for module in self.model.modules():
            if type(module).__name__.endswith("TopkRouter"):
                module.register_forward_hook(self._keep)
                self.moe_layers += 1
        cfg = self.model.config
        self.experts = cfg.n_routed_experts
        self.top_k = cfg.num_experts_per_tok
        self.cache = {}

    def _keep(self, _module, _inputs, output):
        self.routes.append(output[2].detach())  # (rows, top_k) expert ids, in layer order

    def run(self, ids):
        """Logits (positions, vocab) and, per MoE layer, the routed experts of every position."""
        self.routes = []
        with self.torch.no_grad():
            logits = self.model(self.torch.tensor([ids])).logits[0]
        return logits, [r.tolist() for r in self.routes]

    def last(self, ids):
        """(logits, per-layer expert sets) of the last position of ids; cached by context."""
        key = tuple(ids)
        if key not in self.cache:
            logits, routes = self.run(ids)
            self.cache[key] = (logits[-1], [frozenset(r[-1]) for r in routes])
        return self.cache[key]


def greedy(target, prompt, tokens):
    ids = list(prompt)
    for _ in range(tokens):
        logits, _ = target.last(ids)
        ids.append(int(logits.argmax()))
    return ids


def independent_union(rows, experts, top_k):
    return experts * (1.0 - (1.0 - top_k / experts) ** rows)


def simulate(shape, seq, start, ranks, target, draft, tf_routes, torch):
    """Verify passes over seq from position `start` (the last prompt token) with a static tree `shape`.

    Returns (tokens, verifies, experts read summed over the MoE layers)."""
    tokens = verifies = experts_read = 0
    i = start
    end = len(seq) - 1  # the last position whose next token is known
    by_parent = {}
    for node in shape:
        by_parent.setdefault(node[:-1], []).append(node)
    while i < end:
        # acceptance: walk the ranks of the target's own tokens
        path, j = (), 0
        while i + j < end and path + (ranks[i + j],) in shape:
            path += (ranks[i + j],)
            j += 1
        produced = min(j + 1, end - i)
        # rows: the decode row (its experts from teacher forcing) and one per node
        union = [set(layer[i]) for layer in tf_routes]
        frontier = [((), list(seq[: i + 1]))]
        while frontier:
            node, ctx = frontier.pop()
            children = by_parent.get(node, [])
            if not children:
                continue
            top = torch.topk(draft.last(ctx)[0], max(c[-1] for c in children) + 1).indices.tolist()
            for child in children:
                child_ctx = ctx + [top[child[-1]]]
                on_path = child_ctx == list(seq[: len(child_ctx)])
                if on_path:
                    experts = [layer[len(child_ctx) - 1] for layer in tf_routes]
                else:
                    experts = target.last(child_ctx)[1]
                for layer, e in zip(union, experts):
                    layer.update(e)
                frontier.append((child, child_ctx))
        experts_read += sum(len(u) for u in union)
        tokens += produced
        verifies += 1
        i += produced
    return tokens, verifies, experts_read


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--experts", type=int, default=896, help="E for the independent-routing price (K3: 896)")
    ap.add_argument("--top-k", type=int, default=16, help="k for the independent-routing price (K3: 16)")
    ap.add_argument("--json", help="write the table here as well")
    args = ap.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    target = Routed(args.target, torch, transformers)
    draft = Routed(args.draft, torch, transformers)

    totals = {name: [0, 0, 0] for name, _ in SHAPES}
    plain_experts = 0
    for text in PROMPTS[: args.prompts]:
        prompt = tok.encode(text).ids
        seq = greedy(target, prompt, args.tokens)
        logits, tf_routes = target.run(seq)
        if any(int(logits[p].argmax()) != seq[p + 1] for p in range(len(prompt) - 1, len(seq) - 1)):
            sys.exit("teacher forcing disagrees with the step-by-step greedy continuation")
        dlogits, _ = draft.run(seq)
        start = len(prompt) - 1
        ranks = {}
        for p in range(start, len(seq) - 1):
            ranks[p] = int((dlogits[p] > dlogits[p][seq[p + 1]]).sum())
        plain_experts += (len(seq) - 1 - start) * target.top_k * target.moe_layers
        for name, shape in SHAPES:
            t, v, e = simulate(shape, seq, start, ranks, target, draft, tf_routes, torch)
            totals[name] = [a + b for a, b in zip(totals[name], (t, v, e))]

    print(f"target {args.target}: {target.moe_layers} MoE layers, {target.experts} experts, top {target.top_k}; "
          f"draft {args.draft}; {args.prompts} prompts x {args.tokens} greedy tokens")
    print(f"independent-routing price at E = {args.experts}, k = {args.top_k}")
    print()
    header = ("shape", "nodes", "tokens/verify", "experts/token (this target)", "x plain",
              f"x plain at E={args.experts}, k={args.top_k}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []
    plain_per_token = target.top_k * target.moe_layers
    for name, shape in SHAPES:
        t, v, e = totals[name]
        per_verify = t / v
        measured = (e / t) / plain_per_token
        modeled = independent_union(1 + len(shape), args.experts, args.top_k) / per_verify / args.top_k
        rows.append({"shape": name, "nodes": len(shape), "tokens_per_verify": per_verify,
                     "experts_per_token": e / t, "measured_vs_plain": measured, "modeled_vs_plain": modeled})
        print(f"| {name} | {len(shape)} | {per_verify:.2f} | {e / t:.1f} | {measured:.2f}x | {modeled:.2f}x |")
    print(f"\nplain decoding: {plain_per_token} experts per token ({plain_experts} in all)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "draft": args.draft, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
