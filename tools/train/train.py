#!/usr/bin/env python3
"""Train sluice's small DeepSeek-V3-layout MoE (and its draft model) on the corpus prepare_data.py wrote, export
both with transformers' own save_pretrained (BF16, router bias F32), reload them with transformers' own loader and
write the float32 reference outputs the C++ test compares against.

  python3 train.py --data DIR --out OUT [--minutes 6] [--smoke]

The models are transformers' DeepseekV3ForCausalLM. Only one thing is swapped for training: the routed experts'
forward (transformers' eager path loops over experts) is replaced by an equivalent batched computation over all
experts with zero weight for the unchosen ones — the same function (checked against the original at start), the
same parameters, so export is untouched. Everything runs on one GPU; the reference is computed on the CPU in float32
with attn_implementation="eager" and experts_implementation="eager", through from_pretrained of the exported folder.
"""
import argparse
import copy
import json
import math
import os
import shutil
import time
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoTokenizer, DeepseekV3Config, DeepseekV3ForCausalLM

ARCH = {
    # ~13M parameters (about 4M active per token): hidden 256, 6 layers (layer 0 dense), 24 routed experts top-4.
    "target": dict(vocab_size=4096, hidden_size=256, intermediate_size=768, moe_intermediate_size=96,
                   num_hidden_layers=6, first_k_dense_replace=1, num_attention_heads=4, n_routed_experts=24,
                   num_experts_per_tok=4, n_shared_experts=1, n_group=1, topk_group=1, q_lora_rank=None,
                   kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                   routed_scaling_factor=2.5),
    # ~1.4M parameters: the same family, 2 layers (layer 0 dense), 8 routed experts top-2.
    "draft": dict(vocab_size=4096, hidden_size=128, intermediate_size=384, moe_intermediate_size=64,
                  num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2, n_routed_experts=8,
                  num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1, q_lora_rank=None,
                  kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                  routed_scaling_factor=2.0),
}
COMMON = dict(num_key_value_heads=None, norm_topk_prob=True, max_position_embeddings=1024, rms_norm_eps=1e-6,
              tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=5, num_nextn_predict_layers=0,
              hidden_act="silu", attention_bias=False, initializer_range=0.02)
ROPE_THETA = 10000.0

# Fixed prompts for the reference: plain text (a) and the chat template (b).
PROMPT_A = "And God said unto Noah, Make thee an ark"
PROMPT_B_MESSAGES = [{"role": "user", "content": "What does \"hacker\" mean?"}]
N_GREEDY = 16


