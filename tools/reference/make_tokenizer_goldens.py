#!/usr/bin/env python3
"""Build the tokenizer test fixtures and goldens in tests/data/tokenizers/ from the Python references.

For every tokenizer it writes <name>_goldens.json: a corpus of texts with the ids the reference produces without
and with special tokens added, the reference decode of those ids, and decode cases of raw id lists (partial and
invalid UTF-8). References:
  * tokenizer.json models: HF `tokenizers` (Tokenizer.from_file). "ids_special" is the tokenizers result with
    add_special_tokens=True plus the BOS/EOS that tokenizer_config.json's add_bos_token/add_eos_token ask for
    (the LlamaTokenizerFast post-processor).
  * Kimi: `tiktoken` with a custom Encoding carrying tokenization_kimi.py's pat_str, its special-token table and
    its 400,000 / 25,000 character pre-chunking, encode(allowed_special="all").

Fixtures it creates (all committed):
  * kimi_like/: we have no real Kimi tiktoken.model, so this is a tiktoken.model-format file made from the first
    65,536 ranks of gpt-oss's o200k vocabulary (byte-level strings mapped back to bytes) plus a Kimi-like
    tokenizer_config.json (Kimi's special-token names at ids 65536.. ). Kimi's pat_str is used as is.
  * qwen3_small/, deepseek_v3_small/: the real tokenizer.json cut to its first 16,384 vocabulary ids and the
    merges among them (added tokens kept, renumbered after), so tests always run without the big files.
The full deepseek_v3, qwen3 and gptoss goldens are made from the real files committed in
tests/data/tokenizers/{deepseek_v3,qwen3,gptoss}/ (tokenizer.json.gz + tokenizer_config.json, see the README and
LICENSE there); --full DIR reads them from another folder of that shape instead.

Usage: python3 tools/reference/make_tokenizer_goldens.py [--full DIR]
Requirements: tools/reference/requirements.txt (tokenizers, tiktoken).
"""
import argparse
import base64
import gzip
import json
import random
from pathlib import Path

import tiktoken
from tokenizers import Tokenizer

OUT = Path(__file__).resolve().parents[2] / 'tests' / 'data' / 'tokenizers'

KIMI_PAT = '|'.join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
KIMI_NAMED = {0: '[BOS]', 1: '[EOS]', 2: '<|im_end|>', 3: '<|im_user|>', 4: '<|im_assistant|>',
              6: '<|start_header_id|>', 7: '<|end_header_id|>', 9: '[EOT]', 10: '<|im_system|>',
              11: '<|tool_calls_section_begin|>', 12: '<|tool_calls_section_end|>', 13: '<|tool_call_begin|>',
              14: '<|tool_call_argument_begin|>', 15: '<|tool_call_end|>', 17: '<|im_middle|>', 254: '[UNK]',
              255: '[PAD]'}
KIMI_BASE = 65536


