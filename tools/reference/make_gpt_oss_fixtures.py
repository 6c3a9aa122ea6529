#!/usr/bin/env python3
"""Builds tiny random-weight gpt-oss checkpoints in the hub's on-disk layout (BF16 spine, MXFP4 experts as
`mlp.experts.{gate_up,down}_proj_{blocks,scales}` + BF16 biases, config.json with quantization_config mxfp4) and
writes Hugging Face transformers reference outputs (float32, CPU, eager attention) into tests/data/fixtures/<name>/.

The reference is the checkpoint loaded back through GptOssForCausalLM.from_pretrained(dtype=float32,
quantization_config=Mxfp4Config(dequantize=True)) -- what transformers falls back to on a CPU without
triton/kernels: it dequantises the MXFP4 experts itself (integrations/mxfp4.py
convert_moe_packed_tensors: FP4 lookup, ldexp by scale-127) into the float32 parameters, so the reference uses
exactly the dequantised values. The script checks that path against its own numpy dequantisation.

Seeds are searched so that routing (top-k cut on router logits) and greedy argmax are away from near-ties, the
clamp of the SwiGLU (limit 7) is active on some values, sinks are non-zero and the prompts run past the sliding
window. Usage:  python3 tools/reference/make_gpt_oss_fixtures.py [--out DIR] [--only NAME ...]
"""
import json
import math
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config
from transformers.models.gpt_oss import modeling_gpt_oss as mgo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_common import (fresh_dir, full_logits, greedy, load_eager_config, run_fixtures,  # noqa: E402
                            write_reference)

REPO_ROOT = Path(__file__).resolve().parents[2]
N_GREEDY = 12
ROUTE_MARGIN_MIN = 1e-3    # min gap between the k-th and (k+1)-th router logit
GREEDY_MARGIN_MIN = 1e-2   # min top1-top2 logit gap at every greedy step
MAX_SEED_TRIES = 200

FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                      dtype=np.float32)

FIXTURES = [
    dict(
        name="gpt_oss_swa_sinks_mxfp4", seed=7000, n_ids=30, n_ids_b=13,
        arch=dict(vocab_size=256, hidden_size=96, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=3, sliding_window=8,
                  max_position_embeddings=2048, rms_norm_eps=1e-5, swiglu_limit=7.0),
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_theta=150000.0,
        rope_scaling={"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 64,
                      "rope_type": "yarn", "truncate": False},
        notes="gpt-oss hub layout: config.json like openai/gpt-oss-20b (rope_theta + rope_scaling yarn factor 32, "
              "truncate false, no swiglu_alpha key, quantization_config mxfp4), BF16 spine, MXFP4 experts "
              "(gate_up_proj_blocks [E, 2I, H/32, 16] with gate/up interleaved by row, scales U8 E8M0, BF16 "
              "biases). GQA 4 q / 2 kv heads, head_dim 16, attention biases, non-zero sinks; sliding window 8 on "
              "layers 0 and 2 with prompts of 30 and 13 ids; 8 experts top-3.",
    ),
]


def hub_config(spec):
    a = spec["arch"]
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 1,
        "experts_per_token": a["num_experts_per_tok"],
        "head_dim": a["head_dim"],
        "hidden_act": "silu",
        "hidden_size": a["hidden_size"],
        "initial_context_length": spec["rope_scaling"]["original_max_position_embeddings"],
        "initializer_range": 0.02,
        "intermediate_size": a["intermediate_size"],
        "layer_types": spec["layer_types"],
        "max_position_embeddings": a["max_position_embeddings"],
        "model_type": "gpt_oss",
        "num_attention_heads": a["num_attention_heads"],
        "num_experts_per_tok": a["num_experts_per_tok"],
        "num_hidden_layers": a["num_hidden_layers"],
        "num_key_value_heads": a["num_key_value_heads"],
        "num_local_experts": a["num_local_experts"],
        "output_router_logits": False,
        "pad_token_id": 0,
        "quantization_config": {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                       "lm_head"],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": a["rms_norm_eps"],
        "rope_scaling": spec["rope_scaling"],
        "rope_theta": spec["rope_theta"],
        "router_aux_loss_coef": 0.9,
        "sliding_window": a["sliding_window"],
        "swiglu_limit": a["swiglu_limit"],
        "tie_word_embeddings": False,
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "vocab_size": a["vocab_size"],
    }


