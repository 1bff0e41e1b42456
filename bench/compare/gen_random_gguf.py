#!/usr/bin/env python3
"""Write a GGUF v3 file with random weights in the exact shape of TinyLlama-1.1B or Llama-2-7B.

python3 standard library only (no numpy); writes ~1-3 GB/s (page cache), so a 7B Q4_0 file takes seconds.

  python3 bench/compare/gen_random_gguf.py --shape llama-2-7b --type q4_0 \
      --vocab /work/shared/tokenizers/llama2/ggml-vocab-llama-spm.gguf -o /tmp/llama-2-7b-q4_0.gguf

The same file is meant to run in llama.cpp and in perfx (issue 9: "the same Q4_0 GGUF in both engines"):
  * general.architecture "llama" with the llama.* hyper-parameters of the shape (SHAPES below);
  * --type q4_0: EVERY 2-D weight is Q4_0, token_embd.weight and output.weight included (what
    `llama-quantize --pure ... Q4_0` writes; plain llama-quantize would make output.weight Q6_K, which
    perfx does not read). --output-type f16 writes output.weight as F16 instead;
  * --type f16: every 2-D weight F16 (what convert_hf_to_gguf.py --outtype f16 writes);
  * 1-D norm weights are F32 ones (as llama.cpp's converter keeps norms in F32);
  * the tokenizer.ggml.* keys are copied verbatim from --vocab (llama.cpp's vocab-only
    ggml-vocab-llama-spm.gguf: SentencePiece "llama" model, 32000 tokens);
  * weights: a small random pool (a prime number of blocks, so rows do not repeat in step) tiled over every
    tensor. Q4_0 blocks have a valid, finite fp16 scale d ~ 1.7/(8*sqrt(in)) * (1 +- 25%) and random nibbles,
    so W.x keeps the scale of x; F16 values are uniform in +-1.7/sqrt(in). Embeddings use amplitude 0.05.
Same random seed -> the same bytes. Assumes a little-endian host.
"""
import argparse
import os
import random
import struct
import sys
import time

GGUF_MAGIC = 0x46554747
ALIGN = 32
T_U32, T_F32, T_STRING, T_ARRAY = 4, 6, 8, 9
GGML_F32, GGML_F16, GGML_Q4_0 = 0, 1, 2
FTYPE = {"f16": 1, "q4_0": 2}  # llama_ftype: MOSTLY_F16, MOSTLY_Q4_0

# name: (vocab, hidden, intermediate, layers, heads, kv_heads, context)
SHAPES = {
    "tinyllama-1.1b": (32000, 2048, 5632, 22, 32, 4, 2048),
    "llama-2-7b": (32000, 4096, 11008, 32, 32, 32, 4096),
}


def die(msg):
    print("gen_random_gguf: error: " + msg, file=sys.stderr)
    sys.exit(1)


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


# ---------------------------------------------------------------------------------------------------
# Reading the tokenizer keys of a GGUF (raw bytes of each key/value pair, copied as they are)
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(buf, pos, vtype):
    if vtype in _SCALAR:
        return pos + _SCALAR[vtype]
    if vtype == T_STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == T_ARRAY:
        et, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if et in _SCALAR:
            return pos + n * _SCALAR[et]
        for _ in range(n):
            pos = _skip_value(buf, pos, et)
        return pos
    raise ValueError("unknown GGUF value type %d" % vtype)


def read_kvs(path):
    """Returns [(key, raw bytes of key+type+value)] of a GGUF file's metadata."""
    with open(path, "rb") as f:
        buf = f.read()
    magic, version, n_t, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    if magic != GGUF_MAGIC or version not in (2, 3):
        die("%s is not a GGUF v2/v3 file" % path)
    pos, out = 24, []
    for _ in range(n_kv):
        start = pos
        (kl,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + kl].decode("utf-8")
        pos += 8 + kl
        (vt,) = struct.unpack_from("<I", buf, pos)
        pos = _skip_value(buf, pos + 4, vt)
        out.append((key, buf[start:pos]))
    return out


