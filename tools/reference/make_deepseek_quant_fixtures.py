#!/usr/bin/env python3
"""DeepSeek-V3 / Kimi-K2 fixtures with quantised weights, in the hub's on-disk layout:

* dsv3_fp8_block128: every Linear of attention, dense MLP, shared and routed experts as F8_E4M3 `.weight` +
  F32 `.weight_scale_inv` [ceil(out/128), ceil(in/128)] (multiply), like deepseek-ai/DeepSeek-V3; embeddings,
  lm_head, router and norms BF16, e_score_correction_bias F32. Dims are not multiples of 128 (ragged edge blocks).
* k2_thinking_int4: Kimi-K2-Thinking-style compressed-tensors pack-quantized routed experts (`weight_packed` I32
  [out, in/8], (q+8) LSB first; `weight_scale` BF16 [out, in/32]; `weight_shape` I32 [2]); everything else BF16.

The reference is transformers' DeepseekV3ForCausalLM in float32 on CPU (eager) holding the dequantised weights:
transformers cannot load either file itself here. Its FP8 path needs accelerate and, on CPU, falls back to
Fp8Dequantize, which derives the block size as rows // scale_rows and so mis-scales ragged 128-blocks (or refuses
the shape); its compressed-tensors path needs the compressed_tensors package. So this script dequantises by the
formats' definitions (specs digest 1.9 / 3.8), INT4 exactly as compressed-tensors' `_dequantize` does (q * scale
computed in the scale's dtype, so rounded to bf16), and checks its writing by reading the files back with an independent
reader into a fresh model built from the written config.json, demanding bit-identical logits.
Usage:  python3 tools/reference/make_deepseek_quant_fixtures.py [--out DIR] [--only NAME ...]
"""
import json
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_deepseek_fixtures as mdf  # noqa: E402
from fixture_common import fresh_dir, run_fixtures, write_reference  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]

QCOMMON = dict(
    intermediate_size=320, num_hidden_layers=3, num_attention_heads=4, n_shared_experts=1,
    first_k_dense_replace=1, rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=128,
    bos_token_id=0, eos_token_id=1,
)

FIXTURES = [
    dict(
        name="dsv3_fp8_block128", seed=8000, n_ids=28, n_ids_b=14, weight_dtype="BF16", shards=1,
        config_form="hub", experts_layout="per_expert", model_type="deepseek_v3", quant="fp8",
        arch=dict(QCOMMON, vocab_size=256, hidden_size=192, q_lora_rank=160, kv_lora_rank=144, qk_nope_head_dim=32,
                  qk_rope_head_dim=16, v_head_dim=32, moe_intermediate_size=160, n_routed_experts=8,
                  num_experts_per_tok=2, n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                  tie_word_embeddings=False),
        rope_theta=10000.0, rope_scaling=None,
        notes="DeepSeek-V3 FP8 layout: F8_E4M3 weights with F32 weight_scale_inv per 128x128 block for q_a/q_b, "
              "kv_a_proj_with_mqa (176 rows), kv_b_proj, o_proj, dense MLP (320 wide), shared and routed experts "
              "(160 x 192): ragged edge blocks in both dims. quantization_config as on the hub (fp8, e4m3, "
              "dynamic, [128, 128]). Weights quantised with scale = block amax / 448, e4m3 round-to-nearest-even.",
    ),
    dict(
        name="k2_thinking_int4", seed=9000, n_ids=26, n_ids_b=12, weight_dtype="BF16", shards=1,
        config_form="hub", experts_layout="per_expert", model_type="kimi_k2", quant="int4",
        arch=dict(QCOMMON, vocab_size=256, hidden_size=128, intermediate_size=256, q_lora_rank=96, kv_lora_rank=64,
                  qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, moe_intermediate_size=96,
                  n_routed_experts=8, num_experts_per_tok=3, n_group=1, topk_group=1, norm_topk_prob=True,
                  routed_scaling_factor=2.827, tie_word_embeddings=False),
        rope_theta=50000.0, rope_scaling=None,
        notes="Kimi-K2-Thinking layout: routed experts as compressed-tensors pack-quantized INT4 (weight_packed I32 "
              "[out, in/8], value k of a word at bits 4k..4k+3 holding q+8; weight_scale BF16 [out, in/32]; "
              "weight_shape I32 [out, in]), symmetric groups of 32 with scale = bf16(amax / 7.5) and q = "
              "clamp(round(w / scale), -8, 7); dequantised value bf16(q * scale), as compressed-tensors computes it; "
              "attention, dense MLP, shared expert, router, embeddings, head BF16. "
              "quantization_config as in the K2-Thinking config.json (compressed-tensors, pack-quantized).",
    ),
]

