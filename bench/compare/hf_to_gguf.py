#!/usr/bin/env python3
"""Convert a Hugging Face LlamaForCausalLM checkpoint folder to a GGUF v3 file that llama.cpp loads.

python3 standard library only (json, struct, array): no numpy, no torch.

  python3 bench/compare/hf_to_gguf.py models/default /work/peer/default-f32.gguf --outtype f32
  python3 bench/compare/hf_to_gguf.py models/default /work/peer/default-f16.gguf --outtype f16

What it writes (see shared docs/FORMATS.md section 4):
  * general.architecture "llama" and the llama.* hyper-parameters from config.json;
  * 2-D weights as F32 or F16 (converted from BF16/F16/F32 safetensors), 1-D norm weights always F32
    (as llama.cpp's own converter does);
  * q_proj / k_proj rows permuted from the HF half-split RoPE layout to llama.cpp's interleaved
    (rope type NORM) layout: inside each head HF row j*d/2 + i goes to GGUF row 2i + j;
  * tokenizer: byte-level BPE tokenizer.json -> tokenizer.ggml.model "gpt2" with tokens, token_type,
    merges, bos/eos ids and add_bos/add_eos; tokenizer.ggml.pre "gpt-2", which in llama.cpp selects
    exactly the GPT-2 split regex that tokenizers' ByteLevel(use_regex=true) uses;
  * output.weight omitted when tie_word_embeddings is true (llama.cpp then reuses token_embd).
Assumes a little-endian host (x86-64, aarch64).
"""
import argparse
import array
import json
import os
import struct
import sys

GGUF_MAGIC = 0x46554747
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1
# llama.cpp token types
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6


