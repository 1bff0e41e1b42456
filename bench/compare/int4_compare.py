#!/usr/bin/env python3
"""perfx vs llama.cpp at real model sizes on the CPU (issue 11): random weights in the exact shapes
of TinyLlama-1.1B and Llama-2-7B, both benches back to back, pinned to the same cores, in rounds;
prints medians, ratios and the decode's use of the measured read bandwidth.

  python3 bench/compare/int4_compare.py --llama-bin /work/peers/llama.cpp/build/bin

Per shape it writes (once, into --work; bench/compare/gen_random_gguf.py with the llama SPM vocab):
  SHAPE-f16.gguf  -> llama-quantize Q4_0  -> SHAPE-q4_0.gguf       (llama.cpp's default Q4_0:
                                                                      output.weight stays Q6_K)
                  -> llama-quantize --pure Q4_0 -> SHAPE-q4_0-pure.gguf (every matrix Q4_0)
  (--direct: SHAPE-q4_0-pure.gguf written as Q4_0 blocks directly, no F16 and no quantize; then
   llama.cpp runs that file too.)
and per round runs, each under `taskset -c CORES` (and `chrt -f 10` with --fifo):
  llama-bench  -m SHAPE-q4_0.gguf           -p PP -n TG -t T -r REPS -o json   "llama.cpp Q4_0"
  perfx bench  -m random:SHAPE:awq          (same flags)                        "perfx AWQ g128"
  perfx bench  -m SHAPE-q4_0-pure.gguf      (same flags)                        "perfx Q4_0 GGUF"
  llama-bench  -m SHAPE-q4_0-pure.gguf      (same flags)                        "llama.cpp Q4_0 GGUF"
Bandwidth: bench/compare/membw.cpp (T threads, 1 GiB, best pass) pinned the same way; a decode's
use = weight bytes read per token (every matrix; the embedding table is not read, one row of it)
x tokens/s / read bandwidth. Peak RSS is each process's (/usr/bin/time -v); perfx's random:
models hold their source tensors in memory too, so their RSS is not the file-backed figure (issue
11's RSS target is checked by tools/reference/awq_memory_test.sh).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.abspath(os.path.join(here, "..", ".."))
SHAPES = {"tinyllama-1.1b": (32000, 2048), "llama-2-7b": (32000, 4096)}  # vocab, hidden
# bytes per block, elements per block of ggml types
GGML = {0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 8: (34, 32), 12: (144, 256), 13: (176, 256),
        14: (210, 256), 30: (2, 1)}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def gguf_tensor_bytes(path):
    """{name: bytes} of a GGUF file's tensors (header only)."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize(fmt)
            return struct.unpack(fmt, f.read(n))

        def rstr():
            (n,) = rd("<Q")
            return f.read(n).decode("utf-8", "replace")

        def skip_val(t):
            sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
            if t == 8:
                rstr()
            elif t == 9:
                (et,) = rd("<I")
                (n,) = rd("<Q")
                if et == 8:
                    for _ in range(n):
                        rstr()
                else:
                    f.seek(sizes[et] * n, 1)
            else:
                f.seek(sizes[t], 1)

        magic, ver, nt, nkv = rd("<IIQQ")
        assert magic == 0x46554747, path
        for _ in range(nkv):
            rstr()
            (t,) = rd("<I")
            skip_val(t)
        out = {}
        for _ in range(nt):
            name = rstr()
            (nd,) = rd("<I")
            dims = rd("<%dQ" % nd)
            (t,) = rd("<I")
            rd("<Q")
            n = 1
            for d in dims:
                n *= d
            bb, be = GGML.get(t, (0, 1))
            out[name] = n // be * bb
        return out


def run(cmd, cores, fifo, timeout=3600):
    full = ["/usr/bin/time", "-v", "taskset", "-c", cores]
    if fifo:
        full += ["chrt", "-f", "10"]
    full += cmd
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        log(p.stdout[-2000:], p.stderr[-4000:])
        raise SystemExit("failed: " + " ".join(cmd))
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    rss = int(m.group(1)) * 1024 if m else 0
    return p.stdout, rss


