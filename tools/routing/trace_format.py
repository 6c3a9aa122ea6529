"""Reader for sluice expert traces (`--trace-experts FILE`); the format is documented in src/experts/expert_trace.h.

read_trace(path) returns a Trace with the header fields and one Record per MoE layer fetch, and raises TraceError
naming the file when it is not a trace, of another version, truncated (a record cut short or no end marker) or
inconsistent. check_model(trace, model_dir) raises TraceError when the trace was recorded on another model.
Standard library only (numpy is not needed to read a trace).
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

MAGIC = b"SLTRACE1"
END_MAGIC = b"SLTREND\0"
VERSION = 1
HIT, READ_AHEAD = 1, 2  # distinct-expert flags
HINT_RESIDENT, HINT_READ, HINT_SKIPPED, HINT_NO_SLOT = 0, 1, 2, 3  # look-ahead hint outcomes


class TraceError(Exception):
    pass


@dataclass
class Record:
    pass_index: int
    layer: int
    top_k: int
    n_rows: int
    choices: list  # [n_rows][top_k] expert ids
    distinct: list  # [(expert, flags)]
    hints: list  # [(expert, outcome)]


@dataclass
class Trace:
    path: str
    version: int
    n_layers: int
    n_experts: int
    cache_slots: int
    config_xxh3: int
    weights_xxh3: int
    prefetch: bool
    architecture: str
    policy: str
    records: list = field(default_factory=list)


class _Cursor:
    def __init__(self, path: str, data: bytes):
        self.path, self.data, self.at, self.what = path, data, 0, "the header"

    def take(self, n: int) -> bytes:
        if len(self.data) - self.at < n:
            raise TraceError(f"expert trace {self.path} is truncated: {self.what} at byte {self.at} needs {n} bytes, "
                             f"{len(self.data) - self.at} left (did the run finish?)")
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self) -> str:
        (n,) = self.unpack("B")
        return self.take(n).decode("utf-8", "replace")


def read_trace(path: str) -> Trace:
    with open(path, "rb") as f:
        data = f.read()
    c = _Cursor(path, data)
    if c.take(8) != MAGIC:
        raise TraceError(f"expert trace {path}: not an expert trace (no SLTRACE1 magic)")
    (version,) = c.unpack("I")
    if version != VERSION:
        raise TraceError(f"expert trace {path}: version {version}, this script reads {VERSION}")
    n_layers, n_experts, cache_slots, cfg, wts, prefetch = c.unpack("IIIQQB")
    t = Trace(path, version, n_layers, n_experts, cache_slots, cfg, wts, prefetch != 0, c.string(), c.string())
    if not (0 < n_layers <= 65536 and 0 < n_experts <= 65536):
        raise TraceError(f"expert trace {path}: header says {n_layers} layers of {n_experts} experts")
    while True:
        c.what = f"record {len(t.records)}"
        (tag,) = c.unpack("B")
        if tag == ord("E"):
            c.what = "the end marker"
            (n,) = c.unpack("Q")
            if c.take(8) != END_MAGIC:
                raise TraceError(f"expert trace {path}: damaged end marker")
            if n != len(t.records):
                raise TraceError(f"expert trace {path}: end marker counts {n} records, the file has {len(t.records)}")
            if c.at != len(data):
                raise TraceError(f"expert trace {path}: {len(data) - c.at} bytes after the end marker")
            return t
        if tag != ord("R"):
            raise TraceError(f"expert trace {path}: byte {c.at - 1} ({c.what}) is neither a record nor the end marker")
        top_k, layer, pass_index, n_rows, n_distinct, n_hints = c.unpack("BHIIHH")
        if layer >= n_layers or not 0 < top_k <= n_experts:
            raise TraceError(f"expert trace {path}: {c.what}: layer {layer}, top_k {top_k} out of range")
        flat = c.unpack(f"{n_rows * top_k}H") if n_rows else ()
        if any(e >= n_experts for e in flat):
            raise TraceError(f"expert trace {path}: {c.what}: expert {max(flat)} of {n_experts}")
        union = set(flat)
        lists = []
        for n in (n_distinct, n_hints):
            raw = c.take(3 * n)
            items = [struct.unpack_from("<HB", raw, 3 * i) for i in range(n)]
            if any(e >= n_experts for e, _ in items):
                raise TraceError(f"expert trace {path}: {c.what}: expert id out of range")
            lists.append(items)
        if {e for e, _ in lists[0]} != union or len(lists[0]) != len(union):
            raise TraceError(f"expert trace {path}: {c.what}: the fetched experts are not the union of the rows' choices")
        choices = [list(flat[r * top_k:(r + 1) * top_k]) for r in range(n_rows)]
        t.records.append(Record(pass_index, layer, top_k, n_rows, choices, lists[0], lists[1]))


def fingerprint(t: Trace) -> tuple:
    return (t.architecture, t.n_layers, t.n_experts, t.config_xxh3, t.weights_xxh3)


def check_same_model(traces: list) -> None:
    first = traces[0]
    for t in traces[1:]:
        if fingerprint(t) != fingerprint(first):
            raise TraceError(f"expert trace {t.path} is for another model than {first.path}: "
                             f"{t.architecture} config {t.config_xxh3:016x} weights {t.weights_xxh3:016x}, "
                             f"{t.n_experts} experts vs {first.architecture} config {first.config_xxh3:016x} "
                             f"weights {first.weights_xxh3:016x}, {first.n_experts} experts")


def check_model(t: Trace, model_dir: str) -> str:
    """Raises TraceError unless the trace is for the model in model_dir; returns what was compared."""
    cfg_path = os.path.join(model_dir, "config.json")
    with open(cfg_path, "rb") as f:
        cfg_bytes = f.read()
    cfg = json.loads(cfg_bytes)
    text = cfg.get("text_config", cfg)
    n_experts = text.get("n_routed_experts") or text.get("num_local_experts") or text.get("num_experts")
    n_layers = text.get("num_hidden_layers")
    if n_experts != t.n_experts or n_layers != t.n_layers:
        raise TraceError(f"expert trace {t.path} is for another model: {t.n_layers} layers of {t.n_experts} experts, "
                         f"{cfg_path} has {n_layers} of {n_experts}")
    try:
        import xxhash  # optional: the config.json hash check
    except ImportError:
        return "layers and experts (install xxhash to compare config.json's hash too)"
    h = xxhash.xxh3_64_intdigest(cfg_bytes)
    if h != t.config_xxh3:
        raise TraceError(f"expert trace {t.path} is for another model: config.json hash {t.config_xxh3:016x}, "
                         f"{cfg_path} hashes to {h:016x}")
    return "layers, experts and config.json's xxh3"