# ---------------------------------------------------------------------------------------------------
# Random pools (whole blocks / values; a prime count so tiles do not line up with rows)
Q4_POOL_BLOCKS = 65521  # 18 B each: ~1.2 MB
F16_POOL_VALUES = 524287  # 2 B each: ~1 MB


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def q4_0_pool(rng, d):
    """Q4_0 blocks: fp16 scale d*(1 +- 25%), then 16 bytes of random nibbles (value = d*(q-8))."""
    nib = rng.getrandbits(8 * 16 * Q4_POOL_BLOCKS).to_bytes(16 * Q4_POOL_BLOCKS, "little")
    scales = struct.pack("<%de" % Q4_POOL_BLOCKS, *[d * (1.0 + 0.25 * (2 * rng.random() - 1))
                                                     for _ in range(Q4_POOL_BLOCKS)])
    out = bytearray(18 * Q4_POOL_BLOCKS)
    for i in range(Q4_POOL_BLOCKS):
        out[18 * i:18 * i + 2] = scales[2 * i:2 * i + 2]
        out[18 * i + 2:18 * i + 18] = nib[16 * i:16 * i + 16]
    return bytes(out)


def f16_pool(rng, amp):
    return struct.pack("<%de" % F16_POOL_VALUES, *[amp * (2 * rng.random() - 1) for _ in range(F16_POOL_VALUES)])


def tensor_bytes(gtype, ne):
    n = 1
    for x in ne:
        n *= x
    if gtype == GGML_F32:
        return 4 * n
    if gtype == GGML_F16:
        return 2 * n
    if ne[0] % 32:
        die("Q4_0 needs a row length that is a multiple of 32 (got %d)" % ne[0])
    return n // 32 * 18