# ---------------------------------------------------------------------------------------------------------------
# MXFP4 (OCP MX v1.0): blocks of 32 along the input dim, E8M0 scale 2^(floor(log2 amax) - 2), E2M1 elements
# ---------------------------------------------------------------------------------------------------------------


def quantize_mxfp4(w):
    """w [..., rows, cols] float32 -> (blocks U8 [..., rows, cols/32, 16], scales U8 [..., rows, cols/32])."""
    *lead, rows, cols = w.shape
    assert cols % 32 == 0
    g = w.reshape(*lead, rows, cols // 32, 32).astype(np.float64)
    amax = np.abs(g).max(-1)
    shared = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127).astype(np.int64)
    shared = np.clip(shared, -127, 127)
    x = g / np.exp2(shared)[..., None]
    mags = FP4_VALUES[:8].astype(np.float64)
    codes = np.abs(np.abs(x)[..., None] - mags).argmin(-1)  # nearest (saturates at 6)
    codes = codes + np.where(x < 0, 8, 0)
    codes = codes.astype(np.uint8)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    scales = (shared + 127).astype(np.uint8)
    return blocks, scales


def dequantize_mxfp4(blocks, scales):
    lo = FP4_VALUES[blocks & 0xF]
    hi = FP4_VALUES[blocks >> 4]
    vals = np.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# Model and weights
# ---------------------------------------------------------------------------------------------------------------


def load_written_config(out_dir):
    return load_eager_config(GptOssConfig, out_dir)


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def init_weights(model, cfg, gen):
    """Random weights (bf16-rounded like the hub's spine); experts MXFP4-quantised. Returns the expert tensors in
    the checkpoint layout: {layer: dict(gate_up_blocks, gate_up_scales, down_blocks, down_scales)}."""
    H, I = cfg.hidden_size, cfg.intermediate_size

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float32)

    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = uniform(p.shape, 0.6, 1.4)
            elif name.endswith("embed_tokens.weight"):
                v = normal(p.shape, 1.0)
            elif name == "lm_head.weight":
                v = normal(p.shape, 2.0 / math.sqrt(H))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                v = normal(p.shape, 1.6 / math.sqrt(H))
            elif name.endswith("v_proj.weight"):
                v = normal(p.shape, 1.0 / math.sqrt(H))
            elif name.endswith("o_proj.weight"):
                v = normal(p.shape, 1.0 / math.sqrt(p.shape[1]))
            elif name.endswith("_proj.bias"):
                v = normal(p.shape, 0.3)
            elif name.endswith("sinks"):
                v = uniform(p.shape, -1.0, 2.5)
            elif name.endswith("router.weight"):
                v = normal(p.shape, 2.5 / math.sqrt(H))
            elif name.endswith("router.bias"):
                v = normal(p.shape, 0.5)
            elif name.endswith("experts.gate_up_proj"):
                # checkpoint layout [E, 2I, H] (row 2i = gate i, 2i+1 = up i); in memory [E, H, 2I]
                w = normal((p.shape[0], 2 * I, H), 3.0 / math.sqrt(H)).numpy()
                blocks, scales = quantize_mxfp4(w)
                deq = dequantize_mxfp4(blocks, scales)
                packed.setdefault(name.split(".mlp.")[0], {}).update(gate_up_blocks=blocks, gate_up_scales=scales)
                v = torch.from_numpy(deq).transpose(1, 2).contiguous()
            elif name.endswith("experts.down_proj"):
                w = normal((p.shape[0], H, I), 1.0 / math.sqrt(I)).numpy()
                blocks, scales = quantize_mxfp4(w)
                deq = dequantize_mxfp4(blocks, scales)
                packed.setdefault(name.split(".mlp.")[0], {}).update(down_blocks=blocks, down_scales=scales)
                v = torch.from_numpy(deq).transpose(1, 2).contiguous()
            elif name.endswith("experts.gate_up_proj_bias"):
                v = normal(p.shape, 1.0)
            elif name.endswith("experts.down_proj_bias"):
                v = normal(p.shape, 0.2)
            else:
                raise RuntimeError(f"no init rule for {name}")
            p.copy_(bf16(v))  # the dequantised MXFP4 values are exact in bf16
    return packed


