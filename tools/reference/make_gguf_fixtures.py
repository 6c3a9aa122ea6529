"""Writes the GGUF reader's fixtures with llama.cpp's own `gguf` package (GGUFWriter), and what that package says
about them: every key/value, every tensor's name, shape (ggml order), type and offset as GGUFReader reads them back,
and the first rows of every tensor dequantised by gguf.quants.dequantize.

    python tools/reference/make_gguf_fixtures.py tests/data/gguf

Files: basic.gguf (default alignment 32; metadata of every value type, tensors F32, F16, BF16, Q8_0, Q4_K, Q6_K,
MXFP4, Q5_K and 1-D/3-D ones), aligned64.gguf (general.alignment 64), expected.json. Deterministic (seeded).
"""
import json
import os
import sys
from importlib.metadata import version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

ROWS_KEPT = 2  # rows of each tensor dequantised into expected.json

# (key, value type, value, element type for arrays). Floats are chosen so that f32 rounding shows.
METADATA = [
    ("general.architecture", V.STRING, "llama", None),
    ("general.name", V.STRING, "sluice gguf fixture \u00e9\u4e2d", None),
    ("test.u8", V.UINT8, 255, None),
    ("test.i8", V.INT8, -128, None),
    ("test.u16", V.UINT16, 65535, None),
    ("test.i16", V.INT16, -32768, None),
    ("test.u32", V.UINT32, 4294967295, None),
    ("test.i32", V.INT32, -2147483648, None),
    ("test.f32", V.FLOAT32, 0.1, None),
    ("test.bool_true", V.BOOL, True, None),
    ("test.bool_false", V.BOOL, False, None),
    ("test.string_empty", V.STRING, "", None),
    ("test.u64", V.UINT64, 18446744073709551615, None),
    ("test.i64", V.INT64, -9223372036854775808, None),
    ("test.f64", V.FLOAT64, 3.141592653589793, None),
    ("test.arr_u8", V.ARRAY, [0, 1, 254, 255], V.UINT8),
    ("test.arr_i16", V.ARRAY, [-3, 0, 7], V.INT16),
    ("test.arr_i32", V.ARRAY, [1, -2, 3, -4, 5], V.INT32),
    ("test.arr_u64", V.ARRAY, [0, 18446744073709551615], V.UINT64),
    ("test.arr_f32", V.ARRAY, [0.5, -1.25, 0.1], V.FLOAT32),
    ("test.arr_f64", V.ARRAY, [1e300, -2.5], V.FLOAT64),
    ("test.arr_bool", V.ARRAY, [True, False, True], V.BOOL),
    ("test.arr_string", V.ARRAY, ["<s>", "", "hello world", "\u2581the"], V.STRING),
    ("test.arr_nested", V.ARRAY, [[1, 2], [3, 4, 5]], V.ARRAY),  # inner arrays: i32 (gguf-py's int type)
    ("test.arr_nested_str", V.ARRAY, [["a", "bc"], ["d"]], V.ARRAY),
]


def f32(x):
    return float(np.float32(x))


def expected_value(vtype, value, sub):
    """The value as the file holds it: f32 rounded, nested arrays with gguf-py's inferred element types."""
    if vtype == V.FLOAT32:
        return f32(value)
    if vtype == V.ARRAY:
        if sub == V.ARRAY:
            items = [expected_value(V.ARRAY, v, V.get_type(v[0])) for v in value]
        else:
            items = [expected_value(sub, v, None) for v in value]
        return {"elem_type": sub.name, "items": items}
    return value


