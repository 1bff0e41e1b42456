#!/usr/bin/env python3
"""Write an F16 GGUF of random weights in the exact shape of a real Llama model, for llama.cpp and
perfx to benchmark at real sizes without a download. python3 standard library only.

  python3 bench/compare/random_gguf.py tinyllama-1.1b /tmp/tinyllama-f16.gguf
  python3 bench/compare/random_gguf.py llama-2-7b /tmp/llama-2-7b-f16.gguf

Shapes (as src/model/synthetic.h): tinyllama-1.1b (hidden 2048, FFN 5632, 22 layers, 32 heads / 4 KV
heads), llama-2-7b (4096, 11008, 32, 32 / 32); vocab 32000, context 2048 / 4096.
Weights: fp16 uniform in [-a, a] with a = 1.7 / sqrt(in) (|W·x| stays near |x|), the bytes of each
tensor tiling one 16 MiB random pool per input width (every byte is still read by a benchmark);
norms F32 ones. Tokenizer: the byte-level BPE of models/default (4096 tokens) padded with unused
tokens to 32000 (benchmarks feed token ids; the vocabulary only has to load).
Then quantize with llama.cpp: `llama-quantize IN.gguf OUT-q4_0.gguf Q4_0` (its default keeps
output.weight Q6_K), or with `--pure` for a file whose every matrix is Q4_0.
`--type q4_0` writes every matrix as Q4_0 blocks directly (random nibbles, scale a / 8), what
`llama-quantize --pure` gives, in a quarter of the bytes and time (for the GPU host's time limit).
"""
import argparse
import math
import os
import random
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import hf_to_gguf as h  # noqa: E402  (the GGUF writer helpers and the tokenizer converter)

SHAPES = {
    "tinyllama-1.1b": dict(vocab=32000, hidden=2048, ffn=5632, layers=22, heads=32, kv=4, ctx=2048),
    "llama-2-7b": dict(vocab=32000, hidden=4096, ffn=11008, layers=32, heads=32, kv=32, ctx=4096),
}
POOL = 16 << 20


GGML_Q4_0 = 2


def pool(amp, rng):
    n = POOL // 2
    vals = [rng.uniform(-amp, amp) for _ in range(n)]
    return struct.pack("<%de" % n, *vals)


def q4_0_pool(amp, rng):
    """Whole Q4_0 blocks (fp16 d, 16 bytes of nibbles) of values in [-amp, amp]."""
    n = POOL // 18
    d = struct.pack("<e", amp / 8)
    nib = rng.randbytes(16 * n)
    return b"".join(d + nib[16 * i:16 * i + 16] for i in range(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f16", "q4_0"], default="f16", help="type of the matrices")
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "..", "models", "default"),
                    help="HF folder whose tokenizer.json is used (default: models/default)")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    H, I, L, nh, nkv, V = s["hidden"], s["ffn"], s["layers"], s["heads"], s["kv"], s["vocab"]
    hd = H // nh
    kv = h.KV()
    kv.str("general.architecture", "llama")
    kv.str("general.name", "random-" + args.shape)
    kv.u32("general.alignment", h.ALIGNMENT)
    q4 = args.type == "q4_0"
    kv.u32("general.file_type", 2 if q4 else 1)  # MOSTLY_Q4_0 / MOSTLY_F16
    kv.u32("llama.context_length", s["ctx"])
    kv.u32("llama.embedding_length", H)
    kv.u32("llama.block_count", L)
    kv.u32("llama.feed_forward_length", I)
    kv.u32("llama.attention.head_count", nh)
    kv.u32("llama.attention.head_count_kv", nkv)
    kv.f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    kv.f32("llama.rope.freq_base", 10000.0)
    kv.u32("llama.rope.dimension_count", hd)
    h.tokenizer_kv(kv, args.tokenizer, {"vocab_size": V, "bos_token_id": 1, "eos_token_id": 2})
    kv.u32("llama.vocab_size", V)

    plan = [("token_embd.weight", [V, H])]
    for i in range(L):
        p = "blk.%d." % i
        plan += [(p + "attn_norm.weight", [H]), (p + "attn_q.weight", [H, H]),
                 (p + "attn_k.weight", [nkv * hd, H]), (p + "attn_v.weight", [nkv * hd, H]),
                 (p + "attn_output.weight", [H, H]), (p + "ffn_norm.weight", [H]),
                 (p + "ffn_gate.weight", [I, H]), (p + "ffn_up.weight", [I, H]),
                 (p + "ffn_down.weight", [H, I])]
    plan += [("output_norm.weight", [H]), ("output.weight", [V, H])]

    infos, off = [], 0
    for name, shape in plan:
        gtype = (GGML_Q4_0 if q4 else h.GGML_F16) if len(shape) == 2 else h.GGML_F32
        nbytes = math.prod(shape) * {h.GGML_F16: 2, h.GGML_F32: 4}[gtype] if gtype != GGML_Q4_0 \
            else math.prod(shape) // 32 * 18
        infos.append((name, shape, gtype, off, nbytes))
        off = h.align(off + nbytes)
    header = struct.pack("<IIQQ", h.GGUF_MAGIC, h.GGUF_VERSION, len(infos), len(kv.items))
    header += b"".join(kv.items)
    for name, shape, gtype, o, _ in infos:
        ne = list(reversed(shape))
        header += h.gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        header += struct.pack("<IQ", gtype, o)
    header += b"\0" * (h.align(len(header)) - len(header))

    rng = random.Random(1234)
    pools = {}
    ones = struct.pack("<f", 1.0) * max(H, I)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        start = f.tell()
        for name, shape, gtype, o, nbytes in infos:
            assert f.tell() - start == o
            if gtype == h.GGML_F32:
                f.write(ones[:nbytes])
            else:
                amp = 0.05 if name in ("token_embd.weight", "output.weight") else 1.7 / math.sqrt(shape[1])
                key = round(amp, 9)
                if key not in pools:
                    pools[key] = q4_0_pool(amp, rng) if q4 else pool(amp, rng)
                pb = pools[key]
                left = nbytes
                while left > 0:
                    n = min(left, len(pb))
                    f.write(pb[:n])
                    left -= n
            f.write(b"\0" * (h.align(nbytes) - nbytes))
    os.replace(tmp, args.out)
    print("random_gguf: wrote %s (%s %s, %.2f GiB)"
          % (args.out, args.shape, args.type, os.path.getsize(args.out) / 2**30))


if __name__ == "__main__":
    main()
