#!/usr/bin/env python3
"""Builds tiny random-weight Qwen3-MoE and Mixtral checkpoints in the hub's on-disk layout and writes Hugging Face
transformers reference outputs (float32, CPU, eager attention, eager experts) into tests/data/fixtures/<name>/.

Deterministic (fixed seeds). The weight seed is bumped until no router top-k cut and no greedy argmax sits on a
near-tie, so an engine that sums in another order takes the same discrete decisions. The written files are reloaded
through transformers' from_pretrained (its checkpoint converters) and must give bit-identical logits to the
in-memory model. See tools/reference/README.md for the verified transformers facts.

Usage:  python3 tools/reference/make_qwen_mixtral_fixtures.py [--out DIR] [--only NAME ...]
"""
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_common import (computed_note, fresh_dir, full_logits, greedy, load_eager_config,  # noqa: E402
                            random_fillers, run_fixtures, write_reference)

REPO_ROOT = Path(__file__).resolve().parents[2]
N_GREEDY = 12
ROUTE_MARGIN_MIN = 1e-3   # min gap between the k-th and (k+1)-th router logit, every token and layer
GREEDY_MARGIN_MIN = 1e-2  # min top1-top2 logit gap at every greedy step
MAX_SEED_TRIES = 200

FIXTURES = [
    dict(
        name="qwen3_moe_norm_dense", family="qwen3_moe", seed=100, n_ids=40, n_ids_b=17, weight_dtype="F32",
        config_form="hub",
        arch=dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                  num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[1], rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False,
                  use_sliding_window=False, sliding_window=None, max_window_layers=3, max_position_embeddings=256,
                  tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        notes="Qwen3-30B-A3B-style hub config.json ('num_experts', top-level rope_theta 1e6, use_sliding_window "
              "false, max_window_layers kept and ignored). norm_topk_prob true; mlp_only_layers [1] makes the middle "
              "layer a dense SwiGLU MLP of intermediate_size 96. GQA 4 query / 2 kv heads, head_dim 24 (so the "
              "query width 96 != hidden 64). 16 experts top-4, per-expert hub names "
              "mlp.experts.E.{gate,up,down}_proj.weight.",
    ),
    dict(
        name="qwen3_moe_nonorm_bf16_window", family="qwen3_moe", seed=200, n_ids=40, n_ids_b=15, weight_dtype="BF16",
        config_form="transformers5",
        arch=dict(vocab_size=224, hidden_size=64, intermediate_size=80, moe_intermediate_size=32,
                  num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                  num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2,
                  mlp_only_layers=[], rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  attention_bias=True, use_sliding_window=True, sliding_window=8, max_position_embeddings=256,
                  tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        notes="config.json as transformers 5 save_pretrained writes it ('num_local_experts', rope_parameters). "
              "norm_topk_prob false: expert weights are the raw softmax probabilities (not renormalised). "
              "decoder_sparse_step 2: layers 1 and 3 are MoE, 0 and 2 dense. use_sliding_window true with "
              "sliding_window 8: every layer attends to keys (p-8, p] (prompt 40 tokens). attention_bias true "
              "(q/k/v/o biases). GQA 8 query / 2 kv heads. rms_norm_eps 1e-5 (also the q_norm/k_norm eps). "
              "Weights stored as BF16; the reference is float32 math on the bf16-rounded weights.",
    ),
    dict(
        name="mixtral_hub", family="mixtral", seed=300, n_ids=36, n_ids_b=14, weight_dtype="F32", config_form="hub",
        arch=dict(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
                  rope_theta=1000000.0, sliding_window=None, max_position_embeddings=256,
                  tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
        notes="Mixtral-8x7B-style hub config.json (no head_dim key: head_dim = hidden/heads = 8; rope_theta 1e6; "
              "sliding_window null; router_jitter_noise 0). 8 experts top-2 renormalised, GQA 8 query / 2 kv heads. "
              "Hub names block_sparse_moe.gate.weight and block_sparse_moe.experts.E.w1/w2/w3.weight "
              "(w1 gate, w3 up, w2 down).",
    ),
]

CLASSES = {"qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM), "mixtral": (MixtralConfig, MixtralForCausalLM)}


# ---------------------------------------------------------------------------------------------------------------
# Config and model
# ---------------------------------------------------------------------------------------------------------------


def hub_config(spec):
    a = dict(spec["arch"])
    common = dict(attention_dropout=0.0, hidden_act="silu", initializer_range=0.02, use_cache=True,
                  torch_dtype="bfloat16" if spec["weight_dtype"] == "BF16" else "float32",
                  transformers_version=transformers.__version__)
    if spec["family"] == "qwen3_moe":
        cfg = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", output_router_logits=False,
                   router_aux_loss_coef=0.001, **common, **a)
    else:
        cfg = dict(architectures=["MixtralForCausalLM"], model_type="mixtral", output_router_logits=False,
                   router_aux_loss_coef=0.02, router_jitter_noise=0.0, **common, **a)
    return dict(sorted(cfg.items()))


def write_config(spec, out_dir):
    if spec["config_form"] == "hub":
        (out_dir / "config.json").write_text(json.dumps(hub_config(spec), indent=2) + "\n")
        return
    cfg_cls, _ = CLASSES[spec["family"]]
    cfg = cfg_cls(**spec["arch"], dtype=torch.bfloat16 if spec["weight_dtype"] == "BF16" else torch.float32)
    cfg.architectures = [CLASSES[spec["family"]][1].__name__]
    cfg.save_pretrained(str(out_dir))


def load_written_config(spec, out_dir):
    return load_eager_config(CLASSES[spec["family"]][0], out_dir)


def init_weights(model, cfg, gen):
    """Deterministic random weights scaled so attention and routing are far from uniform."""
    H = cfg.hidden_size

    normal, uniform = random_fillers(gen)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                uniform(p, 1.0, 2.6)  # the per-head norm fixes |q|, |k|: larger weights make attention peaked
            elif name.endswith("norm.weight"):
                uniform(p, 0.6, 1.4)
            elif name.endswith(".bias"):
                normal(p, 0.2)
            elif name.endswith("embed_tokens.weight"):
                normal(p, 1.0)
            elif name == "lm_head.weight":
                normal(p, 2.0 / math.sqrt(H))
            elif name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                normal(p, 1.8 / math.sqrt(H))
            elif name.endswith("v_proj.weight"):
                normal(p, 1.0 / math.sqrt(H))
            elif name.endswith("o_proj.weight"):
                normal(p, 1.0 / math.sqrt(p.shape[1]))
            elif name.endswith("mlp.gate.weight"):
                normal(p, 2.5 / math.sqrt(H))
            elif name.endswith("experts.gate_up_proj") or name.endswith("gate_proj.weight") \
                    or name.endswith("up_proj.weight"):
                normal(p, 1.0 / math.sqrt(H))
            elif name.endswith("experts.down_proj") or name.endswith("down_proj.weight"):
                normal(p, 1.0 / math.sqrt(p.shape[-1]))
            else:
                raise RuntimeError(f"no init rule for {name}")


def build_model(spec, cfg, seed):
    _, model_cls = CLASSES[spec["family"]]
    torch.manual_seed(0)
    model = model_cls(cfg).to(torch.float32).eval()
    assert model.config._attn_implementation == "eager" and model.config._experts_implementation == "eager"
    init_weights(model, cfg, torch.Generator().manual_seed(seed))
    if spec["weight_dtype"] == "BF16":
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model


# ---------------------------------------------------------------------------------------------------------------
# Reference computations and checks
# ---------------------------------------------------------------------------------------------------------------


def route_numpy(logits, top_k, renorm):
    """Independent float64 statement of the softmax router: sorted expert sets, weights by expert, min logit gap at
    the top-k cut."""
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    sets, weights, margin = [], [], float("inf")
    for t in range(p.shape[0]):
        order = np.argsort(-logits[t], kind="stable")
        sel = order[:top_k]
        margin = min(margin, logits[t, order[top_k - 1]] - logits[t, order[top_k]])
        w = p[t, sel] / (p[t, sel].sum() if renorm else 1.0)
        sets.append(tuple(sorted(int(e) for e in sel)))
        weights.append({int(e): float(x) for e, x in zip(sel, w)})
    return sets, weights, margin


@torch.no_grad()
def routing_report(model, cfg, ids):
    """Captures every router's (logits, weights, indices), checks them against route_numpy, returns the min margin."""
    captured, hooks = [], []
    for li, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and not isinstance(gate, torch.nn.Linear):
            hooks.append(gate.register_forward_hook(
                lambda mod, inp, out, li=li: captured.append((li, [o.detach().clone() for o in out]))))
    model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    for h in hooks:
        h.remove()
    renorm = getattr(cfg, "norm_topk_prob", True) if cfg.model_type == "qwen3_moe" else True
    margin, n_layers = float("inf"), len(captured)
    for li, (logits, tw, ti) in captured:
        sets, weights, m = route_numpy(logits.double().numpy(), cfg.num_experts_per_tok, renorm)
        margin = min(margin, m)
        for t in range(logits.shape[0]):
            assert tuple(sorted(ti[t].tolist())) == sets[t], (li, t)
            for e, w in zip(ti[t].tolist(), tw[t].tolist()):
                assert abs(weights[t][e] - w) < 1e-5 * max(1.0, abs(w)), (li, t, e, w, weights[t][e])
    return margin, n_layers


@torch.no_grad()
def attention_peakedness(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False, output_attentions=True)
    return float(np.mean([a[0, :, 8:, :].max(-1).values.mean().item() for a in out.attentions]))


@torch.no_grad()
def verify_gate_up_split(model, cfg, inter):
    moe = next(layer.mlp for layer in model.model.layers if hasattr(layer.mlp, "experts"))
    ex = moe.experts
    x = torch.randn(5, cfg.hidden_size, generator=torch.Generator().manual_seed(7))
    e = 1
    got = ex(x, torch.full((5, 1), e, dtype=torch.long), torch.ones(5, 1))
    g, u, d = ex.gate_up_proj[e, :inter], ex.gate_up_proj[e, inter:], ex.down_proj[e]
    want = (torch.nn.functional.silu(x @ g.T) * (x @ u.T)) @ d.T
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), "gate_up_proj: first I rows are not the gate"


def verify_sliding_window_semantics():
    """Qwen3-MoE applies sliding_window only when use_sliding_window is true; Mixtral whenever it is non-null."""
    assert Qwen3MoeConfig(use_sliding_window=False, sliding_window=8).sliding_window is None
    assert Qwen3MoeConfig(use_sliding_window=True, sliding_window=8).sliding_window == 8
    assert MixtralConfig(sliding_window=8).sliding_window == 8
    assert MixtralConfig().rope_parameters["rope_theta"] == 1e6 and MixtralConfig().rms_norm_eps == 1e-5


def expected_hub_names(spec, cfg):
    """Expert/router tensor names the hub checkpoints use (also what transformers 5.24 save_pretrained writes)."""
    names = set()
    for li in range(cfg.num_hidden_layers):
        p = f"model.layers.{li}."
        if spec["family"] == "mixtral":
            names.add(p + "block_sparse_moe.gate.weight")
            for e in range(cfg.num_local_experts):
                names.update(p + f"block_sparse_moe.experts.{e}.{w}.weight" for w in ("w1", "w2", "w3"))
        else:
            moe = li not in cfg.mlp_only_layers and (li + 1) % cfg.decoder_sparse_step == 0
            if moe:
                names.add(p + "mlp.gate.weight")
                for e in range(cfg.num_experts):
                    names.update(p + f"mlp.experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down"))
            else:
                names.update(p + f"mlp.{w}_proj.weight" for w in ("gate", "up", "down"))
    return names