def write_tiled(f, pool, nbytes, chunk_cache):
    """Writes nbytes of pool repeated; uses a ~32 MB buffer of whole pools for few, large writes."""
    big = chunk_cache.get(id(pool))
    if big is None:
        big = pool * max(1, (32 << 20) // len(pool))
        chunk_cache[id(pool)] = big
    mv = memoryview(big)
    left = nbytes
    while left > 0:
        n = min(left, len(big))
        f.write(mv[:n])
        left -= n


# ---------------------------------------------------------------------------------------------------
def build(args):
    vocab, hidden, inter, layers, heads, kv_heads, ctx = SHAPES[args.shape]
    if args.layers:
        layers = args.layers
    head_dim = hidden // heads
    kvd = kv_heads * head_dim

    tok_kvs = [(k, raw) for k, raw in read_kvs(args.vocab) if k.startswith("tokenizer.")]
    keys = {k for k, _ in tok_kvs}
    for need in ("tokenizer.ggml.model", "tokenizer.ggml.tokens"):
        if need not in keys:
            die("%s has no %s" % (args.vocab, need))

    kv = []

    def add(key, vtype, payload):
        kv.append(gstr(key) + struct.pack("<I", vtype) + payload)

    add("general.architecture", T_STRING, gstr("llama"))
    add("general.name", T_STRING, gstr("random %s %s" % (args.shape, args.type)))
    add("general.file_type", T_U32, struct.pack("<I", FTYPE[args.type]))
    add("general.quantization_version", T_U32, struct.pack("<I", 2))
    add("general.alignment", T_U32, struct.pack("<I", ALIGN))
    add("llama.vocab_size", T_U32, struct.pack("<I", vocab))
    add("llama.context_length", T_U32, struct.pack("<I", ctx))
    add("llama.embedding_length", T_U32, struct.pack("<I", hidden))
    add("llama.block_count", T_U32, struct.pack("<I", layers))
    add("llama.feed_forward_length", T_U32, struct.pack("<I", inter))
    add("llama.rope.dimension_count", T_U32, struct.pack("<I", head_dim))
    add("llama.attention.head_count", T_U32, struct.pack("<I", heads))
    add("llama.attention.head_count_kv", T_U32, struct.pack("<I", kv_heads))
    add("llama.attention.layer_norm_rms_epsilon", T_F32, struct.pack("<f", 1e-5))
    add("llama.rope.freq_base", T_F32, struct.pack("<f", 10000.0))
    kv += [raw for _, raw in tok_kvs]

    wtype = GGML_Q4_0 if args.type == "q4_0" else GGML_F16
    otype = {"q4_0": GGML_Q4_0, "f16": GGML_F16}[args.output_type or args.type]
    rng = random.Random(args.seed)
    pools = {}

    def pool(gtype, amp):
        key = (gtype, amp)
        if key not in pools:
            if gtype == GGML_Q4_0:
                pools[key] = q4_0_pool(rng, amp / 8.0)
            elif gtype == GGML_F16:
                pools[key] = f16_pool(rng, amp)
            else:
                pools[key] = struct.pack("<f", 1.0) * 4096  # norm weights: ones
        return pools[key]

    # (name, gguf ne (innermost first), ggml type, pool)
    tensors = []
    lin = lambda n_in: 1.7 / n_in ** 0.5  # noqa: E731
    tensors.append(("token_embd.weight", [hidden, vocab], wtype, (wtype, 0.05)))
    for i in range(layers):
        p = "blk.%d." % i
        tensors += [
            (p + "attn_norm.weight", [hidden], GGML_F32, (GGML_F32, 1.0)),
            (p + "attn_q.weight", [hidden, hidden], wtype, (wtype, lin(hidden))),
            (p + "attn_k.weight", [hidden, kvd], wtype, (wtype, lin(hidden))),
            (p + "attn_v.weight", [hidden, kvd], wtype, (wtype, lin(hidden))),
            (p + "attn_output.weight", [hidden, hidden], wtype, (wtype, lin(hidden))),
            (p + "ffn_norm.weight", [hidden], GGML_F32, (GGML_F32, 1.0)),
            (p + "ffn_gate.weight", [hidden, inter], wtype, (wtype, lin(hidden))),
            (p + "ffn_up.weight", [hidden, inter], wtype, (wtype, lin(hidden))),
            (p + "ffn_down.weight", [inter, hidden], wtype, (wtype, lin(inter))),
        ]
    tensors.append(("output_norm.weight", [hidden], GGML_F32, (GGML_F32, 1.0)))
    tensors.append(("output.weight", [hidden, vocab], otype, (otype, lin(hidden))))

    infos, off = [], 0
    for name, ne, gt, _ in tensors:
        infos.append(gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) +
                     struct.pack("<IQ", gt, off))
        off += tensor_bytes(gt, ne)
        off += (ALIGN - off % ALIGN) % ALIGN
    total_data = off

    head = struct.pack("<IIQQ", GGUF_MAGIC, 3, len(tensors), len(kv)) + b"".join(kv) + b"".join(infos)
    head += b"\0" * ((ALIGN - len(head) % ALIGN) % ALIGN)

    tmp = args.output + ".tmp"
    cache = {}
    with open(tmp, "wb", buffering=0) as f:
        f.write(head)
        for name, ne, gt, pk in tensors:
            nb = tensor_bytes(gt, ne)
            write_tiled(f, pool(*pk), nb, cache)
            pad = (ALIGN - nb % ALIGN) % ALIGN
            if pad:
                f.write(b"\0" * pad)
    os.replace(tmp, args.output)
    return len(tensors), len(head) + total_data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--type", default="q4_0", choices=["q4_0", "f16"], help="2-D weights (default q4_0)")
    ap.add_argument("--output-type", choices=["q4_0", "f16"],
                    help="output.weight type (default: same as --type)")
    ap.add_argument("--vocab", required=True, help="GGUF to copy the tokenizer.* keys from "
                    "(e.g. ggml-vocab-llama-spm.gguf)")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count (tests only)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if sys.byteorder != "little":
        die("big-endian hosts are not supported")
    if not os.path.isfile(args.vocab):
        die("vocab GGUF not found: %s" % args.vocab)
    if args.layers < 0:
        die("--layers must be >= 0")
    t0 = time.time()
    n, size = build(args)
    dt = time.time() - t0
    print("wrote %s: %d tensors, %.3f GB in %.1f s (%.2f GB/s)" % (args.output, n, size / 1e9, dt,
                                                                   size / 1e9 / max(dt, 1e-9)))


if __name__ == "__main__":
    main()
