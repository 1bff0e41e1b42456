#!/usr/bin/env python3
"""Independent, dependency-free check of the reference fixtures (standard library only: no torch/numpy).

For every tests/fixtures/<name>/ it re-implements the decoder forward pass in float64 from config.json and
model.safetensors (Llama / Mistral / Qwen2 / Qwen3, RoPE default or llama3, AWQ GEMM / GEMV dequantized with
the FORMATS.md 2.3 / 2.4 rules) and compares with reference_logits.safetensors. For AWQ it also checks that
the GEMM and GEMV files hold the same integers, zeros and scales.

With --default N it also checks models/default: BPE-encodes the prompts of reference_greedy.json with
tokenizer.json (ASCII-only re-implementation of the byte-level BPE) and recomputes the first N greedy tokens
from the bf16 checkpoint (slow in pure Python: ~10 s per token).

Usage: python3 tools/reference/check_fixtures.py [--fixtures tests/fixtures] [--default 0]
"""
import argparse
import json
import math
import os
import re
import struct
import sys
import time


# ------------------------------------------------------------------------------------------- safetensors


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (a, b) = info["dtype"], info["shape"], info["data_offsets"]
        raw = data[base + a: base + b]
        cnt = 1
        for s in shape:
            cnt *= s
        if dt == "F32":
            vals = list(struct.unpack(f"<{cnt}f", raw))
        elif dt == "F16":
            vals = list(struct.unpack(f"<{cnt}e", raw))
        elif dt == "BF16":
            u16 = struct.unpack(f"<{cnt}H", raw)
            vals = list(struct.unpack(f"<{cnt}f", struct.pack(f"<{cnt}I", *[u << 16 for u in u16])))
        elif dt == "I32":
            vals = list(struct.unpack(f"<{cnt}i", raw))
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        assert len(raw) == cnt * {"F32": 4, "F16": 2, "BF16": 2, "I32": 4}[dt]
        out[name] = (dt, shape, vals)
    return out


def rows(t):
    """[R, C] flat -> list of rows."""
    _, shape, v = t
    R, C = shape
    return [v[r * C:(r + 1) * C] for r in range(R)]


# ------------------------------------------------------------------------------------------- AWQ


AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def nibbles(word, order):
    u = word & 0xFFFFFFFF
    return [(u >> (4 * order[r])) & 0xF for r in range(8)]


