#!/usr/bin/env python3
"""Build the training corpus and the tokenizer for sluice's small trained model.

Reads freely licensed English text that Debian packages install (see README.md for each licence):
  bible-kjv + bible-kjv-text  the King James Bible (public domain), dumped with the `bible` program
  fortunes                    the fortune cookie files (/usr/share/games/fortunes)
  dict-jargon                 the Jargon File (public domain), dictd format
  dict-gcide                  GCIDE, mostly Webster's 1913 (GPL-2+), dictd format
Writes into --out:
  tokenizer.json, tokenizer_config.json   a byte-level BPE (the `tokenizers` package) with a chat template
  train.bin, val.bin                      uint16 token ids, documents as <|bos|> ... <|eos|>, concatenated
  corpus_stats.json                       bytes, documents and tokens per source
Deterministic: the same packages give byte-identical files.
"""
import argparse
import base64
import gzip
import json
import os
import random
import re
import subprocess
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>", "<|pad|>"]
BOS, EOS = SPECIALS[0], SPECIALS[1]

# A plain chat layout: <|bos|> then, per message, <|role|>\n content <|eos|>\n; the reply follows <|assistant|>\n.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('roles are system, user and assistant') }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def chat(user, assistant):
    return f"<|user|>\n{user}{EOS}\n<|assistant|>\n{assistant}"


def kjv_docs():
    """One document per chapter: 'Genesis 1' then its verses, each '1:3 And God said ...'."""
    out = subprocess.run(["bible", "-l0", "Ge1:1-Re22:21"], check=True, capture_output=True, text=True).stdout
    docs, cur, book = [], [], None
    for line in out.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m and cur:
            cur.append(f"{m.group(1)} {m.group(2).strip()}")
        else:
            if cur:
                docs.append("\n".join(cur))
            cur = [line.strip()]
    if cur:
        docs.append("\n".join(cur))
    return docs


def fortune_docs(root="/usr/share/games/fortunes"):
    docs = []
    for p in sorted(Path(root).iterdir()):
        if p.suffix in (".dat", ".u8") or p.is_dir() or p.is_symlink():
            continue
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        for f in re.split(r"\n%\n", text):
            f = f.strip("\n")
            if f.strip() and len(f) < 4000:
                docs.append(f.expandtabs(8).rstrip())
    return docs


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64num(s):
    n = 0
    for c in s:
        n = n * 64 + B64.index(c)
    return n


def dictd_entries(name):
    """(headword, body) of each entry of /usr/share/dictd/NAME.{index,dict.dz}, in file order, skipping the
    00-database-* meta entries."""
    data = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read()
    seen, out = set(), []
    for line in open(f"/usr/share/dictd/{name}.index", encoding="utf-8"):
        word, off, length = line.rstrip("\n").split("\t")[:3]
        if word.startswith("00-database") or word.startswith("00database"):
            continue
        off, length = b64num(off), b64num(length)
        if off in seen:
            continue
        seen.add(off)
        out.append((off, word, data[off:off + length].decode("utf-8", errors="replace")))
    out.sort()
    return [(w, b) for _, w, b in out]


def clean_gcide(body):
    lines = [l for l in body.splitlines() if not re.fullmatch(r"\s*\[[^\]]*(Webster|WordNet|PJC|Century)[^\]]*\]\s*", l)]
    text = "\n".join(l[3:] if l.startswith("   ") else l for l in lines).strip()
    text = re.sub(r"\\([^\\\n]*)\\", lambda m: m.group(1).replace("*", "").replace('"', "").replace("`", "").replace("'", ""), text)
    return re.sub(r"\n{3,}", "\n\n", text)


def clean_jargon(body):
    lines = body.splitlines()
    text = "\n".join(l[4:] if l.startswith("    ") else l.strip() for l in lines).strip()
    return re.sub(r"\n{3,}", "\n\n", text)


def first_sentence(text, limit=400):
    para = text.split("\n\n")[0].replace("\n", " ")
    return para[:limit]


def dictionary_docs(rng, gcide_fraction, chat_fraction):
    docs, n_chat = [], 0
    for source, cleaner, frac in (("jargon", clean_jargon, 1.0), ("gcide", clean_gcide, gcide_fraction)):
        for word, body in dictd_entries(source):
            if rng.random() >= frac:
                continue
            text = cleaner(body)
            if len(text) < 20:
                continue
            if rng.random() < chat_fraction:
                # the body without its first line (the headword and pronunciation)
                rest = text.split("\n", 1)[1].strip() if "\n" in text else text
                if len(rest) > 20:
                    q = rng.choice([f"What does \"{word}\" mean?", f"Define {word}.", f"What is {word}?"])
                    docs.append((source, chat(q, f"{word}: {rest}")))
                    n_chat += 1
                    continue
            docs.append((source, text))
    return docs, n_chat


def bible_chat_docs(chapters, rng, n):
    """Ask for a verse, answer with it: '<|user|> Quote Genesis 1:3. <|assistant|> And God said ...'."""
    out = []
    for _ in range(n):
        ch = rng.choice(chapters)
        head, *verses = ch.split("\n")
        if not verses:
            continue
        v = rng.choice(verses)
        num, text = v.split(" ", 1)
        out.append(chat(f"Quote {head}:{num}.", text))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--gcide-fraction", type=float, default=0.3)
    ap.add_argument("--chat-fraction", type=float, default=0.25)
    ap.add_argument("--val-fraction", type=float, default=0.01)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(24)

    chapters = kjv_docs()
    docs = [("kjv", d) for d in chapters]
    docs += [("kjv-chat", d) for d in bible_chat_docs(chapters, rng, 6000)]
    docs += [("fortunes", d) for d in fortune_docs()]
    dd, n_chat = dictionary_docs(rng, args.gcide_fraction, args.chat_fraction)
    docs += dd
    rng.shuffle(docs)

    # Tokenizer: byte-level BPE (GPT-2 pre-tokenizer regex, no prefix space), specials first so <|bos|> = 0.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator((d for _, d in docs), trainer=trainer, length=len(docs))
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    assert (bos_id, eos_id) == (0, 1), (bos_id, eos_id)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos_id)])
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": "<|pad|>",
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    # Token stream: <|bos|> doc <|eos|> per document (the post-processor adds the bos).
    n_val = max(1, int(len(docs) * args.val_fraction))
    stats = {}
    streams = {"val": [], "train": []}
    encs = tok.encode_batch([d for _, d in docs])
    for i, ((src, d), e) in enumerate(zip(docs, encs)):
        ids = e.ids + [eos_id]
        streams["val" if i < n_val else "train"].append(np.asarray(ids, dtype=np.uint16))
        s = stats.setdefault(src, {"docs": 0, "bytes": 0, "tokens": 0})
        s["docs"] += 1
        s["bytes"] += len(d.encode("utf-8"))
        s["tokens"] += len(ids)
    for k, v in streams.items():
        np.concatenate(v).tofile(out / f"{k}.bin")
    stats["_total"] = {k: sum(s[k] for s in stats.values()) for k in ("docs", "bytes", "tokens")}
    stats["_chat_dictionary_docs"] = n_chat
    stats["_val_docs"] = n_val
    stats["_vocab"] = tok.get_vocab_size()
    (out / "corpus_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