def die(msg):
    print("hf_to_gguf: error: " + msg, file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------------------------------------
# safetensors
class SafeTensors:
    def __init__(self, folder):
        self.index = {}  # name -> (path, dtype, shape, begin, end)
        idx = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        for fn in files:
            path = os.path.join(folder, fn)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                b, e = info["data_offsets"]
                self.index[name] = (path, info["dtype"], list(info["shape"]), base + b, base + e)

    def names(self):
        return list(self.index.keys())

    def shape(self, name):
        return self.index[name][2]

    def read_f32(self, name):
        """Returns array('f') with the tensor's values in row-major order."""
        path, dtype, shape, b, e = self.index[name]
        with open(path, "rb") as f:
            f.seek(b)
            raw = f.read(e - b)
        if dtype == "F32":
            out = array.array("f")
            out.frombytes(raw)
        elif dtype == "BF16":
            h = array.array("H")
            h.frombytes(raw)
            u = array.array("I", [x << 16 for x in h])  # bf16 is the top half of an f32
            out = array.array("f")
            out.frombytes(u.tobytes())
        elif dtype == "F16":
            n = (e - b) // 2
            out = array.array("f", struct.unpack("<%de" % n, raw))
        else:
            die("tensor %s has unsupported dtype %s" % (name, dtype))
        if sys.byteorder != "little":
            die("big-endian hosts are not supported")
        return out


# ----------------------------------------------------------------------------------------------------------
# GGUF writer
def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class KV:
    def __init__(self):
        self.items = []  # bytes per key/value

    def _add(self, key, vtype, payload):
        self.items.append(gguf_str(key) + struct.pack("<I", vtype) + payload)

    def u32(self, k, v):
        self._add(k, T_U32, struct.pack("<I", v))

    def i32(self, k, v):
        self._add(k, T_I32, struct.pack("<i", v))

    def f32(self, k, v):
        self._add(k, T_F32, struct.pack("<f", v))

    def bool(self, k, v):
        self._add(k, T_BOOL, struct.pack("<B", 1 if v else 0))

    def str(self, k, v):
        self._add(k, T_STRING, gguf_str(v))

    def arr_str(self, k, vs):
        self._add(k, T_ARRAY, struct.pack("<IQ", T_STRING, len(vs)) + b"".join(gguf_str(v) for v in vs))

    def arr_i32(self, k, vs):
        self._add(k, T_ARRAY, struct.pack("<IQ", T_I32, len(vs)) + array.array("i", vs).tobytes())

    def arr_f32(self, k, vs):
        self._add(k, T_ARRAY, struct.pack("<IQ", T_F32, len(vs)) + array.array("f", vs).tobytes())


def align(x, a=ALIGNMENT):
    return x + (a - x % a) % a


def to_bytes(vals, gtype, name):
    if gtype == GGML_F32:
        return vals.tobytes()
    try:
        return struct.pack("<%de" % len(vals), *vals)  # round-to-nearest-even, like numpy astype(float16)
    except (OverflowError, struct.error):
        die("tensor %s has a value outside the f16 range; use --outtype f32" % name)


def permute_rows(vals, rows, cols, n_head):
    """llama.cpp's LlamaModel.permute: reshape (n_head, 2, d/2, cols) -> swap axes 1,2 -> (rows, cols)."""
    d = rows // n_head
    half = d // 2
    out = array.array("f", bytes(4 * rows * cols))
    for h in range(n_head):
        for j in range(2):
            for i in range(half):
                src = (h * d + j * half + i) * cols
                dst = (h * d + 2 * i + j) * cols
                out[dst:dst + cols] = vals[src:src + cols]
    return out


# ----------------------------------------------------------------------------------------------------------
def tokenizer_kv(kv, folder, cfg):
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tcfg = {}
    p = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            tcfg = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        die("only BPE tokenizer.json is supported (got %s)" % model.get("type"))
    pre = tj.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if not (len(pres) == 1 and pres[0].get("type") == "ByteLevel" and pres[0].get("use_regex", True)
            and not pres[0].get("add_prefix_space", False)):
        die("only a plain ByteLevel(use_regex=true, add_prefix_space=false) pre-tokenizer is supported; got %s"
            % json.dumps(pre))
    if tj.get("normalizer") is not None:
        die("a tokenizer.json normalizer is not supported")

    vocab = model["vocab"]
    added = {t["id"]: t for t in tj.get("added_tokens", [])}
    n_vocab = int(cfg.get("vocab_size", max(list(vocab.values()) + list(added.keys())) + 1))
    tokens = [None] * n_vocab
    types = [TOK_NORMAL] * n_vocab
    for tok, i in vocab.items():
        if i < n_vocab:
            tokens[i] = tok
    for i, t in added.items():
        if i < n_vocab:
            tokens[i] = t["content"]
            types[i] = TOK_CONTROL if t.get("special") else TOK_USER_DEFINED
    for i in range(n_vocab):
        if tokens[i] is None:  # padding rows of the embedding, as llama.cpp's converter does
            tokens[i] = "[PAD%d]" % i
            types[i] = TOK_UNUSED
    merges = []
    for m in model.get("merges", []):
        if isinstance(m, list):
            if any(" " in x for x in m):
                die("merge %r contains a space; cannot be written as 'a b'" % (m,))
            merges.append(" ".join(m))
        else:
            merges.append(m)

    def tok_id(v):
        if v is None:
            return None
        if isinstance(v, dict):
            v = v.get("content")
        if v in vocab:
            return vocab[v]
        for i, t in added.items():
            if t["content"] == v:
                return i
        return None

    bos = cfg.get("bos_token_id")
    eos = cfg.get("eos_token_id")
    if bos is None:
        bos = tok_id(tcfg.get("bos_token"))
    if eos is None:
        eos = tok_id(tcfg.get("eos_token"))
    if isinstance(eos, list):
        eos = eos[0]

    kv.str("tokenizer.ggml.model", "gpt2")
    kv.str("tokenizer.ggml.pre", "gpt-2")
    kv.arr_str("tokenizer.ggml.tokens", tokens)
    kv.arr_i32("tokenizer.ggml.token_type", types)
    kv.arr_str("tokenizer.ggml.merges", merges)
    if bos is not None:
        kv.u32("tokenizer.ggml.bos_token_id", int(bos))
    if eos is not None:
        kv.u32("tokenizer.ggml.eos_token_id", int(eos))
    pad = cfg.get("pad_token_id")
    if pad is not None:
        kv.u32("tokenizer.ggml.padding_token_id", int(pad))
    # tokenizers' post-processor decides BOS; tokenizer_config.json mirrors it in add_bos_token
    add_bos = tcfg.get("add_bos_token")
    if add_bos is None:
        pp = json.dumps(tj.get("post_processor") or {})
        add_bos = bos is not None and "SpecialToken" in pp
    kv.bool("tokenizer.ggml.add_bos_token", bool(add_bos))
    kv.bool("tokenizer.ggml.add_eos_token", bool(tcfg.get("add_eos_token", False)))
    if "chat_template" in tcfg and isinstance(tcfg["chat_template"], str):
        kv.str("tokenizer.chat_template", tcfg["chat_template"])
    return n_vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="HF checkpoint folder (config.json, *.safetensors, tokenizer.json)")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f32",
                    help="type of the 2-D weights (norms stay f32)")
    ap.add_argument("--name", default=None, help="general.name (default: folder name)")
    args = ap.parse_args()

    folder = args.model_dir
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    archs = cfg.get("architectures") or []
    if "LlamaForCausalLM" not in archs and cfg.get("model_type") != "llama":
        die("only LlamaForCausalLM is supported (got %s)" % archs)

    hidden = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or hidden // n_head
    n_layer = cfg["num_hidden_layers"]
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope_theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        die("rope_type %s is not supported by this converter" % rope_type)
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        die("attention/mlp biases are not supported")
    tied = bool(cfg.get("tie_word_embeddings", False))
    wtype = GGML_F32 if args.outtype == "f32" else GGML_F16

    kv = KV()
    kv.str("general.architecture", "llama")
    kv.str("general.name", args.name or os.path.basename(os.path.normpath(folder)))
    kv.u32("general.alignment", ALIGNMENT)
    kv.u32("general.file_type", 0 if wtype == GGML_F32 else 1)  # LLAMA_FTYPE_ALL_F32 / MOSTLY_F16
    kv.u32("llama.context_length", int(cfg.get("max_position_embeddings", 2048)))
    kv.u32("llama.embedding_length", hidden)
    kv.u32("llama.block_count", n_layer)
    kv.u32("llama.feed_forward_length", cfg["intermediate_size"])
    kv.u32("llama.attention.head_count", n_head)
    kv.u32("llama.attention.head_count_kv", n_kv)
    kv.f32("llama.attention.layer_norm_rms_epsilon", float(cfg.get("rms_norm_eps", 1e-5)))
    kv.f32("llama.rope.freq_base", float(rope_theta))
    kv.u32("llama.rope.dimension_count", head_dim)
    if head_dim != hidden // n_head:
        kv.u32("llama.attention.key_length", head_dim)
        kv.u32("llama.attention.value_length", head_dim)
    n_vocab = tokenizer_kv(kv, folder, cfg)
    kv.u32("llama.vocab_size", n_vocab)

    st = SafeTensors(folder)
    names = set(st.names())
    plan = [("model.embed_tokens.weight", "token_embd.weight", None)]
    for i in range(n_layer):
        p = "model.layers.%d." % i
        plan += [
            (p + "input_layernorm.weight", "blk.%d.attn_norm.weight" % i, None),
            (p + "self_attn.q_proj.weight", "blk.%d.attn_q.weight" % i, n_head),
            (p + "self_attn.k_proj.weight", "blk.%d.attn_k.weight" % i, n_kv),
            (p + "self_attn.v_proj.weight", "blk.%d.attn_v.weight" % i, None),
            (p + "self_attn.o_proj.weight", "blk.%d.attn_output.weight" % i, None),
            (p + "post_attention_layernorm.weight", "blk.%d.ffn_norm.weight" % i, None),
            (p + "mlp.gate_proj.weight", "blk.%d.ffn_gate.weight" % i, None),
            (p + "mlp.up_proj.weight", "blk.%d.ffn_up.weight" % i, None),
            (p + "mlp.down_proj.weight", "blk.%d.ffn_down.weight" % i, None),
        ]
    plan.append(("model.norm.weight", "output_norm.weight", None))
    if not tied:
        if "lm_head.weight" not in names:
            die("tie_word_embeddings is false but lm_head.weight is missing")
        plan.append(("lm_head.weight", "output.weight", None))
    missing = [hf for hf, _, _ in plan if hf not in names]
    if missing:
        die("missing tensors: %s" % missing[:5])
    unused = sorted(names - {hf for hf, _, _ in plan} - {"lm_head.weight"})
    if unused:
        print("hf_to_gguf: warning: ignoring tensors %s" % unused[:5], file=sys.stderr)

    # Tensor infos need sizes first: compute types and shapes, then stream data.
    infos = []
    offset = 0
    for hf, gg, perm in plan:
        shape = st.shape(hf)
        gtype = wtype if len(shape) == 2 else GGML_F32
        nel = 1
        for d in shape:
            nel *= d
        nbytes = nel * (4 if gtype == GGML_F32 else 2)
        infos.append((hf, gg, perm, shape, gtype, offset, nbytes))
        offset = align(offset + nbytes)

    header = struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(infos), len(kv.items)) + b"".join(kv.items)
    for hf, gg, perm, shape, gtype, off, nbytes in infos:
        ne = list(reversed(shape))
        header += gguf_str(gg) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        header += struct.pack("<IQ", gtype, off)
    header += b"\0" * (align(len(header)) - len(header))

    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        data_start = f.tell()
        for hf, gg, perm, shape, gtype, off, nbytes in infos:
            vals = st.read_f32(hf)
            if perm is not None:
                rows, cols = shape
                if rows != perm * head_dim:
                    die("%s has %d rows, expected %d*%d" % (hf, rows, perm, head_dim))
                vals = permute_rows(vals, rows, cols, perm)
            b = to_bytes(vals, gtype, hf)
            assert len(b) == nbytes and f.tell() - data_start == off
            f.write(b)
            f.write(b"\0" * (align(len(b)) - len(b)))
    os.replace(tmp, args.out)
    total = sum(i[6] for i in infos)
    print("hf_to_gguf: wrote %s: %d tensors, %d metadata keys, %.2f MiB of tensor data (%s weights)"
          % (args.out, len(infos), len(kv.items), total / 2**20, args.outtype))


if __name__ == "__main__":
    main()