def dequant_gemm(qw, qz, sc, group):
    _, (I, O8), qv = qw
    _, (G, _), zv = qz
    _, (_, O), sv = sc
    assert O8 * 8 == O and G * group == I
    q = [[0] * O for _ in range(I)]
    for k in range(I):
        for c in range(O8):
            q[k][8 * c:8 * c + 8] = nibbles(qv[k * O8 + c], AWQ_REVERSE_ORDER)
    z = [[0] * O for _ in range(G)]
    for g in range(G):
        for c in range(O8):
            z[g][8 * c:8 * c + 8] = nibbles(zv[g * O8 + c], AWQ_REVERSE_ORDER)
    s = [sv[g * O:(g + 1) * O] for g in range(G)]
    # HF orientation W[n][k]
    W = [[(q[k][n] - z[k // group][n]) * s[k // group][n] for k in range(I)] for n in range(O)]
    ints = ([[q[k][n] for k in range(I)] for n in range(O)], [[z[g][n] for g in range(G)] for n in range(O)],
            [[s[g][n] for g in range(G)] for n in range(O)])
    return W, ints


def dequant_gemv(qw, qz, sc, group):
    _, (O, I8), qv = qw
    _, (_, ZW), zv = qz
    _, (_, SW), sv = sc
    I = I8 * 8
    G = I // group
    assert SW == ZW * 8 and ZW == (G + 7) // 8
    natural = list(range(8))
    q = [[0] * I for _ in range(O)]
    z = [[0] * (ZW * 8) for _ in range(O)]
    for n in range(O):
        for c in range(I8):
            q[n][8 * c:8 * c + 8] = nibbles(qv[n * I8 + c], natural)
        for j in range(ZW):
            z[n][8 * j:8 * j + 8] = nibbles(zv[n * ZW + j], natural)
    s = [sv[n * SW:(n + 1) * SW] for n in range(O)]
    for n in range(O):
        assert all(v == 0 for v in z[n][G:]) and all(v == 0.0 for v in s[n][G:]), "GEMV padding not zero"
    W = [[(q[n][k] - z[n][k // group]) * s[n][k // group] for k in range(I)] for n in range(O)]
    return W, (q, [zz[:G] for zz in z], [ss[:G] for ss in s])


# ------------------------------------------------------------------------------------------- model


def matvec(W, x):
    return [sum(map(float.__mul__, row, x)) for row in W]


def rmsnorm(x, w, eps):
    ms = sum(v * v for v in x) / len(x)
    r = 1.0 / math.sqrt(ms + eps)
    return [wi * (xi * r) for wi, xi in zip(w, x)]


def rope_inv_freq(cfg, head_dim):
    rp = cfg.get("rope_parameters") or {}
    rs = cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    rtype = rp.get("rope_type") or rs.get("rope_type") or rs.get("type") or "default"
    inv = [1.0 / (theta ** (2 * i / head_dim)) for i in range(head_dim // 2)]
    if rtype == "default":
        return inv
    if rtype == "llama3":
        p = rp if "factor" in rp else rs
        F, lo, hi, orig = p["factor"], p["low_freq_factor"], p["high_freq_factor"], p["original_max_position_embeddings"]
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < orig / hi:
                out.append(f)
            elif wl > orig / lo:
                out.append(f / F)
            else:
                sm = (orig / wl - lo) / (hi - lo)
                out.append((1 - sm) * f / F + sm * f)
        return out
    raise ValueError(f"rope type {rtype} not implemented here")


def apply_rope(v, pos, inv):
    h = len(inv)
    out = list(v)
    for i in range(h):
        a = pos * inv[i]
        c, s = math.cos(a), math.sin(a)
        x1, x2 = v[i], v[i + h]
        out[i] = x1 * c - x2 * s
        out[i + h] = x2 * c + x1 * s
    return out


class Model:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        self.t = read_safetensors(os.path.join(folder, "model.safetensors"))
        self.H = cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads") or self.H
        self.D = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        self.L = cfg["num_hidden_layers"]
        self.family = cfg["model_type"]
        self.inv = rope_inv_freq(cfg, self.D)
        qc = cfg.get("quantization_config")
        self.awq_ints = {}
        self.W = {}
        for l in range(self.L):
            for p in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]:
                name = f"model.layers.{l}.{p}"
                if name + ".weight" in self.t:
                    self.W[name] = rows(self.t[name + ".weight"])
                else:
                    assert qc and qc["quant_method"] == "awq" and qc["bits"] == 4 and qc["zero_point"]
                    ver = qc["version"].lower()
                    fn = dequant_gemm if ver == "gemm" else dequant_gemv
                    W, ints = fn(self.t[name + ".qweight"], self.t[name + ".qzeros"], self.t[name + ".scales"],
                                 qc["group_size"])
                    self.W[name] = W
                    self.awq_ints[name] = ints
        self.embed = rows(self.t["model.embed_tokens.weight"])
        if "lm_head.weight" in self.t:
            self.lm_head = rows(self.t["lm_head.weight"])
        else:
            assert cfg.get("tie_word_embeddings"), "no lm_head.weight and not tied"
            self.lm_head = self.embed

    def vec(self, name):
        return self.t[name][2] if name in self.t else None

    def forward(self, ids, cache=None):
        """Process ids (appended after the cache); returns logits for every new position."""
        if cache is None:
            cache = {"pos": 0, "k": [[] for _ in range(self.L)], "v": [[] for _ in range(self.L)]}
        H, KV, D = self.H, self.KV, self.D
        grp = H // KV
        xs = [list(self.embed[i]) for i in ids]
        for l in range(self.L):
            pre = f"model.layers.{l}."
            for t_i, x in enumerate(xs):
                pos = cache["pos"] + t_i
                h = rmsnorm(x, self.vec(pre + "input_layernorm.weight"), self.eps)
                q = matvec(self.W[pre + "self_attn.q_proj"], h)
                k = matvec(self.W[pre + "self_attn.k_proj"], h)
                v = matvec(self.W[pre + "self_attn.v_proj"], h)
                for nm, vv in (("q", q), ("k", k), ("v", v)):
                    b = self.vec(pre + f"self_attn.{nm}_proj.bias")
                    if b is not None:
                        for i in range(len(vv)):
                            vv[i] += b[i]
                qh = [q[j * D:(j + 1) * D] for j in range(H)]
                kh = [k[j * D:(j + 1) * D] for j in range(KV)]
                vh = [v[j * D:(j + 1) * D] for j in range(KV)]
                qn, kn = self.vec(pre + "self_attn.q_norm.weight"), self.vec(pre + "self_attn.k_norm.weight")
                if qn is not None:
                    qh = [rmsnorm(a, qn, self.eps) for a in qh]
                    kh = [rmsnorm(a, kn, self.eps) for a in kh]
                qh = [apply_rope(a, pos, self.inv) for a in qh]
                kh = [apply_rope(a, pos, self.inv) for a in kh]
                cache["k"][l].append(kh)
                cache["v"][l].append(vh)
                att = []
                scale = 1.0 / math.sqrt(D)
                for j in range(H):
                    kvh = j // grp
                    sc = [sum(map(float.__mul__, qh[j], ks[kvh])) * scale for ks in cache["k"][l]]
                    m = max(sc)
                    e = [math.exp(s - m) for s in sc]
                    z = sum(e)
                    o = [0.0] * D
                    for w_, vs in zip(e, cache["v"][l]):
                        vj = vs[kvh]
                        for d in range(D):
                            o[d] += w_ / z * vj[d]
                    att.extend(o)
                ao = matvec(self.W[pre + "self_attn.o_proj"], att)
                b = self.vec(pre + "self_attn.o_proj.bias")
                if b is not None:
                    ao = [a + c for a, c in zip(ao, b)]
                x = [a + c for a, c in zip(x, ao)]
                h = rmsnorm(x, self.vec(pre + "post_attention_layernorm.weight"), self.eps)
                g = matvec(self.W[pre + "mlp.gate_proj"], h)
                u = matvec(self.W[pre + "mlp.up_proj"], h)
                a = [gi / (1.0 + math.exp(-gi)) * ui for gi, ui in zip(g, u)]
                dn = matvec(self.W[pre + "mlp.down_proj"], a)
                xs[t_i] = [p + c for p, c in zip(x, dn)]
        cache["pos"] += len(ids)
        nw = self.vec("model.norm.weight")
        return [matvec(self.lm_head, rmsnorm(x, nw, self.eps)) for x in xs], cache


# ------------------------------------------------------------------------------------------- checks


def check_fixture(folder):
    name = os.path.basename(folder)
    t0 = time.time()
    m = Model(folder)
    ref = read_safetensors(os.path.join(folder, "reference_logits.safetensors"))
    ids = ref["input_ids"][2]
    assert ref["input_ids"][0] == "I32" and ref["logits"][0] == "F32"
    T, V = ref["logits"][1]
    assert T == len(ids) and V == m.cfg["vocab_size"]
    logits, _ = m.forward(ids)
    refl = ref["logits"][2]
    md, mx = 0.0, 0.0
    for t in range(T):
        for v in range(V):
            md = max(md, abs(logits[t][v] - refl[t * V + v]))
            mx = max(mx, abs(refl[t * V + v]))
    am = sum(1 for t in range(T) if max(range(V), key=lambda v: logits[t][v]) ==
             max(range(V), key=lambda v: refl[t * V + v]))
    ok = md < 1e-4 * max(1.0, mx)
    print(f"{'ok  ' if ok else 'FAIL'} {name:16s} T={T} max|logit| {mx:.3f} max abs diff (fp64 re-impl vs "
          f"reference) {md:.2e}, argmax agree {am}/{T}  ({time.time() - t0:.1f}s)")
    return ok, m


def check_awq_pair(mg, mv):
    same = True
    for name, (q, z, s) in mg.awq_ints.items():
        q2, z2, s2 = mv.awq_ints[name]
        same &= q == q2 and z == z2 and s == s2
    print(f"{'ok  ' if same else 'FAIL'} tiny-awq-gemm and tiny-awq-gemv hold identical integers, zeros and scales "
          f"({len(mg.awq_ints)} linears)")
    non_lin_same = all(mg.t[k] == mv.t[k] for k in mg.t if not k.startswith("model.layers.") or "norm" in k)
    print(f"{'ok  ' if non_lin_same else 'FAIL'} tiny-awq-gemm and tiny-awq-gemv hold identical fp16 tensors")
    return same and non_lin_same


# ------------------------------------------------------------------------------------------- default model


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_encode_ascii(tok, text):
    """GPT-2 regex byte-level BPE for ASCII text (\\p{L} -> [A-Za-z], \\p{N} -> [0-9])."""
    model = tok["model"]
    vocab = model["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    rank = {m: i for i, m in enumerate(merges)}
    pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
    b2u = bytes_to_unicode()
    ids = []
    for w in pat.findall(text):
        sym = [b2u[b] for b in w.encode("utf-8")]
        while len(sym) > 1:
            best = min(((rank.get((sym[i], sym[i + 1]), 1 << 30), i) for i in range(len(sym) - 1)))
            if best[0] == 1 << 30:
                break
            i = best[1]
            sym = sym[:i] + [sym[i] + sym[i + 1]] + sym[i + 2:]
        ids.extend(vocab[s] for s in sym)
    return ids


def check_default(folder, n_tokens):
    ok = True
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tok = json.load(f)
    with open(os.path.join(folder, "reference_greedy.json")) as f:
        refs = json.load(f)
    for r in refs:
        ids = [0] + bpe_encode_ascii(tok, r["prompt"])
        good = ids == r["prompt_ids"]
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} default tokenizer re-impl: {r['prompt']!r} -> {ids}")
    if n_tokens <= 0:
        return ok
    t0 = time.time()
    m = Model(folder)
    print(f"     loaded default model ({time.time() - t0:.0f}s)")
    for r in refs:
        t0 = time.time()
        logits, cache = m.forward(r["prompt_ids"])
        gen = []
        for step in range(n_tokens):
            lg = logits[-1]
            nxt = max(range(len(lg)), key=lambda v: lg[v])
            gen.append(nxt)
            if step + 1 < n_tokens:
                logits, cache = m.forward([nxt], cache)
        good = gen == r["generated_ids"][:n_tokens]
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} default greedy {r['prompt']!r}: first {n_tokens} ids {gen} vs reference "
              f"{r['generated_ids'][:n_tokens]} ({time.time() - t0:.0f}s)")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ap.add_argument("--fixtures", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--default-dir", default=os.path.join(root, "models", "default"))
    ap.add_argument("--default", type=int, default=0, help="greedy tokens to recompute for models/default")
    args = ap.parse_args()
    ok = True
    models = {}
    for d in sorted(os.listdir(args.fixtures)):
        p = os.path.join(args.fixtures, d)
        if os.path.isfile(os.path.join(p, "reference_logits.safetensors")):
            r, m = check_fixture(p)
            ok &= r
            models[d] = m
    if "tiny-awq-gemm" in models and "tiny-awq-gemv" in models:
        ok &= check_awq_pair(models["tiny-awq-gemm"], models["tiny-awq-gemv"])
    if os.path.isfile(os.path.join(args.default_dir, "reference_greedy.json")):
        ok &= check_default(args.default_dir, args.default)
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