def make_config(name):
    a = dict(ARCH[name])
    kw = dict(COMMON)
    kw["num_key_value_heads"] = a["num_attention_heads"]
    try:
        cfg = DeepseekV3Config(**a, **kw, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    except TypeError:
        cfg = DeepseekV3Config(**a, **kw, rope_theta=ROPE_THETA)
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    return cfg


def experts_modules(model):
    return [m for m in model.modules() if hasattr(m, "gate_up_proj") and isinstance(m.gate_up_proj, torch.nn.Parameter)]


def routers(model):
    return [m for m in model.modules() if hasattr(m, "e_score_correction_bias")]


def dense_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """All experts on all tokens, mixed by a [T, E] weight matrix that is zero off the chosen top-k: the same
    output as the per-expert loop, as three batched matmuls."""
    T = hidden_states.shape[0]
    E = self.gate_up_proj.shape[0]
    mix = torch.zeros(T, E, dtype=top_k_weights.dtype, device=hidden_states.device).scatter(1, top_k_index,
                                                                                           top_k_weights)
    if self.training and hasattr(self, "_load"):
        self._load += torch.bincount(top_k_index.reshape(-1), minlength=E).to(self._load.dtype)
    gu = torch.matmul(hidden_states.unsqueeze(0), self.gate_up_proj.transpose(1, 2))  # [E, T, 2I]
    g, u = gu.chunk(2, dim=-1)
    h = F.silu(g) * u
    out = torch.matmul(h, self.down_proj.transpose(1, 2))  # [E, T, H]
    y = torch.einsum("eth,te->th", out, mix.to(out.dtype))
    return y.to(hidden_states.dtype)


def patch_experts(model):
    for ex in experts_modules(model):
        ex.forward = types.MethodType(dense_experts_forward, ex)
        ex.register_buffer("_load", torch.zeros(ex.gate_up_proj.shape[0], device=ex.gate_up_proj.device),
                           persistent=False)


@torch.no_grad()
def check_patch(model_cls_cfg, device):
    """The batched experts forward equals transformers' eager one on random input (float32)."""
    cfg = copy.deepcopy(model_cls_cfg)
    m = DeepseekV3ForCausalLM(cfg).to(device).float().eval()
    ex = experts_modules(m)[0]
    with torch.no_grad():
        ex.gate_up_proj.normal_(0, 0.05)
        ex.down_proj.normal_(0, 0.05)
    E = ex.gate_up_proj.shape[0]
    k = cfg.num_experts_per_tok
    x = torch.randn(37, cfg.hidden_size, device=device)
    idx = torch.stack([torch.randperm(E, device=device)[:k] for _ in range(37)])
    w = torch.rand(37, k, device=device)
    want = ex(x, idx, w)
    got = dense_experts_forward(ex, x, idx, w)
    err = float((got - want).abs().max() / want.abs().max())  # tf32 matmuls: ~1e-4 at most
    print(f"check: batched experts forward vs transformers' ({type(ex).__name__}): rel err {err:.2e}", flush=True)
    assert err < 1e-3, err


def count_params(model):
    total = sum(p.numel() for p in model.parameters())
    cfg = model.config
    n_moe = cfg.num_hidden_layers - cfg.first_k_dense_replace
    per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    inactive = n_moe * (cfg.n_routed_experts - cfg.num_experts_per_tok) * per_expert
    embed = cfg.vocab_size * cfg.hidden_size
    return total, total - inactive - embed


def lr_at(progress, peak, warmup=0.03, floor=0.1):
    if progress < warmup:
        return peak * progress / warmup
    p = min(1.0, (progress - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def batches(data, batch, seq, gen):
    n = data.numel() - seq - 1
    offs = torch.randint(0, n, (batch,), device=data.device, generator=gen)
    idx = offs[:, None] + torch.arange(seq + 1, device=data.device)[None, :]
    chunk = data[idx].long()
    return chunk[:, :-1], chunk[:, 1:]


def loss_of(model, x, y):
    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def val_loss(model, val, seq, n_batches=8, batch=32):
    model.eval()
    gen = torch.Generator(device=val.device).manual_seed(123)
    tot = 0.0
    for _ in range(n_batches):
        x, y = batches(val, batch, seq, gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            tot += float(loss_of(model, x, y))
    model.train()
    return tot / n_batches


def train(args, device, log):
    train_ids = torch.from_numpy(np.fromfile(Path(args.data) / "train.bin", dtype=np.uint16).astype(np.int32)).to(device)
    val_ids = torch.from_numpy(np.fromfile(Path(args.data) / "val.bin", dtype=np.uint16).astype(np.int32)).to(device)
    print(f"data: {train_ids.numel()} train tokens, {val_ids.numel()} val tokens", flush=True)
    torch.manual_seed(args.seed)
    models, opts, peaks = {}, {}, {"target": args.lr, "draft": args.lr_draft}
    for name in ("target", "draft"):
        cfg = make_config(name)
        cfg._attn_implementation = "sdpa"
        m = DeepseekV3ForCausalLM(cfg).to(device).float().train()
        patch_experts(m)
        total, active = count_params(m)
        print(f"{name}: {total / 1e6:.2f}M parameters, {active / 1e6:.2f}M active non-embedding per token", flush=True)
        log[name] = {"params": total, "active_non_embedding": active, "arch": ARCH[name], "curve": []}
        decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in m.named_parameters() if p.dim() < 2]
        opts[name] = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                       lr=peaks[name], betas=(0.9, 0.95), eps=1e-8, fused=True)
        models[name] = m
    gen = torch.Generator(device=device).manual_seed(args.seed)
    budget = args.minutes * 60.0
    torch.cuda.synchronize()
    t0 = time.time()
    step, tokens = 0, 0
    while True:
        elapsed = time.time() - t0
        # whichever runs out first: the wall-time budget, or --epochs passes over the training tokens
        progress = max(elapsed / budget, tokens / (args.epochs * train_ids.numel()))
        if args.max_steps:
            progress = step / args.max_steps
        if progress >= 1.0:
            break
        x, y = batches(train_ids, args.batch, args.seq, gen)
        losses = {}
        for name, m in models.items():
            lr = lr_at(progress, peaks[name])
            for g in opts[name].param_groups:
                g["lr"] = lr
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_of(m, x, y)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[name].step()
            # DeepSeek-V3's auxiliary-loss-free balancing: nudge each router's bias towards under-used experts.
            with torch.no_grad():
                for r, ex in zip(routers(m), experts_modules(m)):
                    load = ex._load
                    r.e_score_correction_bias += args.bias_rate * torch.sign(load.mean() - load)
                    ex._load.zero_()
            losses[name] = loss
        step += 1
        tokens += x.numel()
        if step % args.log_every == 0 or step == 1:
            lt, ld = float(losses["target"].detach()), float(losses["draft"].detach())
            rec = {"step": step, "s": round(time.time() - t0, 1), "tokens": tokens, "loss": round(lt, 4)}
            msg = f"step {step:5d} {time.time() - t0:6.1f}s tok {tokens / 1e6:7.1f}M  target {lt:.4f}  draft {ld:.4f}"
            if step % (args.log_every * 5) == 0 or step == 1:
                vt, vd = val_loss(models["target"], val_ids, args.seq), val_loss(models["draft"], val_ids, args.seq)
                msg += f"  | val target {vt:.4f} draft {vd:.4f}"
                rec["val"] = round(vt, 4)
                log["draft"]["curve"].append({"step": step, "loss": round(ld, 4), "val": round(vd, 4)})
            log["target"]["curve"].append(rec)
            print(msg, flush=True)
    torch.cuda.synchronize()
    train_s = time.time() - t0
    for name, m in models.items():
        vl = val_loss(m, val_ids, args.seq, n_batches=32)
        log[name]["final_val_loss"] = vl
        log[name]["final_val_ppl"] = math.exp(vl)
        print(f"{name}: final val loss {vl:.4f} (ppl {math.exp(vl):.1f})", flush=True)
    log["train_seconds"] = train_s
    log["steps"] = step
    log["tokens"] = tokens
    log["epochs"] = tokens / train_ids.numel()
    print(f"trained {step} steps, {tokens / 1e6:.1f}M tokens ({log['epochs']:.1f} epochs) in {train_s:.0f}s", flush=True)
    return models


def unpatch(model):
    for ex in experts_modules(model):
        if "forward" in ex.__dict__:
            del ex.forward


def export(model, out_dir, tok_dir, shard):
    """BF16 weights (router bias F32, as DeepSeek-V3's hub checkpoint stores it) through save_pretrained."""
    unpatch(model)
    m = copy.deepcopy(model).cpu().eval()
    biases = {id(r): r.e_score_correction_bias.detach().float().clone() for r in routers(m)}
    m = m.to(torch.bfloat16)
    for r in routers(m):
        r.e_score_correction_bias = biases[id(r)]
    m.config.dtype = torch.bfloat16
    out_dir.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(str(out_dir), max_shard_size=shard)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tok_dir) / f, out_dir / f)
    from safetensors import safe_open
    names, dtypes = [], set()
    for p in sorted(out_dir.glob("*.safetensors")):
        with safe_open(str(p), "pt") as f:
            for k in f.keys():
                names.append(k)
                dtypes.add((k.endswith("e_score_correction_bias"), str(f.get_slice(k).get_dtype())))
    print(f"export {out_dir.name}: {len(names)} tensors, dtypes {sorted(dtypes)}, e.g. "
          f"{[n for n in names if '.mlp.experts.' in n][:3]}", flush=True)
    return m


