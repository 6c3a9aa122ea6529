#!/usr/bin/env python3
"""Independent reference for sluice's Kimi K3 DSpark drafter (src/models/dspark.cpp).

Reads what `SLUICE_KEEP_TEST_DIRS=1 SLUICE_DSPARK_DUMP=DIR test_dspark --gtest_filter=DSpark.Deterministic*`
writes (the tapped target hidden states sluice captured, the anchor, sluice's draft logits and confidences, and the paths of the synthesized
DSpark checkpoint and its K3 target), recomputes the block pass from the checkpoint's safetensors in float64
(numpy; the expanded, not absorbed, MLA form; YaRN inverse frequencies as transformers computes them), and compares:
the draft logits within 1e-4 relative to the largest |logit| of the block, the confidences within 1e-4, and the
drafts exactly. Exits 1 on a mismatch.

    python3 tools/reference/dspark_reference.py DIR
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def load_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = raw[base + a : base + b]
        if t["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif t["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype=np.float32)
        elif t["dtype"] == "I64":  # EAGLE-3's d2t (kept as float64 below: exact for ids under 2^53)
            arr = np.frombuffer(buf, dtype="<i8")
        else:
            continue  # MXFP4 experts etc.: not needed here
        out[name] = arr.reshape(t["shape"]).astype(np.float64)
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def yarn_inv_freq(dim, rs, theta):
    # transformers' _compute_yarn_parameters (truncate=True), in float64
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]
    beta_fast, beta_slow = rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0)

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrap, interp = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    ef = 1 - ramp
    att = yarn_mscale(factor, rs.get("mscale", 1.0)) / yarn_mscale(factor, rs.get("mscale_all_dim", 1.0))
    return interp * (1 - ef) + extrap * ef, att


def rope_interleaved(x, pos, inv_freq, att):
    # x [..., rows, dim] with rows at positions pos; pairs (2i, 2i+1)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    c, s = np.cos(ang) * att, np.sin(ang) * att
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def main():
    dump = Path(sys.argv[1])
    meta = json.loads((dump / "meta.json").read_text())
    cfg = json.loads((Path(meta["dspark"]) / "config.json").read_text())
    w = load_safetensors(Path(meta["dspark"]) / "model.safetensors")
    tw = load_safetensors(Path(meta["target"]) / "model.safetensors")
    embed = tw["language_model.model.embed_tokens.weight"]
    lm_head = tw["language_model.lm_head.weight"]
    taps = np.load(dump / "taps.npy").astype(np.float64)
    want_logits = np.load(dump / "logits.npy").astype(np.float64)
    want_conf = np.load(dump / "confidence.npy").astype(np.float64)

    eps = cfg["rms_norm_eps"]
    H, nope, rd, vd = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    r_kv, B = cfg["kv_lora_rank"], cfg.get("block_size", 7)
    inv_freq, att = yarn_inv_freq(rd, cfg["rope_scaling"], cfg["rope_theta"])
    scale = (nope + rd) ** -0.5 * yarn_mscale(cfg["rope_scaling"]["factor"], cfg["rope_scaling"]["mscale_all_dim"]) ** 2
    L = taps.shape[0]
    ctx_pos, blk_pos = np.arange(L), np.arange(L, L + B)

    # step 1: context vectors -> each layer's latent + rotated rope key
    c = rms_norm(taps @ w["context_proj.weight"].T, w["context_norm.weight"], eps)
    # step 2: block rows
    ids = [meta["anchor"]] + [cfg["mask_token_id"]] * (B - 1)
    h = embed[ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        a = p + "self_attn."

        def kv_of(x, pos):
            kva = x @ w[a + "kv_a_proj_with_mqa.weight"].T
            lat = rms_norm(kva[:, :r_kv], w[a + "kv_a_layernorm.weight"], eps)
            kpe = rope_interleaved(kva[:, r_kv:], pos, inv_freq, att)
            return lat, kpe

        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        lat_c, kpe_c = kv_of(c, ctx_pos)
        lat_b, kpe_b = kv_of(x, blk_pos)
        lat, kpe = np.concatenate([lat_c, lat_b]), np.concatenate([kpe_c, kpe_b])
        kv = (lat @ w[a + "kv_b_proj.weight"].T).reshape(-1, H, nope + vd)
        k_nope, v = kv[:, :, :nope], kv[:, :, nope:]
        qa = rms_norm(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], eps)
        q = (qa @ w[a + "q_b_proj.weight"].T).reshape(B, H, nope + rd)
        q_nope = q[:, :, :nope]
        q_pe = rope_interleaved(q[:, :, nope:].transpose(1, 0, 2), blk_pos, inv_freq, att).transpose(1, 0, 2)
        # every block row sees every context row and every block row (non-causal within the block)
        s = (np.einsum("qhd,khd->hqk", q_nope, k_nope) + np.einsum("qhd,kd->hqk", q_pe, kpe)) * scale
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(B, H * vd)
        h = h + o @ w[a + "o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        g, u = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
        h = h + ((g / (1 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
    hn = rms_norm(h, w["final_norm.weight"], eps)
    base = hn @ lm_head.T
    # steps 4-5: Markov head and confidence, sequentially
    w1, w2 = w["markov_head.markov_w1.weight"], w["markov_head.markov_w2.weight"]
    cw, cb = w["confidence_head.proj.weight"][0], w["confidence_head.proj.bias"][0]
    prev, drafts, logits, conf = meta["anchor"], [], [], []
    for i in range(len(meta["drafts"])):
        e = w1[prev]
        row = base[i] + w2 @ e
        conf.append(1 / (1 + math.exp(-(cw @ np.concatenate([hn[i], e]) + cb))))
        prev = int(np.argmax(row))
        drafts.append(prev)
        logits.append(row)
    logits = np.array(logits)
    rel = np.abs(logits - want_logits[: len(logits)]).max() / np.abs(logits).max()
    conf_diff = np.abs(np.array(conf) - want_conf[: len(conf)]).max()
    print(f"DSpark reference: {L} context rows, block {B}; draft logits max rel diff {rel:.3e}, "
          f"confidence max diff {conf_diff:.3e}; drafts sluice {meta['drafts']} reference {drafts}")
    ok = rel <= 1e-4 and conf_diff <= 1e-4 and drafts == meta["drafts"]
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