def random_q4_k(rng, n_blocks):
    b = rng.integers(0, 256, size=(n_blocks, 144), dtype=np.uint8)
    b[:, 0:2] = np.frombuffer(rng.uniform(0.001, 0.01, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
    b[:, 2:4] = np.frombuffer(rng.uniform(0.001, 0.01, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
    return b


def random_q6_k(rng, n_blocks):
    b = rng.integers(0, 256, size=(n_blocks, 210), dtype=np.uint8)
    b[:, 208:210] = np.frombuffer(rng.uniform(0.001, 0.01, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
    return b


def random_q5_k(rng, n_blocks):
    b = rng.integers(0, 256, size=(n_blocks, 176), dtype=np.uint8)
    b[:, 0:4] = np.frombuffer(rng.uniform(0.001, 0.01, 2 * n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 4)
    return b


def add_quantised(w, name, data, qtype):
    """gguf.quants.quantize where gguf-py can; the writer takes the byte shape and works out the element shape."""
    w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def write_basic(path, rng):
    w = gguf.GGUFWriter(path, "llama")  # adds general.architecture itself
    for key, vtype, value, sub in METADATA[1:]:
        if vtype == V.STRING and value == "":
            w.add_key_value(key, value, vtype)  # add_string skips empty strings
        else:
            w.add_key_value(key, value, vtype, sub_type=sub)
    w.add_tensor("f32.weight", rng.standard_normal((4, 8)).astype(np.float32))
    w.add_tensor("f16.weight", rng.standard_normal((3, 16)).astype(np.float16))
    add_quantised(w, "bf16.weight", rng.standard_normal((2, 32)).astype(np.float32), T.BF16)
    add_quantised(w, "q8_0.weight", rng.standard_normal((4, 64)).astype(np.float32), T.Q8_0)
    # gguf-py cannot quantise the k-quants: random blocks with small positive f16 scales.
    w.add_tensor("q4_k.weight", random_q4_k(rng, 3 * 2).reshape(3, 2 * 144), raw_dtype=T.Q4_K)
    w.add_tensor("q6_k.weight", random_q6_k(rng, 3).reshape(3, 210), raw_dtype=T.Q6_K)
    add_quantised(w, "mxfp4.weight", rng.standard_normal((4, 64)).astype(np.float32), T.MXFP4)
    w.add_tensor("q5_k.weight", random_q5_k(rng, 2).reshape(2, 176), raw_dtype=T.Q5_K)  # no sluice kernel
    w.add_tensor("norm.weight", rng.standard_normal(16).astype(np.float32))
    w.add_tensor("cube.weight", rng.standard_normal((2, 3, 4)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_aligned(path, rng):
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_key_value("general.name", "aligned 64", V.STRING)
    w.add_tensor("a.weight", rng.standard_normal((1, 5)).astype(np.float32))  # 20 bytes: the next needs padding
    add_quantised(w, "b.weight", rng.standard_normal((2, 32)).astype(np.float32), T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path, metadata):
    """What gguf-py's GGUFReader reads back, plus the dequantised first rows."""
    r = gguf.GGUFReader(path)
    out = {"metadata": [], "tensors": [], "alignment": int(r.alignment), "data_offset": int(r.data_offset)}
    for key, vtype, value, sub in metadata:
        field = r.fields[key]
        assert field.types[0] == vtype, (key, field.types)
        if vtype != V.ARRAY or sub != V.ARRAY:  # GGUFReader flattens nested arrays; check the rest against it
            got = field.contents()
            want = expected_value(vtype, value, sub)
            want = want["items"] if isinstance(want, dict) else want
            assert got == want, (key, got, want)
        out["metadata"].append({"key": key, "type": vtype.name, "value": expected_value(vtype, value, sub)})
    for t in r.tensors:
        ne = [int(x) for x in t.shape]  # ggml order
        rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(rows, ne[0])
        out["tensors"].append({
            "name": t.name, "ne": ne, "type": int(t.tensor_type), "type_name": t.tensor_type.name,
            "offset": int(t.data_offset) - int(r.data_offset), "file_offset": int(t.data_offset),
            "nbytes": int(t.n_bytes), "rows": [[float(x) for x in row] for row in deq[:ROWS_KEPT].astype(np.float32)],
        })
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf"
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20260511)
    basic, aligned = os.path.join(out_dir, "basic.gguf"), os.path.join(out_dir, "aligned64.gguf")
    write_basic(basic, rng)
    write_aligned(aligned, rng)
    expected = {
        "made_by": "tools/reference/make_gguf_fixtures.py with gguf " + version("gguf"),
        "basic.gguf": describe(basic, METADATA),
        "aligned64.gguf": describe(aligned, [METADATA[0], ("general.alignment", V.UINT32, 64, None),
                                             ("general.name", V.STRING, "aligned 64", None)]),
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