FP8_QCONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
INT4_QCONFIG = {
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 32, "num_bits": 4,
                    "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed",
}


def is_quantised(name, quant):
    if not name.endswith("_proj.weight") and not name.endswith("_mqa.weight"):
        return False
    if quant == "fp8":
        return True  # every Linear but the router (mlp.gate.weight) and lm_head
    return ".mlp.experts." in name  # int4: routed experts only


# ---------------------------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------------------------


def quantise_fp8(w):
    """w [r, c] f32 -> (F8_E4M3 tensor, F32 scale_inv [ceil(r/128), ceil(c/128)])."""
    r, c = w.shape
    br, bc = (r + 127) // 128, (c + 127) // 128
    scale = torch.zeros(br, bc, dtype=torch.float32)
    q = torch.empty(r, c, dtype=torch.float8_e4m3fn)
    for i in range(br):
        for j in range(bc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s = (blk.abs().max() / 448.0).to(torch.float32)
            s = s if s > 0 else torch.tensor(1.0)
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale


def dequantise_fp8_numpy(q_bytes, scale):
    """Independent e4m3 decoder (bits s eeee mmm, bias 7, no inf) and block scaling, from raw bytes."""
    b = q_bytes.astype(np.int64)
    s = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 0x7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * np.exp2(e - 7.0)) * s
    assert not np.any((e == 15) & (m == 7)), "NaN encoding in FP8 weights"
    rr = np.arange(b.shape[0]) // 128
    cc = np.arange(b.shape[1]) // 128
    return (v * scale[rr][:, cc]).astype(np.float32)


