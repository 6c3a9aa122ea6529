#!/usr/bin/env python3
"""Independent reference for sluice's Kimi K3 EAGLE-3 drafter (src/models/eagle3.cpp).

Reads what `SLUICE_KEEP_TEST_DIRS=1 SLUICE_EAGLE3_DUMP=DIR test_eagle3 --gtest_filter=Eagle3.Deterministic*` writes
(the tapped target hidden states sluice captured, the tokens, sluice's draft logits and drafts, and the paths of the
synthesized EAGLE-3 checkpoint and its K3 target), recomputes the draft chain from the checkpoint's safetensors in
float64 (numpy; the expanded, not absorbed, MLA form; causal attention over the drafter's own rows; YaRN as
dspark_reference.py computes it, whose helpers it imports), and compares: the draft logits within 1e-4 relative to
the largest |logit|, the drafts exactly. Exits 1 on a mismatch.

--broken NAME recomputes a deliberately wrong variant, which must report MISMATCH: `feedback` feeds the hidden state
back before the final norm, `fc_norm` fuses the taps without their norms, `pairing` pairs each row's taps with its
own token instead of the next one.

    python3 tools/reference/eagle3_reference.py DIR [--broken feedback|fc_norm|pairing]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspark_reference import load_safetensors, rms_norm, rope_interleaved, yarn_inv_freq, yarn_mscale  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--broken", choices=["feedback", "fc_norm", "pairing"])
    args = ap.parse_args()
    dump = Path(args.dump)
    meta = json.loads((dump / "meta.json").read_text())
    cfg = json.loads((Path(meta["eagle3"]) / "config.json").read_text())
    w = load_safetensors(Path(meta["eagle3"]) / "model.safetensors")
    embed = load_safetensors(Path(meta["target"]) / "model.safetensors")["language_model.model.embed_tokens.weight"]
    taps = np.load(dump / "taps.npy").astype(np.float64)
    want_logits = np.load(dump / "logits.npy").astype(np.float64)
    tokens, n_drafts = meta["tokens"], len(meta["drafts"])

    eps = cfg["rms_norm_eps"]
    H, nope, rd, vd = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    r_kv, th = cfg["kv_lora_rank"], cfg["target_hidden_size"]
    rs = cfg["rope_scaling"]
    inv_freq, att = yarn_inv_freq(rd, rs, cfg["rope_theta"])
    scale = (nope + rd) ** -0.5 * yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2
    norm_output = cfg.get("norm_output", False) and args.broken != "feedback"
    L = taps.shape[0]
    p, a = "layers.0.", "layers.0.self_attn."

    # step 1: fuse the taps (each normed by its fc_norm), row p at position p
    n_aux = taps.shape[1] // th
    if cfg.get("fc_norm", False) and args.broken != "fc_norm":
        taps = np.concatenate([rms_norm(taps[:, i * th:(i + 1) * th], w[f"fc_norm.{i}.weight"], eps)
                               for i in range(n_aux)], axis=1)
    g = taps @ w["fc.weight"].T
    # row p reads the token after position p
    nxt = tokens[0:L] if args.broken == "pairing" else tokens[1:L + 1]

    def layer_input(tok_ids, hid):
        e = rms_norm(embed[tok_ids], w[p + "input_layernorm.weight"], eps)
        return np.concatenate([e, rms_norm(hid, w[p + "hidden_norm.weight"], eps)], axis=1)

    def kv_of(x, pos):
        kva = x @ w[a + "kv_a_proj_with_mqa.weight"].T
        return rms_norm(kva[:, :r_kv], w[a + "kv_a_layernorm.weight"], eps), rope_interleaved(kva[:, r_kv:], pos,
                                                                                           inv_freq, att)

    # the committed rows but the last only fill the cache
    lat, kpe = kv_of(layer_input(nxt[:L - 1], g[:L - 1]), np.arange(L - 1))
    cur, tok, drafts, logits = g[L - 1], nxt[L - 1], [], []
    for i in range(n_drafts):
        pos = L - 1 + i
        x = layer_input([tok], cur[None, :])
        lat_i, kpe_i = kv_of(x, [pos])
        lat, kpe = np.concatenate([lat, lat_i]), np.concatenate([kpe, kpe_i])
        kv = (lat @ w[a + "kv_b_proj.weight"].T).reshape(-1, H, nope + vd)
        k_nope, v = kv[:, :, :nope], kv[:, :, nope:]
        qa = rms_norm(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], eps)
        q = (qa @ w[a + "q_b_proj.weight"].T).reshape(1, H, nope + rd)
        q_pe = rope_interleaved(q[:, :, nope:].transpose(1, 0, 2), [pos], inv_freq, att).transpose(1, 0, 2)
        # the row sees the drafter's rows at positions 0..pos (all of them: nothing later is in the cache)
        s = (np.einsum("qhd,khd->hqk", q[:, :, :nope], k_nope) + np.einsum("qhd,kd->hqk", q_pe, kpe)) * scale
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(1, H * vd)
        h = cur[None, :] + o @ w[a + "o_proj.weight"].T
        y = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gt, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
        h = h + ((gt / (1 + np.exp(-gt))) * up) @ w[p + "mlp.down_proj.weight"].T
        out = rms_norm(h, w["norm.weight"], eps)
        row = (out @ w["lm_head.weight"].T)[0]
        logits.append(row)
        tok = int(np.argmax(row))
        if "d2t" in w:  # a reduced head: draft id k is target id k + d2t[k]
            tok += int(w["d2t"][tok])
        drafts.append(tok)
        cur = (out if norm_output else h)[0]
    logits = np.array(logits)
    rel = np.abs(logits - want_logits[:n_drafts]).max() / np.abs(logits).max()
    print(f"EAGLE-3 reference{' (broken: ' + args.broken + ')' if args.broken else ''}: {L} committed rows, "
          f"{n_drafts} drafts; draft logits max rel diff {rel:.3e}; drafts sluice {meta['drafts']} reference {drafts}")
    ok = rel <= 1e-4 and drafts == meta["drafts"]
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