def bench_json(stdout):
    i = stdout.find("[")
    return json.loads(stdout[i:])


def gen(shape, typ, vocab, out):
    subprocess.run([sys.executable, os.path.join(here, "gen_random_gguf.py"), "--shape", shape,
                    "--type", typ, "--vocab", vocab, "-o", out], check=True)


def prepare(shape, work, llama_bin, direct, vocab):
    pure = os.path.join(work, shape + "-q4_0-pure.gguf")
    q40 = os.path.join(work, shape + "-q4_0.gguf")
    if direct:
        if not os.path.exists(pure):
            gen(shape, "q4_0", vocab, pure)
        return pure, pure
    if not (os.path.exists(pure) and os.path.exists(q40)):
        f16 = os.path.join(work, shape + "-f16.gguf")
        if not os.path.exists(f16):
            gen(shape, "f16", vocab, f16)
        q = os.path.join(llama_bin, "llama-quantize")
        nt = str(os.cpu_count() or 2)
        subprocess.run([q, f16, q40, "Q4_0", nt], check=True, capture_output=True)
        subprocess.run([q, "--pure", f16, pure, "Q4_0", nt], check=True, capture_output=True)
        os.remove(f16)
    return q40, pure


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True, help="folder with llama-bench and llama-quantize")
    ap.add_argument("--perfx", default=os.path.join(repo, "build", "perfx"))
    ap.add_argument("--work", default="/tmp/perfx-int4-compare", help="where the GGUFs are written")
    shared = os.environ.get("PERFX_SHARED_DIR", os.path.join(repo, "..", "shared"))
    ap.add_argument("--vocab", default=os.path.join(shared, "tokenizers", "llama2", "ggml-vocab-llama-spm.gguf"),
                    help="GGUF whose tokenizer keys the random models copy (gen_random_gguf.py --vocab)")
    ap.add_argument("--shapes", default="tinyllama-1.1b,llama-2-7b")
    ap.add_argument("--cores", default="0-1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pp", default="512", help="prompt tokens (per shape: 512 or 'tinyllama-1.1b=512,llama-2-7b=128')")
    ap.add_argument("--tg", default="128", help="generated tokens (same syntax as --pp)")
    ap.add_argument("--reps", type=int, default=3, help="-r of each bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fifo", action="store_true", help="run every bench under chrt -f 10")
    ap.add_argument("--direct", action="store_true", help="write Q4_0 directly (no F16 + quantize)")
    ap.add_argument("--skip", default="", help="comma list of runs to skip: llama-pure,perfx-pure")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    skip = set(filter(None, a.skip.split(",")))

    def per_shape(v, shape):
        if "=" not in v:
            return v
        return dict(x.split("=") for x in v.split(","))[shape]

    membw_bin = os.path.join(a.work, "membw")
    subprocess.run(["g++", "-O2", "-march=native", "-pthread", "-o", membw_bin,
                    os.path.join(here, "membw.cpp")], check=True)
    bws = []

    def measure_bw():
        out, _ = run([membw_bin, "--threads", str(a.threads), "--bytes", str(1 << 30), "--reps", "10"],
                     a.cores, a.fifo)
        bws.append(float(re.search(r"membw read .* gbps=([0-9.]+)", out).group(1)))
        log("read bandwidth %.1f GB/s (%d threads, cores %s)" % (bws[-1], a.threads, a.cores))

    results = {}  # (shape, run) -> {"pp": [...], "tg": [...], "rss": [...], "bytes": int}
    for shape in a.shapes.split(","):
        q40, pure = prepare(shape, a.work, a.llama_bin, a.direct, a.vocab)
        V, H = SHAPES[shape]
        pp, tg = per_shape(a.pp, shape), per_shape(a.tg, shape)
        flags = ["-p", pp, "-n", tg, "-t", str(a.threads), "-r", str(a.reps), "-o", "json"]
        tb_q40, tb_pure = gguf_tensor_bytes(q40), gguf_tensor_bytes(pure)
        runs = [("llama.cpp Q4_0", [os.path.join(a.llama_bin, "llama-bench"), "-m", q40] + flags,
                 sum(tb_q40.values()) - tb_q40["token_embd.weight"]),
                ("perfx AWQ g128", [a.perfx, "bench", "-m", "random:%s:awq" % shape] + flags, None),
                ("perfx Q4_0 GGUF", [a.perfx, "bench", "-m", pure] + flags, None)]
        if "perfx-pure" in skip:
            runs.pop()
        if not a.direct and "llama-pure" not in skip:
            runs.append(("llama.cpp Q4_0 GGUF",
                         [os.path.join(a.llama_bin, "llama-bench"), "-m", pure] + flags,
                         sum(tb_pure.values()) - tb_pure["token_embd.weight"]))
        for r in range(a.rounds):
            measure_bw()  # once per round: the best of them is the machine's (others share DRAM)
            for name, cmd, nbytes in runs:
                out, rss = run(cmd, a.cores, a.fifo)
                js = bench_json(out)
                e = results.setdefault((shape, name), {"pp": [], "tg": [], "rss": [], "bytes": nbytes})
                for t in js:
                    if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
                        e["pp"].append(t["avg_ts"])
                    elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
                        e["tg"].append(t["avg_ts"])
                if e["bytes"] is None:  # perfx: weight bytes held minus the embedding table
                    emb = V * H * 2 if "awq" in cmd[3] else tb_pure["token_embd.weight"]
                    e["bytes"] = js[0]["model_size"] - emb
                e["rss"].append(rss)
                log("round %d %s %s: pp %s tg %s rss %.2f GiB" % (
                    r + 1, shape, name, e["pp"][-1:], e["tg"][-1:], rss / 2**30))

    bw = max(bws)
    med = lambda v: statistics.median(v) if v else float("nan")
    lines = []
    lines.append("read bandwidth (membw, %d threads, cores %s): best %.1f GB/s of %s" % (
        a.threads, a.cores, bw, ", ".join("%.1f" % x for x in bws)))
    lines.append("")
    lines.append("| shape | run | pp t/s | tg t/s | GB read/token | decode GB/s | % of bandwidth | peak RSS GiB |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for (shape, name), e in results.items():
        g = e["bytes"] / 1e9
        lines.append("| %s | %s | %.2f | %.2f | %.3f | %.1f | %.0f%% | %.2f |" % (
            shape, name, med(e["pp"]), med(e["tg"]), g, g * med(e["tg"]), 100 * g * med(e["tg"]) / bw,
            max(e["rss"]) / 2**30))
    lines.append("")
    lines.append("| shape | ratio | prefill | decode |")
    lines.append("|---|---|---:|---:|")
    for shape in a.shapes.split(","):
        def ratio(x, y, k):
            ex, ey = results.get((shape, x)), results.get((shape, y))
            if not ex or not ey:
                return float("nan")
            return med(ex[k]) / med(ey[k])
        base = "llama.cpp Q4_0"
        lines.append("| %s | perfx AWQ / llama.cpp Q4_0 | %.2f | %.2f |" % (
            shape, ratio("perfx AWQ g128", base, "pp"), ratio("perfx AWQ g128", base, "tg")))
        same = "llama.cpp Q4_0" if a.direct else "llama.cpp Q4_0 GGUF"
        lines.append("| %s | same Q4_0 GGUF: perfx / llama.cpp | %.2f | %.2f |" % (
            shape, ratio("perfx Q4_0 GGUF", same, "pp"), ratio("perfx Q4_0 GGUF", same, "tg")))
    print("\n".join(lines))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"bandwidth_gbps": bw, "runs": [
                dict(shape=s, run=n, **e) for (s, n), e in results.items()]}, f, indent=1)


if __name__ == "__main__":
    main()