def quantise_int4(w):
    """w [r, c] f32 -> (packed I32 [r, c/8], scale BF16 [r, c/32]) by compressed-tensors' symmetric group rule."""
    r, c = w.shape
    g = w.reshape(r, c // 32, 32)
    scale = (g.abs().amax(-1) / 7.5).to(torch.bfloat16)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.clamp(torch.round(g / scale.to(torch.float32)[..., None]), -8, 7).to(torch.int64).reshape(r, c)
    u = (q + 8).reshape(r, c // 8, 8)
    packed = torch.zeros(r, c // 8, dtype=torch.int64)
    for k in range(8):
        packed |= u[..., k] << (4 * k)
    packed = packed.to(torch.uint32).view(torch.int32) if hasattr(torch, "uint32") else packed.to(torch.int32)
    return packed.contiguous(), scale.contiguous()


def dequantise_int4(packed, scale):
    """(packed I32 [r, c/8], scale BF16 [r, c/32]) -> f32 [r, c] as compressed-tensors' _dequantize computes it:
    `x_q.to(scale.dtype) * scale`, i.e. q * scale rounded to bf16 (nearest even)."""
    p = packed.numpy().view(np.uint32).astype(np.int64)
    r, c8 = p.shape
    vals = np.stack([((p >> (4 * k)) & 0xF) - 8 for k in range(8)], -1).reshape(r, c8 * 8)
    assert scale.dtype == torch.bfloat16
    x_q = torch.from_numpy(vals).reshape(r, -1, 32)
    return (x_q.to(scale.dtype) * scale.unsqueeze(-1)).reshape(r, c8 * 8).to(torch.float32)


# ---------------------------------------------------------------------------------------------------------------
# Model <-> hub tensors
# ---------------------------------------------------------------------------------------------------------------


def quantise_state(hub_sd, quant):
    """Hub-named float tensors -> (tensors to write, dequantised float32 values under the weight names)."""
    out, deq = OrderedDict(), OrderedDict()
    for name, t in hub_sd.items():
        if is_quantised(name, quant):
            prefix = name[: -len(".weight")]
            if quant == "fp8":
                q, s = quantise_fp8(t.to(torch.float32))
                out[name] = q
                out[prefix + ".weight_scale_inv"] = s
                deq[name] = q.to(torch.float32) * s.repeat_interleave(128, 0)[: t.shape[0]].repeat_interleave(
                    128, 1)[:, : t.shape[1]]
            else:
                p, s = quantise_int4(t.to(torch.float32))
                out[prefix + ".weight_packed"] = p
                out[prefix + ".weight_scale"] = s
                out[prefix + ".weight_shape"] = torch.tensor(list(t.shape), dtype=torch.int32)
                deq[name] = dequantise_int4(p, s)
        elif name.endswith("e_score_correction_bias"):
            out[name] = t.to(torch.float32).contiguous()
            deq[name] = out[name].clone()
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
            deq[name] = out[name].to(torch.float32)
    return out, deq


def load_hub_values(model, values):
    """Copies hub-named float tensors (per-expert names) into the model's parameters (experts fused in memory)."""
    sd = model.state_dict()
    with torch.no_grad():
        for name, p in sd.items():
            if name.endswith("mlp.experts.gate_up_proj"):
                prefix = name[: -len("gate_up_proj")]
                for e in range(p.shape[0]):
                    p[e].copy_(torch.cat([values[f"{prefix}{e}.gate_proj.weight"],
                                          values[f"{prefix}{e}.up_proj.weight"]], 0))
            elif name.endswith("mlp.experts.down_proj"):
                prefix = name[: -len("down_proj")]
                for e in range(p.shape[0]):
                    p[e].copy_(values[f"{prefix}{e}.down_proj.weight"])
            else:
                p.copy_(values[name])


def read_back(path, quant):
    """Independent reader: raw safetensors -> dequantised float32 tensors under the weight names."""
    vals = OrderedDict()
    with safe_open(str(path), "pt") as f:
        for k in f.keys():
            if k.endswith((".weight_scale_inv", ".weight_scale", ".weight_shape")):
                continue
            t = f.get_tensor(k)
            if k.endswith(".weight_packed"):
                prefix = k[: -len(".weight_packed")]
                shape = tuple(int(x) for x in f.get_tensor(prefix + ".weight_shape").tolist())
                w = dequantise_int4(t, f.get_tensor(prefix + ".weight_scale"))
                assert tuple(w.shape) == shape, (k, w.shape, shape)
                vals[prefix + ".weight"] = w
            elif t.dtype == torch.float8_e4m3fn:
                s = f.get_tensor(k[: -len(".weight")] + ".weight_scale_inv").numpy()
                vals[k] = torch.from_numpy(dequantise_fp8_numpy(t.view(torch.uint8).numpy(), s))
            else:
                vals[k] = t.to(torch.float32)
    return vals


# ---------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------


def write_config(spec, out_dir):
    cfg = mdf.hub_config(spec)
    cfg["quantization_config"] = FP8_QCONFIG if spec["quant"] == "fp8" else INT4_QCONFIG
    cfg["torch_dtype"] = "bfloat16"
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def build_quantised(spec, out_dir, seed):
    cfg = mdf.load_written_config(out_dir)
    model = mdf.build_model(cfg)
    mdf.init_weights(model, cfg, torch.Generator().manual_seed(seed))
    tensors, deq = quantise_state(mdf.hub_state_dict(model, "per_expert"), spec["quant"])
    load_hub_values(model, deq)
    return cfg, model, tensors


def make_fixture(spec, out_root):
    name = spec["name"]
    out_dir = fresh_dir(out_root, name)
    write_config(spec, out_dir)
    vocab = spec["arch"]["vocab_size"]
    pgen = torch.Generator().manual_seed(spec["seed"] + 17)
    ids = torch.randint(2, vocab, (spec["n_ids"],), generator=pgen).tolist()
    ids_b = torch.randint(2, vocab, (spec["n_ids_b"],), generator=pgen).tolist()

    for attempt in range(mdf.MAX_SEED_TRIES):
        seed = spec["seed"] + attempt
        cfg, model, tensors = build_quantised(spec, out_dir, seed)
        toks, gaps = mdf.greedy(model, ids, mdf.N_GREEDY)
        toks_b, gaps_b = mdf.greedy(model, ids_b, mdf.N_GREEDY)
        ra = mdf.routing_report(model, cfg, ids + toks)
        rb = mdf.routing_report(model, cfg, ids_b + toks_b)
        min_route = min(ra["min_group_margin"], ra["min_expert_margin"], rb["min_group_margin"],
                        rb["min_expert_margin"])
        if (min_route >= mdf.ROUTE_MARGIN_MIN and min(gaps + gaps_b) >= mdf.GREEDY_MARGIN_MIN
                and len(set(toks)) >= 3 and len(set(toks_b)) >= 3):
            break
    else:
        raise RuntimeError(f"{name}: no seed within {mdf.MAX_SEED_TRIES} tries met the margins")

    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    # Read the file back with the independent decoder into a fresh model built from the written config.json.
    fresh = mdf.build_model(mdf.load_written_config(out_dir))
    load_hub_values(fresh, read_back(out_dir / "model.safetensors", spec["quant"]))
    ref, ref_b = mdf.full_logits(fresh, ids), mdf.full_logits(fresh, ids_b)
    assert torch.equal(ref, mdf.full_logits(model, ids)), f"{name}: read-back differs from the in-memory model"
    assert torch.equal(ref_b, mdf.full_logits(model, ids_b)), f"{name}: read-back differs (prompt b)"
    n_q = sum(1 for k in tensors if k.endswith((".weight_scale_inv", ".weight_packed")))
    ragged = [k for k, t in tensors.items() if k.endswith(".weight") and t.dtype == torch.float8_e4m3fn
              and (t.shape[0] % 128 or t.shape[1] % 128)]
    assert spec["quant"] != "fp8" or len(ragged) == n_q, "every FP8 weight should have ragged blocks here"

    write_reference(
        out_dir, ref, ref_b, ids, toks, ids_b, toks_b,
        reference=f"transformers {transformers.__version__} DeepseekV3ForCausalLM float32 on dequantised weights",
        notes=spec["notes"] + (
            f" Reference: transformers' DeepseekV3ForCausalLM (eager, float32, CPU, torch "
            f"{torch.__version__.split('+')[0]}) holding the weights dequantised by this script (transformers "
            f"cannot load the quantised file here; see the script's docstring); the file was read back by an "
            f"independent decoder and reproduced the logits bit for bit. {n_q} quantised matrices. Greedy = "
            f"{mdf.N_GREEDY} argmax steps recomputing the full sequence. Weight seed {seed}. Min routing margin "
            f"{min_route:.3g}, min greedy gap {min(gaps + gaps_b):.3g}."),
    )
    for p in out_dir.iterdir():
        p.chmod(0o644)
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"[{name}] seed {seed} (attempt {attempt + 1}); {size / 1e6:.2f} MB; {n_q} quantised matrices; "
          f"greedy a={toks} b={toks_b}; route margin {min_route:.2e}; greedy gap {min(gaps + gaps_b):.3f}")


def main():
    run_fixtures(__doc__, FIXTURES, make_fixture)


if __name__ == "__main__":
    main()