# ---------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------


def make_fixture(spec, out_root):
    name = spec["name"]
    out_dir = fresh_dir(out_root, name)
    write_config(spec, out_dir)
    cfg = load_written_config(spec, out_dir)
    vocab = cfg.vocab_size
    pgen = torch.Generator().manual_seed(spec["seed"] + 17)
    ids = torch.randint(3, vocab, (spec["n_ids"],), generator=pgen).tolist()
    ids_b = torch.randint(3, vocab, (spec["n_ids_b"],), generator=pgen).tolist()

    for attempt in range(MAX_SEED_TRIES):
        seed = spec["seed"] + attempt
        model = build_model(spec, cfg, seed)
        toks, gaps = greedy(model, ids, N_GREEDY)
        toks_b, gaps_b = greedy(model, ids_b, N_GREEDY)
        ma, n_moe = routing_report(model, cfg, ids + toks)
        mb, _ = routing_report(model, cfg, ids_b + toks_b)
        min_route, min_gap = min(ma, mb), min(gaps + gaps_b)
        if (min_route >= ROUTE_MARGIN_MIN and min_gap >= GREEDY_MARGIN_MIN and len(set(toks)) >= 3
                and len(set(toks_b)) >= 3):
            break
    else:
        raise RuntimeError(f"{name}: no seed within {MAX_SEED_TRIES} tries met the margins")
    inter = cfg.intermediate_size if spec["family"] == "mixtral" else cfg.moe_intermediate_size
    verify_gate_up_split(model, cfg, inter)

    # Weights through transformers' own save_pretrained (it reverts the fused in-memory experts to the hub's
    # per-expert names); the hand-written hub config.json is kept.
    cfg_text = (out_dir / "config.json").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        dtype = torch.bfloat16 if spec["weight_dtype"] == "BF16" else torch.float32
        _, model_cls = CLASSES[spec["family"]]
        copy = model_cls(cfg).eval()
        copy.load_state_dict(model.state_dict())
        copy.to(dtype).save_pretrained(tmp)
        written = sorted(Path(tmp).glob("*.safetensors"))
        assert [p.name for p in written] == ["model.safetensors"], written
        shutil.copy(written[0], out_dir / "model.safetensors")
    (out_dir / "config.json").write_text(cfg_text)
    with safe_open(str(out_dir / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        want_dtype = torch.bfloat16 if spec["weight_dtype"] == "BF16" else torch.float32
        assert all(f.get_tensor(k).dtype == want_dtype for k in keys)
    missing = expected_hub_names(spec, cfg) - keys
    assert not missing, f"{name}: save_pretrained did not write hub names: {sorted(missing)[:5]}"
    assert not any("gate_up_proj" in k for k in keys)

    _, model_cls = CLASSES[spec["family"]]
    loaded = model_cls.from_pretrained(str(out_dir), dtype=torch.float32, attn_implementation="eager",
                                       experts_implementation="eager").eval()
    ref, ref_b = full_logits(loaded, ids), full_logits(loaded, ids_b)
    assert torch.equal(ref, full_logits(model, ids)), f"{name}: reloaded checkpoint differs from in-memory model"
    assert torch.equal(ref_b, full_logits(model, ids_b)), f"{name}: reloaded checkpoint differs (prompt b)"
    assert greedy(loaded, ids, N_GREEDY)[0] == toks and greedy(loaded, ids_b, N_GREEDY)[0] == toks_b
    window = loaded.config.sliding_window
    if window:
        # the window changes the result: the same weights without it give other logits
        nowin = model_cls.from_pretrained(str(out_dir), dtype=torch.float32, attn_implementation="eager",
                                          experts_implementation="eager")
        nowin.config.sliding_window = None
        nowin.eval()
        diff = float((full_logits(nowin, ids) - ref).abs().max())
        assert diff > 1e-2, f"{name}: sliding window has no effect ({diff})"
    peak = attention_peakedness(loaded, ids)

    write_reference(
        out_dir, ref, ref_b, ids, toks, ids_b, toks_b,
        reference=f"transformers {transformers.__version__} {model_cls.__name__} float32",
        notes=spec["notes"] + computed_note(N_GREEDY) + (
            f" Weight seed {seed}. {n_moe} MoE layers. Min router top-k logit "
            f"gap {min_route:.3g}, min greedy top1-top2 gap {min_gap:.3g}, mean max attention probability "
            f"{peak:.2f}."),
    )
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"[{name}] seed {seed} (attempt {attempt + 1}); {size / 1e6:.2f} MB; max|logit| {ref.abs().max():.2f}; "
          f"greedy a={toks} b={toks_b}; route margin {min_route:.2e}; greedy gap {min_gap:.3f}; peak {peak:.2f}"
          + (f"; window changes logits by {diff:.2f}" if window else ""))


def main():
    run_fixtures(__doc__, FIXTURES, make_fixture, checks=(verify_sliding_window_semantics,))


if __name__ == "__main__":
    main()