def byte_decoder():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def corpus(special_strings):
    texts = [
        '', ' ', '  ', '\n', '\t', '\r\n', 'a', 'Hello, world!', 'Hello world', ' Hello', 'hello   world  ',
        "It's a dog's life; they're here, we've seen, I'm fine, you'll go, he'd say.",
        "IT'S THEY'RE WE'VE I'M YOU'LL HE'D 'S 'T 'Re 'vE", "x'ſ don'T", "'s", "''s'", "rock'n'roll",
        'The quick brown fox jumps over the lazy dog.', 'Ünïcödé façade naïve café résumé Zürich',
        'Съешь же ещё этих мягких французских булок, да выпей чаю.', 'Ελληνικά: Γειά σου Κόσμε!',
        'العربية: مرحبا بالعالم ١٢٣٤', 'עברית: שלום עולם', 'हिन्दी: नमस्ते दुनिया, क्षत्रिय',
        'ภาษาไทย: สวัสดีชาวโลก', '中文：你好，世界！欢迎使用。', '日本語：こんにちは、世界。カタカナとひらがな、漢字。',
        '한국어: 안녕하세요 세계', 'Mixed 中文 and English 混合 text here', '中文、日本々ー中', 'ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３',
        '😀 🎉🚀 emoji test 😀', '👨‍👩‍👧‍👦 family 👩🏽‍💻 coder 👍🏿 🏳️‍🌈 flag 🇺🇸🇯🇵', '❤️‍🔥 ✌🏼',
        'def foo(x: int) -> bool:\n    return x > 0  # comment\n',
        'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\r\n',
        '#include <stdio.h>\nint main(){printf("%d\\n", 42);}', '{"key": [1, 2.5, -3e10], "b": null}',
        'https://example.com/path?q=1&r=two#frag', 'a/b/c//d ../../etc', 'x+=1;y-=2;z*=3;w/=4;',
        '    indented\n        more\n\n\n\ttabs\t\there', 'trailing spaces   \n   leading', '\n\n\n\n',
        ' \n \n ', '\r\n\r\n\r\n', 'a\r\nb\rc\nd', '\t\t\t', '   \t  \n  ', 'end   ', 'a  b\n\n\nc',
        '0', '12', '123', '1234', '12345', '123456789', '1234567890123456789012345', '3.14159265358979',
        '1,000,000', '-42', '0x1F2E3D', '٣٤٥ ४५६ ๔๕๖', '½ ² ³ Ⅻ ①②③', '2024-01-15T10:30:00Z',
        'e\u0301 a\u0300\u0301 o\u0308\u0304 q\u0323\u0307 \u1e0b\u0323', 'A\u030a \u212b \u00c5', '\u0344 \u0958 \u2126',
        '\uac00\u11a8 \u1100\u1161\u11a8 \u1112\u1161\u11ab', 'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324a\u0339lgo',
        '\u00a0nbsp\u00a0\u2003em\u3000ideo', 'zero\u200bwidth\u200djoiner\u200cnon', '\ufeffbom', '\x85nel\x85',
        '\x1c\x1d\x1e\x1f separators', 'soft\u00adhyphen', 'rtl \u202eevil\u202c', 'private \ue000\U000f0000',
        '\U00010348 gothic \U0001d11e music \U0001f9ff', 'max \U0010fffd', 'control \x00\x01\x07\x7f',
        'A' * 300, 'ab' * 500, 'supercalifragilisticexpialidocious' * 20, '1' * 100, ' ' * 1000, '\n' * 200,
        'x' * 3000 + ' y', '😀' * 200, '中' * 500, '-' * 400 + '=' * 400, 'http' + '/' * 300,
        'Ǆǅǆ ǈ ǋ ᾈ ᾼ ﬀ ﬁ İ ı ß ẞ', 'CamelCaseWordsHere and snake_case_words and SCREAMING_CASE',
        'MiXeD cAsE wOrDs', "O'Neil McDonald's", '...!!!???', '—–-', '«guillemets» „quotes“ ‘single’',
        '$100 €50 £30 ¥1000', 'a\u00a0\u00a0\u00a0b', ' \u3000 ', 'tab\tthen  two\u2028ls\u2029ps',
    ]
    for s in special_strings:
        texts += [s, 'before' + s + 'after', ' ' + s + ' ', s + s, s[:-1], s + s[-1], '<' + s, s.lower()]
    rng = random.Random(1234)
    pool = ('abcXYZ  \n\t\r019,.;!?\'"-_()[]{}<>/\\|@#$%^&*+=~`' + 'éüßñçÅΩπЖжשאعبक्षกขนา中文字日本ひらカタ한글'
            + '\u0301\u0308\u0323\u00a0\u3000\u200d' + '😀👍🏽🇺🇸' + '١٢३४')
    for _ in range(150):
        texts.append(''.join(rng.choice(pool) for _ in range(rng.randint(1, 80))))
    return texts


def decode_cases(byte_ids):
    seqs = [[0xE4, 0xB8], [0xE4, 0xB8, 0xAD], [0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF0, 0x9F, 0x98], [0x80, 0x80, 0x41], [0xE2, 0x28, 0xA1], [0xF0, 0x9F, 0x98, 0x80, 0xF0],
            [0x61, 0xC3], [0xC3, 0x61], [0xEF, 0xBF, 0xBD], [0xF8, 0x88, 0x80, 0x80, 0x80]]
    return [[byte_ids[b] for b in s] for s in seqs]


def write(name, cases, decodes, source):
    path = OUT / f'{name}_goldens.json'
    path.write_text(json.dumps({'tokenizer': name, 'reference': source, 'cases': cases, 'decode_cases': decodes},
                               ensure_ascii=True, separators=(',', ':')) + '\n')
    print(f'{path.name}: {len(cases)} encode cases, {len(decodes)} decode cases')


def hf_goldens(name, tok_json_text, config):
    tok = Tokenizer.from_str(tok_json_text)
    vocab = tok.get_vocab()
    prefix, suffix = [], []
    def token_content(key):
        v = config.get(key)
        return v.get('content') if isinstance(v, dict) else v
    if config.get('add_bos_token'):
        prefix = [vocab[token_content('bos_token')]]
    if config.get('add_eos_token'):
        suffix = [vocab[token_content('eos_token')]]
    added = [a['content'] for a in json.loads(tok_json_text)['added_tokens']]
    specials = added[:3] + added[-3:] + ['<|im_end|>', '<｜User｜>', '<think>']
    cases = []
    for text in corpus(specials):
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = prefix + tok.encode(text, add_special_tokens=True).ids + suffix
        cases.append({'text': text, 'ids': ids, 'ids_special': ids_special, 'decoded': tok.decode(ids, skip_special_tokens=False)})
    bd = byte_decoder()
    byte_ids = {bd[t]: i for t, i in vocab.items() if len(t) == 1 and t in bd}
    decodes = []
    for ids in decode_cases(byte_ids) + [[i for i in cases[5]['ids']] + prefix]:
        decodes.append({'ids': ids, 'decoded': tok.decode(ids, skip_special_tokens=False)})
    write(name, cases, decodes, f'tokenizers {__import__("tokenizers").__version__}')


