#!/usr/bin/env python3
"""Write tests/fixtures/gguf/tiny-llama.gguf with the reference writer (the `gguf` package,
`pip install gguf==0.19.0`), so that Joule's own GGUF reader is checked against an
independent implementation. The file is a few KB: metadata of every value type, and
tensors of types F32, F16, Q8_0, Q4_1 and Q4_K with known shapes.

Run from the repository root: python3 scripts/make_gguf_fixture.py
"""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

out = "tests/fixtures/gguf/tiny-llama.gguf"
w = gguf.GGUFWriter(out, "llama")
w.add_name("tiny fixture")
w.add_uint32("llama.context_length", 256)
w.add_uint8("test.u8", 200)
w.add_int8("test.i8", -100)
w.add_uint16("test.u16", 60000)
w.add_int16("test.i16", -30000)
w.add_int32("test.i32", -2000000000)
w.add_float32("test.f32", 0.5)
w.add_bool("test.bool", True)
w.add_uint64("test.u64", 2**40 + 3)
w.add_int64("test.i64", -(2**40) - 3)
w.add_float64("test.f64", 0.125)
w.add_string("test.string", "héllo")
w.add_array("test.small_array", [1, 2, 3])
w.add_array("test.big_array", [f"tok{i}" for i in range(100)])

rng = np.random.default_rng(0)
w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))  # ggml dims [5, 3]
w.add_tensor("f16", rng.standard_normal((2, 8)).astype(np.float16))  # ggml dims [8, 2]
# Quantised tensors are written raw: byte arrays of (rows, blocks * block_bytes).
w.add_tensor("q8_0", rng.integers(0, 255, (2, 2 * 34), dtype=np.uint8), raw_dtype=Q.Q8_0)  # [64, 2]
w.add_tensor("q4_1", rng.integers(0, 255, (1, 20), dtype=np.uint8), raw_dtype=Q.Q4_1)  # [32, 1]
w.add_tensor("q4_k", rng.integers(0, 255, (3, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)  # [256, 3]

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# Print what the reference reader sees, for the Rust test's expectations.
r = gguf.GGUFReader(out)
print("tensors", len(r.tensors), "kv", len(r.fields))
for t in r.tensors:
    print(t.name, t.tensor_type.name, list(t.shape), t.n_elements, t.n_bytes, t.data_offset)
import os
print("size", os.path.getsize(out))
