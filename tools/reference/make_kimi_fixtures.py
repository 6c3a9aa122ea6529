#!/usr/bin/env python3
"""Tiny random-weight Kimi Linear checkpoints in the hub's on-disk layout, with reference outputs from
Hugging Face transformers (KimiLinearForCausalLM, float32, eager, CPU), written to tests/data/fixtures/<name>/.
Specs with form "t5" are instead built from transformers 5's own config fields (layer_types, mlp_layer_types,
linear_*; no linear_attn_config) and written by its save_pretrained, config.json and weights as it writes them.
Kimi K3 fixtures come from kimi_k3_reference.py (next to this file), see README.md.

Usage: python3 tools/reference/make_kimi_fixtures.py [--only NAME]
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import KimiLinearConfig, KimiLinearForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_common import greedy_steps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "fixtures"

SPECS = {
    "kimi_linear_noqlora": dict(
        vocab=256, hidden=64, layers=5, full_attn=[3, 5], heads=4, q_lora=None, kv_lora=32, nope=16, rope=8, v=16,
        kda_heads=4, kda_dim=16, experts=8, top_k=2, shared=1, moe_inter=32, inter=128, n_group=1, topk_group=1,
        scale=2.446, len_a=150, len_b=70, seed=103),
    "kimi_linear_qlora_groups": dict(
        vocab=320, hidden=48, layers=4, full_attn=[2, 4], heads=3, q_lora=24, kv_lora=16, nope=8, rope=8, v=8,
        kda_heads=3, kda_dim=8, experts=12, top_k=3, shared=2, moe_inter=16, inter=96, n_group=3, topk_group=2,
        scale=1.0, len_a=140, len_b=66, seed=200),
    # transformers 5's form; layer 0 sparse and layer 1 dense, which first_k_dense_replace cannot express
    "kimi_linear_t5_saved": dict(
        form="t5", vocab=288, hidden=48, layers=4, full_attn=[2, 4], dense=[1], heads=3, q_lora=24, kv_lora=16,
        nope=8, rope=8, v=8, kda_heads=3, kda_dim=8, experts=8, top_k=2, shared=1, moe_inter=16, inter=96,
        n_group=2, topk_group=1, scale=1.7, len_a=130, len_b=67, seed=300),
}


def hub_config(s):
    n = s["layers"]
    kda = [i for i in range(1, n + 1) if i not in s["full_attn"]]
    return {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "vocab_size": s["vocab"], "hidden_size": s["hidden"], "intermediate_size": s["inter"],
        "moe_intermediate_size": s["moe_inter"], "num_hidden_layers": n, "num_attention_heads": s["heads"],
        "num_key_value_heads": s["heads"], "q_lora_rank": s["q_lora"], "kv_lora_rank": s["kv_lora"],
        "qk_nope_head_dim": s["nope"], "qk_rope_head_dim": s["rope"], "v_head_dim": s["v"], "mla_use_nope": True,
        "num_experts": s["experts"], "num_experts_per_token": s["top_k"], "num_shared_experts": s["shared"],
        "num_expert_group": s["n_group"], "topk_group": s["topk_group"], "use_grouped_topk": True,
        "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "routed_scaling_factor": s["scale"],
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
        "model_max_length": 1024, "rope_theta": 10000.0, "rope_scaling": None, "num_nextn_predict_layers": 0,
        "torch_dtype": "float32",
        "linear_attn_config": {"full_attn_layers": s["full_attn"], "kda_layers": kda, "num_heads": s["kda_heads"],
                               "head_dim": s["kda_dim"], "short_conv_kernel_size": 4},
    }


def t5_config(s):
    """KimiLinearConfig from its own fields only, as a transformers 5 user would build one."""
    n = s["layers"]
    return KimiLinearConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["inter"],
        moe_intermediate_size=s["moe_inter"], num_hidden_layers=n, num_attention_heads=s["heads"],
        num_key_value_heads=s["heads"], q_lora_rank=s["q_lora"], kv_lora_rank=s["kv_lora"],
        qk_nope_head_dim=s["nope"], qk_rope_head_dim=s["rope"], v_head_dim=s["v"], num_local_experts=s["experts"],
        num_experts_per_tok=s["top_k"], n_shared_experts=s["shared"], n_group=s["n_group"],
        topk_group=s["topk_group"], routed_scaling_factor=s["scale"], norm_topk_prob=True,
        max_position_embeddings=1024, bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False,
        layer_types=["full_attention" if i + 1 in s["full_attn"] else "linear_attention" for i in range(n)],
        mlp_layer_types=["dense" if i in s["dense"] else "sparse" for i in range(n)],
        linear_num_heads=s["kda_heads"], linear_head_dim=s["kda_dim"], linear_conv_kernel_dim=4, dtype="float32")


def init_weights(model, gen):
    def normal(shape, std):
        return torch.randn(shape, generator=gen) * std
    for name, p in model.named_parameters():
        shape = p.shape
        if name.endswith("embed_tokens.weight"):
            v = normal(shape, 1.0)
        elif "norm" in name and name.endswith("weight"):
            v = 0.6 + 0.8 * torch.rand(shape, generator=gen)
        elif name.endswith("A_log"):
            v = torch.log(1.0 + 15.0 * torch.rand(shape, generator=gen))
        elif name.endswith("dt_bias"):
            dt = torch.exp(math.log(1e-3) + (math.log(1e-1) - math.log(1e-3)) * torch.rand(shape, generator=gen))
            v = dt + torch.log(-torch.expm1(-dt))
        elif name.endswith("conv1d.weight"):
            v = normal(shape, 0.6)
        elif name.endswith("gate.weight") and "mlp" in name:  # router
            v = normal(shape, 2.5 / math.sqrt(shape[-1]))
        elif name.endswith("lm_head.weight"):
            v = normal(shape, 2.0 / math.sqrt(shape[-1]))
        elif any(k in name for k in ("q_proj", "k_proj", "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj")):
            v = normal(shape, 1.6 / math.sqrt(shape[-1]))
        else:
            v = normal(shape, 1.0 / math.sqrt(shape[-1]))
        with torch.no_grad():
            p.copy_(v)
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            with torch.no_grad():
                b.copy_(-0.5 + 1.0 * torch.rand(b.shape, generator=gen))


def hub_state_dict(model, cfg):
    """transformers' in-memory names -> the hub checkpoint's names (inverse of conversion_mapping['kimi_linear'])."""
    out = {}
    P = cfg.linear_num_heads * cfg.linear_head_dim
    for name, t in model.state_dict().items():
        t = t.detach().clone().contiguous()
        if ".mlp.experts.gate_up_proj" in name:
            base = name.replace(".mlp.experts.gate_up_proj", ".block_sparse_moe.experts.")
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.w1.weight"] = t[e, :inter].clone()
                out[f"{base}{e}.w3.weight"] = t[e, inter:].clone()
            continue
        if ".mlp.experts.down_proj" in name:
            base = name.replace(".mlp.experts.down_proj", ".block_sparse_moe.experts.")
            for e in range(t.shape[0]):
                out[f"{base}{e}.w2.weight"] = t[e].clone()
            continue
        if name.endswith("self_attn.conv1d.weight"):
            base = name[: -len("conv1d.weight")]
            for i, p in enumerate("qkv"):
                out[f"{base}{p}_conv1d.weight"] = t[i * P:(i + 1) * P].clone()
            continue
        name = name.replace("self_attn.forget_gate.", "self_attn.")
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else -1
        if layer >= 0 and cfg.mlp_layer_types[layer] == "sparse":
            name = name.replace(".mlp.", ".block_sparse_moe.")
        out[name] = t
    return out


@torch.no_grad()
def full_logits(model, ids):
    return model(torch.tensor([ids]), use_cache=False).logits[0].float()


def greedy(model, ids, n):
    return greedy_steps(lambda seq: full_logits(model, seq), ids, n)


def routing_margins(model, ids):
    """Smallest gap at every top-k cut (biased scores) over all MoE layers and rows, and how often the bias changes
    the chosen set (fraction of token/layer rows)."""
    gaps, changed, total = [], 0, 0
    hooks = []

    def hook(mod, inp, out):
        nonlocal changed, total
        logits = out[0]
        s = logits.sigmoid()
        c = (s + mod.e_score_correction_bias).double()
        ng, k = mod.num_group, mod.top_k
        if ng > 1:
            g = c.view(-1, ng, c.shape[-1] // ng).topk(2, dim=-1)[0].sum(-1)
            gs = g.sort(dim=-1, descending=True).values
            gaps.append(float((gs[:, mod.topk_group - 1] - gs[:, mod.topk_group]).min()))
            keep = torch.zeros_like(g).scatter_(1, g.topk(mod.topk_group, dim=-1)[1], 1)
            c = c.masked_fill(~keep.repeat_interleave(c.shape[-1] // ng, dim=-1).bool(), -math.inf)
        cs = c.sort(dim=-1, descending=True).values
        gaps.append(float((cs[:, k - 1] - cs[:, k]).min()))
        chosen = c.topk(k, dim=-1)[1].sort(-1).values
        plain = s.topk(k, dim=-1)[1].sort(-1).values
        changed += int((chosen != plain).any(-1).sum())
        total += chosen.shape[0]
    for m in model.modules():
        if type(m).__name__ == "KimiLinearTopkRouter":
            hooks.append(m.register_forward_hook(hook))
    full_logits(model, ids)
    for h in hooks:
        h.remove()
    return min(gaps), changed / max(total, 1)


def check_config(cfg, spec):
    """transformers reads the hub field names the way the engine does."""
    assert cfg.num_local_experts == spec["experts"] or getattr(cfg, "num_experts", None) == spec["experts"]
    assert cfg.num_experts_per_tok == spec["top_k"] and cfg.n_shared_experts == spec["shared"]
    assert cfg.n_group == spec["n_group"] and cfg.norm_topk_prob is True
    assert cfg.linear_num_heads == spec["kda_heads"] and cfg.linear_head_dim == spec["kda_dim"]
    want = ["full_attention" if i + 1 in spec["full_attn"] else "linear_attention" for i in range(spec["layers"])]
    assert cfg.layer_types == want, cfg.layer_types
    dense = spec.get("dense", [0])
    assert cfg.mlp_layer_types == ["dense" if i in dense else "sparse" for i in range(spec["layers"])]


def check_kda_path():
    """On CPU without the `kernels` package transformers runs its pure-torch chunk_kimi_delta_attention for a
    prompt (no cache) and recurrent_kimi_delta_attention only for single-token decode with a cache."""
    try:
        import kernels  # noqa: F401
        sys.exit("the `kernels` package is installed: transformers may use hub kernels instead of its torch code")
    except ImportError:
        pass


def make_fixture(name, spec):
    out_dir = OUT / name
    out_dir.mkdir(parents=True, exist_ok=True)
    t5 = spec.get("form") == "t5"
    if t5:
        cfg = t5_config(spec)
    else:
        (out_dir / "config.json").write_text(json.dumps(hub_config(spec), indent=2) + "\n")
        cfg = KimiLinearConfig.from_pretrained(out_dir)
    cfg._attn_implementation = "eager"
    check_config(cfg, spec)
    ids_gen = torch.Generator().manual_seed(spec["seed"] + 7)
    ids = torch.randint(3, spec["vocab"], (spec["len_a"],), generator=ids_gen).tolist()
    ids_b = torch.randint(3, spec["vocab"], (spec["len_b"],), generator=ids_gen).tolist()
    for seed in range(spec["seed"], spec["seed"] + 80):
        torch.manual_seed(seed)
        model = KimiLinearForCausalLM(cfg).eval()
        init_weights(model, torch.Generator().manual_seed(seed))
        greedy_a, gaps_a = greedy(model, ids, 10)
        greedy_b, gaps_b = greedy(model, ids_b, 10)
        m_a, chg = routing_margins(model, ids + greedy_a)
        m_b, _ = routing_margins(model, ids_b + greedy_b)
        ok = (min(m_a, m_b) >= 1e-4 and min(gaps_a + gaps_b) >= 1e-2 and chg >= 0.1
              and len(set(greedy_a)) >= 3 and len(set(greedy_b)) >= 3)
        print(f"{name}: seed {seed}: route margin {min(m_a, m_b):.2e}, greedy gap {min(gaps_a + gaps_b):.3f}, "
              f"bias changes {chg:.0%}, distinct {len(set(greedy_a))}/{len(set(greedy_b))}", "ok" if ok else "retry")
        if ok:
            break
    else:
        sys.exit(f"{name}: no seed passed the margin checks")
    if t5:
        model.save_pretrained(out_dir)
        saved = json.loads((out_dir / "config.json").read_text())
        assert "linear_attn_config" not in saved and "first_k_dense_replace" not in saved, "not the transformers 5 form"
    else:
        tensors = hub_state_dict(model, cfg)
        save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    # transformers' own loader must read the files back to the same model
    reloaded = KimiLinearForCausalLM.from_pretrained(out_dir, attn_implementation="eager").eval()
    ref = full_logits(reloaded, ids)
    ref_b = full_logits(reloaded, ids_b)
    assert torch.equal(ref, full_logits(model, ids)), "reloading the saved files changed the logits"
    assert greedy(reloaded, ids, 10)[0] == greedy_a
    np.save(out_dir / "ref_logits.npy", ref.numpy().astype(np.float32))
    np.save(out_dir / "ref_logits_b.npy", ref_b.numpy().astype(np.float32))
    ref_json = {
        "ids": ids, "greedy": greedy_a, "ids_b": ids_b, "greedy_b": greedy_b,
        "reference": f"transformers {transformers.__version__} KimiLinearForCausalLM, torch {torch.__version__}, "
                     "float32, eager, CPU, full forward without cache (chunked KDA, chunk 64)",
        "notes": f"seed {seed}; min routing cut gap {min(m_a, m_b):.3e}; min greedy top1-top2 gap "
                 f"{min(gaps_a + gaps_b):.3f}; correction bias changes {chg:.0%} of chosen experts; "
                 f"max |logit| {float(ref.abs().max()):.2f}",
    }
    (out_dir / "ref.json").write_text(json.dumps(ref_json, indent=1) + "\n")
    print(f"{name}: wrote {out_dir.relative_to(ROOT)}, max |logit| {float(ref.abs().max()):.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    check_kda_path()
    for name, spec in SPECS.items():
        if args.only in (None, name):
            make_fixture(name, spec)


if __name__ == "__main__":
    main()
