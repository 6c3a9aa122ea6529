#!/usr/bin/env python3
"""Encoding speed of sluice's tokenizer next to the reference, single thread, on the same text in one run.

Reference: HF `tokenizers` (Rust) for a folder with tokenizer.json, with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false; `tiktoken` for a folder with tiktoken.model. sluice is timed through
`sluice tokenize -m DIR --bench FILE`. Both get one warm-up pass (which fills their word caches) and then
--repeats timed passes over the text cut into documents of about --doc-kb KiB at line ends, one encode call
per document (0: the whole text as one call). The ids of the whole text from both are compared as well.

Text: --text FILE, or by default --mb megabytes of this Python's standard-library sources (English prose in
comments and docstrings plus code).

Usage: python3 tools/reference/bench_tokenizer.py --sluice build/release/bin/sluice --model DIR [--text FILE]
Requirements: tools/reference/requirements.txt.
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

os.environ['RAYON_NUM_THREADS'] = '1'
os.environ['TOKENIZERS_PARALLELISM'] = 'false'

sys.path.insert(0, str(Path(__file__).resolve().parent))


def default_text(mb):
    out, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()['stdlib']).rglob('*.py')):
        try:
            t = path.read_text(encoding='utf-8')
        except (UnicodeDecodeError, OSError):
            continue
        out.append(t)
        size += len(t.encode())
        if size >= mb * 1e6:
            break
    return ''.join(out)


def split_docs(text, doc_kb):
    if doc_kb <= 0:
        return [text]
    docs, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size >= doc_kb * 1024:
            docs.append(''.join(cur))
            cur, size = [], 0
    if cur:
        docs.append(''.join(cur))
    return docs


def reference_encoder(model_dir):
    if (model_dir / 'tokenizer.json').exists():
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(model_dir / 'tokenizer.json'))
        return 'HF tokenizers', lambda text: tok.encode(text, add_special_tokens=False).ids
    import make_tokenizer_goldens as g
    import base64
    import tiktoken
    ranks = {}
    for line in (model_dir / 'tiktoken.model').read_text().splitlines():
        if line:
            b, r = line.split()
            ranks[base64.b64decode(b)] = int(r)
    config = json.loads((model_dir / 'tokenizer_config.json').read_text())
    named = {int(k): v['content'] for k, v in config.get('added_tokens_decoder', {}).items()}
    base = len(ranks)
    specials = {named.get(i, f'<|reserved_token_{i}|>'): i for i in range(base, base + 258)}
    enc = tiktoken.Encoding(name='kimi', pat_str=g.KIMI_PAT, mergeable_ranks=ranks, special_tokens=specials)
    return 'tiktoken', lambda text: g.kimi_encode(enc, text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sluice', required=True, help='path of the sluice binary')
    ap.add_argument('--model', required=True, type=Path, help='folder with tokenizer.json or tiktoken.model')
    ap.add_argument('--text', type=Path)
    ap.add_argument('--mb', type=float, default=4.0)
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--doc-kb', type=float, default=16)
    args = ap.parse_args()
    text = args.text.read_text(encoding='utf-8') if args.text else default_text(args.mb)
    nbytes = len(text.encode())
    with tempfile.NamedTemporaryFile('w', encoding='utf-8', suffix='.txt', delete=False) as f:
        f.write('\0'.join(split_docs(text, args.doc_kb)))
        path = f.name
    with tempfile.NamedTemporaryFile('w', encoding='utf-8', suffix='.txt', delete=False) as f:
        f.write(text)
        whole = f.name
    try:
        name, encode = reference_encoder(args.model)
        ref_ids = encode(text)
        docs = split_docs(text, args.doc_kb)
        for d in docs:
            encode(d)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            for d in docs:
                encode(d)
        ref_s = (time.perf_counter() - t0) / args.repeats
        run = subprocess.run([args.sluice, 'tokenize', '-m', str(args.model), '--bench', path, '--repeats',
                              str(args.repeats)], check=True, capture_output=True, text=True)
        ours = json.loads(run.stdout)
        with open(whole, 'rb') as stdin:
            ids = json.loads(subprocess.run([args.sluice, 'tokenize', '-m', str(args.model)], stdin=stdin,
                                            check=True, capture_output=True).stdout)
    finally:
        os.unlink(path)
        os.unlink(whole)
    print(f'text: {nbytes / 1e6:.2f} MB, {len(ref_ids)} tokens, documents of {args.doc_kb} KiB; '
          f'ids identical: {ids == ref_ids}')
    print(f'{name:>14}: {nbytes / ref_s / 1e6:8.2f} MB/s')
    print(f'{"sluice":>14}: {ours["mb_per_s"]:8.2f} MB/s')
    return 0 if ids == ref_ids else 1


if __name__ == '__main__':
    sys.exit(main())