@torch.no_grad()
def full_logits(model, ids):
    return model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids, n):
    seq, toks, gaps = list(ids), [], []
    for _ in range(n):
        lg = full_logits(model, seq)[-1]
        top2 = torch.topk(lg, 2).values
        t = int(torch.argmax(lg))
        toks.append(t)
        gaps.append(float(top2[0] - top2[1]))
        seq.append(t)
    return toks, gaps


def load_tok(d):
    try:
        return AutoTokenizer.from_pretrained(str(d))
    except Exception as e:  # fall back to the plain fast tokenizer class with the same files
        print(f"AutoTokenizer failed ({e!r}); using PreTrainedTokenizerFast", flush=True)
        cfg = json.loads((Path(d) / "tokenizer_config.json").read_text())
        t = transformers.PreTrainedTokenizerFast(tokenizer_file=str(Path(d) / "tokenizer.json"),
                                                 bos_token=cfg["bos_token"], eos_token=cfg["eos_token"],
                                                 pad_token=cfg["pad_token"])
        t.chat_template = cfg["chat_template"]
        return t


def reference(out_dir, trained, log_entry):
    """Reload through transformers' own loader, float32 eager on the CPU; write ref.json + ref_logits*.npy."""
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    try:
        m = DeepseekV3ForCausalLM.from_pretrained(str(out_dir), experts_implementation="eager", **kw).eval()
    except TypeError:
        m = DeepseekV3ForCausalLM.from_pretrained(str(out_dir), **kw).eval()
    tok = load_tok(out_dir)
    ids = tok(PROMPT_A)["input_ids"]
    chat_text = tok.apply_chat_template(PROMPT_B_MESSAGES, tokenize=False, add_generation_prompt=True)
    ids_b = tok(chat_text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 0 and ids_b[0] == 0, (ids[:3], ids_b[:3])
    ref, ref_b = full_logits(m, ids), full_logits(m, ids_b)
    # The reloaded model is the trained one: same logits as the trained float32 model with its parameters rounded
    # to bf16 (buffers such as rope's inv_freq stay float32, as a fresh load computes them; the router bias is
    # stored F32). Recorded, not asserted: the C++ test is the check that matters, and a failed run costs device time.
    mem = copy.deepcopy(trained).cpu().float().eval()
    unpatch(mem)
    with torch.no_grad():
        for p in mem.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    mem.config._attn_implementation = "eager"
    d = float((full_logits(mem, ids) - ref).abs().max())
    print(f"reference {out_dir.name}: reloaded vs in-memory max |diff| {d:.3g} (max |logit| {float(ref.abs().max()):.3g})",
          flush=True)
    log_entry["reload_vs_memory_max_abs_diff"] = d
    toks, gaps = greedy(m, ids, N_GREEDY)
    toks_b, gaps_b = greedy(m, ids_b, N_GREEDY)
    np.save(out_dir / "ref_logits.npy", ref.numpy().astype(np.float32))
    np.save(out_dir / "ref_logits_b.npy", ref_b.numpy().astype(np.float32))
    rj = OrderedDict(
        ids=ids, greedy=toks, ids_b=ids_b, greedy_b=toks_b,
        prompt=PROMPT_A, prompt_b_messages=PROMPT_B_MESSAGES,
        text_greedy=tok.decode(toks), text_greedy_b=tok.decode(toks_b),
        reference=f"transformers {transformers.__version__} DeepseekV3ForCausalLM float32",
        notes=(f"Trained by tools/train/train.py. Reference computed on CPU in float32 with attn_implementation=eager,"
               f" experts_implementation=eager, torch {torch.__version__.split('+')[0]}, from_pretrained of this "
               f"folder; greedy = {N_GREEDY} argmax steps recomputing the full sequence (no KV cache, no EOS stop). "
               f"Min greedy top1-top2 gap {min(gaps + gaps_b):.3g}."),
    )
    (out_dir / "ref.json").write_text(json.dumps(rj, indent=1) + "\n")
    log_entry["greedy_text"] = rj["text_greedy"]
    log_entry["greedy_text_b"] = rj["text_greedy_b"]
    log_entry["min_greedy_gap"] = min(gaps + gaps_b)
    print(f"  greedy a: {rj['text_greedy']!r}\n  greedy b: {rj['text_greedy_b']!r}  (min gap {min(gaps + gaps_b):.3g})",
          flush=True)


@torch.no_grad()
def samples(model, tok_dir, device, log_entry):
    """A few sampled continuations from the trained (float32) model, for the README."""
    unpatch(model)
    model.eval()
    tok = load_tok(tok_dir)
    out = []
    g = torch.Generator(device=device).manual_seed(7)
    for prompt in ["The quick brown fox", "In the beginning", "A hacker is", "Love is"]:
        ids = tok(prompt)["input_ids"]
        seq = torch.tensor([ids], device=device)
        for _ in range(60):
            lg = model(input_ids=seq, use_cache=False).logits[0, -1].float() / 0.8
            t = torch.multinomial(torch.softmax(lg, -1), 1, generator=g)
            if int(t) == 1:
                break
            seq = torch.cat([seq, t[None]], 1)
        text = tok.decode(seq[0].tolist(), skip_special_tokens=True)
        out.append(text)
        print(f"sample: {text!r}", flush=True)
    log_entry["samples"] = out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=6.0, help="training wall time (the LR schedule follows it)")
    ap.add_argument("--max-steps", type=int, default=0, help="a step count instead of --minutes")
    ap.add_argument("--epochs", type=float, default=10.0, help="stop after this many passes over the data")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-draft", type=float, default=3e-3)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--shard", default="10MB")
    args = ap.parse_args()
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}", flush=True)
    check_patch(make_config("draft"), device)
    log = {"args": vars(args), "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name()}
    models = train(args, device, log)
    for name, m in models.items():
        samples(m, args.data, device, log[name])
        folder = out / ("sluice-k2-tiny" if name == "target" else "sluice-k2-tiny-draft")
        export(m, folder, args.data, args.shard)
        reference(folder, m, log[name])
        log[name]["bytes"] = sum(p.stat().st_size for p in folder.iterdir())
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != 'curve'} if isinstance(v, dict) else v
                      for k, v in log.items()}, indent=1), flush=True)


if __name__ == "__main__":
    main()