def hub_state_dict(model, packed):
    out = OrderedDict()
    for name, t in model.state_dict().items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            layer = name.split(".mlp.")[0]
            proj = "gate_up_proj" if name.endswith("gate_up_proj") else "down_proj"
            out[f"{layer}.mlp.experts.{proj}_blocks"] = torch.from_numpy(packed[layer][f"{proj.split('_proj')[0]}_blocks"])
            out[f"{layer}.mlp.experts.{proj}_scales"] = torch.from_numpy(packed[layer][f"{proj.split('_proj')[0]}_scales"])
            continue
        out[name] = t.detach().to(torch.bfloat16).contiguous()
    return out


# ---------------------------------------------------------------------------------------------------------------
# Reference computations and checks
# ---------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def routing_and_clamp_report(model, cfg, ids):
    """Min gap at the top-k cut of router logits, and the fraction of gate/up values the SwiGLU clamp changes."""
    margins, clamped, total = [], 0, 0
    hooks = []
    K = cfg.num_experts_per_tok

    def on_router(mod, inp, out):
        logits = out[0].double()
        s = torch.sort(logits, dim=-1, descending=True).values
        margins.append(float((s[:, K - 1] - s[:, K]).min()))

    def on_experts(mod, inp, out):
        nonlocal clamped, total
        x, idx = inp[0], inp[1]
        for e in idx.unique().tolist():
            rows = (idx == e).any(-1)
            gu = x[rows] @ mod.gate_up_proj[e] + mod.gate_up_proj_bias[e]
            gate, up = gu[..., ::2], gu[..., 1::2]
            clamped += int((gate > mod.limit).sum() + (up.abs() > mod.limit).sum())
            total += gu.numel()

    for layer in model.model.layers:
        hooks.append(layer.mlp.router.register_forward_hook(on_router))
        hooks.append(layer.mlp.experts.register_forward_hook(on_experts))
    model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    for h in hooks:
        h.remove()
    return min(margins), clamped / max(1, total)


def verify_transformers_facts(model, cfg):
    rot = model.model.rotary_emb
    assert abs(rot.attention_scaling - (0.1 * math.log(32.0) + 1.0)) < 1e-12, rot.attention_scaling
    ex = model.model.layers[0].mlp.experts
    assert ex.alpha == 1.702 and ex.limit == 7.0
    assert model.model.layers[0].self_attn.sliding_window == cfg.sliding_window
    assert model.model.layers[1].self_attn.sliding_window is None
    assert model.model.layers[0].self_attn.scaling == cfg.head_dim ** -0.5