def read_tokenizer_json(folder):
    plain = folder / 'tokenizer.json'
    if plain.exists():
        return plain.read_text()
    return gzip.decompress((folder / 'tokenizer.json.gz').read_bytes()).decode()


def make_small(src_text, config, name, keep_ids=16384):
    j = json.loads(src_text)
    model = j['model']
    vocab = {t: i for t, i in model['vocab'].items() if i < keep_ids}
    merges = []
    for m in model['merges']:
        a, b = m.split(' ') if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model['vocab'], model['merges'] = vocab, merges
    next_id = keep_ids
    for a in j['added_tokens']:
        if a['id'] >= keep_ids:
            a['id'] = next_id
            next_id += 1
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(j, ensure_ascii=False, separators=(',', ':'))
    (folder / 'tokenizer.json').write_text(text)
    small_config = {k: v for k, v in config.items() if k in ('add_bos_token', 'add_eos_token', 'bos_token', 'eos_token')}
    (folder / 'tokenizer_config.json').write_text(json.dumps(small_config, ensure_ascii=False, indent=1) + '\n')
    return text, small_config


def kimi_encode(enc, text):
    def split_runs(s, limit=25000):
        run, is_space, start = 0, (s[0].isspace() if s else False), 0
        for i, ch in enumerate(s):
            now = ch.isspace()
            if is_space ^ now:
                run, is_space = 1, now
            else:
                run += 1
                if run > limit:
                    yield s[start:i]
                    start, run = i, 1
        yield s[start:]
    out = []
    for i in range(0, len(text), 400000):
        for sub in split_runs(text[i:i + 400000]):
            out += enc.encode(sub, allowed_special='all')
    return out


def kimi(gptoss_json_text):
    vocab = json.loads(gptoss_json_text)['model']['vocab']
    bd = byte_decoder()
    ranks = {}
    for t, i in vocab.items():
        if i < KIMI_BASE:
            ranks[bytes(bd[c] for c in t)] = i
    assert len(ranks) == KIMI_BASE
    folder = OUT / 'kimi_like'
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / 'tiktoken.model', 'w') as f:
        for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f'{base64.b64encode(b).decode()} {r}\n')
    decoder = {str(KIMI_BASE + k): {'content': v, 'lstrip': False, 'normalized': False, 'rstrip': False,
                                    'single_word': False, 'special': True} for k, v in KIMI_NAMED.items()}
    config = {'added_tokens_decoder': decoder, 'bos_token': '[BOS]', 'eos_token': '[EOS]', 'pad_token': '[PAD]',
              'unk_token': '[UNK]', 'tokenizer_class': 'TikTokenTokenizer',
              'note': 'Kimi-like test fixture: o200k ranks 0..65535 (not a real Kimi vocabulary)'}
    (folder / 'tokenizer_config.json').write_text(json.dumps(config, indent=1) + '\n')
    specials = {KIMI_NAMED.get(i - KIMI_BASE, f'<|reserved_token_{i}|>'): i for i in range(KIMI_BASE, KIMI_BASE + 258)}
    enc = tiktoken.Encoding(name='kimi_like', pat_str=KIMI_PAT, mergeable_ranks=ranks, special_tokens=specials)
    texts = corpus(['<|im_end|>', '[BOS]', '<|im_middle|>', f'<|reserved_token_{KIMI_BASE + 100}|>'])
    texts += ['y' * 25001, ' ' * 25003 + 'z', 'ab ' * 9000]
    cases = []
    for text in texts:
        ids = kimi_encode(enc, text)
        cases.append({'text': text, 'ids': ids, 'ids_special': ids, 'decoded': enc.decode(ids)})
    byte_ids = {b[0]: r for b, r in ranks.items() if len(b) == 1}
    decodes = [{'ids': ids, 'decoded': enc.decode(ids)} for ids in decode_cases(byte_ids)]
    decodes.append({'ids': [KIMI_BASE + 3, 1000, KIMI_BASE + 2], 'decoded': enc.decode([KIMI_BASE + 3, 1000, KIMI_BASE + 2])})
    write('kimi_like', cases, decodes, f'tiktoken {tiktoken.__version__} with Kimi pat_str')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--full', type=Path, default=OUT, help='folder with deepseek_v3/, qwen3/, gptoss/ (default: '
                    'tests/data/tokenizers)')
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name in ('deepseek_v3', 'qwen3', 'gptoss'):
        folder = args.full / name
        texts[name] = read_tokenizer_json(folder)
        config = json.loads((folder / 'tokenizer_config.json').read_text())
        hf_goldens(name, texts[name], config)
        if name != 'gptoss':
            small_text, small_config = make_small(texts[name], config, f'{name}_small')
            hf_goldens(f'{name}_small', small_text, small_config)
    kimi(texts['gptoss'])


if __name__ == '__main__':
    main()