def make_fixture(spec, out_root):
    name = spec["name"]
    out_dir = fresh_dir(out_root, name)
    (out_dir / "config.json").write_text(json.dumps(hub_config(spec), indent=2) + "\n")
    cfg = load_written_config(out_dir)
    vocab = cfg.vocab_size
    pgen = torch.Generator().manual_seed(spec["seed"] + 17)
    ids = torch.randint(2, vocab, (spec["n_ids"],), generator=pgen).tolist()
    ids_b = torch.randint(2, vocab, (spec["n_ids_b"],), generator=pgen).tolist()
    assert len(ids) > 2 * cfg.sliding_window

    for attempt in range(MAX_SEED_TRIES):
        seed = spec["seed"] + attempt
        torch.manual_seed(0)
        model = GptOssForCausalLM(cfg).to(torch.float32).eval()
        packed = init_weights(model, cfg, torch.Generator().manual_seed(seed))
        toks, gaps = greedy(model, ids, N_GREEDY)
        toks_b, gaps_b = greedy(model, ids_b, N_GREEDY)
        ma, ca = routing_and_clamp_report(model, cfg, ids + toks)
        mb, cb = routing_and_clamp_report(model, cfg, ids_b + toks_b)
        ok = (min(ma, mb) >= ROUTE_MARGIN_MIN and min(gaps + gaps_b) >= GREEDY_MARGIN_MIN and
              min(ca, cb) > 0.005 and len(set(toks)) >= 3 and len(set(toks_b)) >= 3)
        if ok:
            break
    else:
        raise RuntimeError(f"{name}: no seed within {MAX_SEED_TRIES} tries met the margins")

    save_file(hub_state_dict(model, packed), str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    # Reload through transformers' own MXFP4 path with Mxfp4Config(dequantize=True) (what it falls back to on a CPU
    # without triton/kernels; asking for it explicitly avoids the accelerate dependency) and demand bit-identical
    # logits with the in-memory model that holds our numpy dequantisation.
    loaded = GptOssForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32, attn_implementation="eager",
                                               experts_implementation="eager",
                                               quantization_config=Mxfp4Config(dequantize=True)).eval()
    for lm, lr in zip(model.model.layers, loaded.model.layers):
        ex = lr.mlp.experts
        assert isinstance(ex, mgo.GptOssExperts) and ex.gate_up_proj.dtype == torch.float32, type(ex)
        assert torch.equal(ex.gate_up_proj, lm.mlp.experts.gate_up_proj), "MXFP4 gate_up dequantisation differs"
        assert torch.equal(ex.down_proj, lm.mlp.experts.down_proj), "MXFP4 down dequantisation differs"
    verify_transformers_facts(loaded, loaded.config)
    ref = full_logits(loaded, ids)
    ref_b = full_logits(loaded, ids_b)
    assert torch.equal(ref, full_logits(model, ids)), f"{name}: reloaded checkpoint differs from in-memory model"
    assert torch.equal(ref_b, full_logits(model, ids_b)), f"{name}: reloaded checkpoint differs (prompt b)"
    toks_l, _ = greedy(loaded, ids, N_GREEDY)
    toks_bl, _ = greedy(loaded, ids_b, N_GREEDY)
    assert toks_l == toks and toks_bl == toks_b

    sinks = loaded.model.layers[0].self_attn.sinks
    write_reference(
        out_dir, ref, ref_b, ids, toks, ids_b, toks_b,
        reference=f"transformers {transformers.__version__} GptOssForCausalLM float32 (MXFP4 dequantised on load)",
        notes=spec["notes"] + (
            f" Computed on CPU in float32 with attn_implementation=eager, experts_implementation=eager, torch "
            f"{torch.__version__.split('+')[0]}; MXFP4 experts dequantised by transformers' CPU fallback into "
            f"float32 (checked bit-identical to an in-memory model holding the script's own dequantisation). "
            f"Greedy = {N_GREEDY} argmax steps recomputing the full sequence. Weight seed {seed}. Min router top-k "
            f"margin {min(ma, mb):.3g}, min greedy gap {min(gaps + gaps_b):.3g}, SwiGLU clamp active on "
            f"{min(ca, cb):.1%} of gate/up values; layer-0 sinks {[round(float(s), 3) for s in sinks]}."),
    )
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"[{name}] seed {seed} (attempt {attempt + 1}); {size / 1e6:.2f} MB; greedy a={toks} b={toks_b}; "
          f"route margin {min(ma, mb):.2e}; greedy gap {min(gaps + gaps_b):.3f}; clamp {min(ca, cb):.1%}")


def main():
    run_fixtures(__doc__, FIXTURES, make_fixture)


if __name__ == "__main__":
    main()
