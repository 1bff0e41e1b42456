#!/usr/bin/env python3
"""perfx vs llama.cpp on the same model, same threads, same prompt length and generated tokens.

Normally started through run_peer.sh (which compiles membw.cpp first). python3 standard library only.

For every case (one model, seen by perfx as PERFX_MODEL and by llama.cpp as a GGUF):
  * prompt: a prefix of a text file cut so that BOTH tokenizers give exactly --np tokens (BOS included),
    and the two id lists are compared;
  * perfx:  `perfx run -m PERFX_MODEL -p PROMPT -n NG --temp 0 -t T --ignore-eos` under /usr/bin/time -v
            (its own prefill / decode tokens/s, wall clock, peak RSS);
  * llama.cpp, same command shape: `llama-completion -m GGUF -p PROMPT -n NG --temp 0 -t T -tb T --ignore-eos
            -no-cnv --no-warmup` under /usr/bin/time -v (wall clock, peak RSS, and llama_perf's prompt eval /
            eval tokens/s when it printed them), alternated with the perfx runs so both see the same load;
  * llama.cpp's benchmark: `llama-bench -m GGUF -p NP -n NG -t T -r R` (pp NP, tg NG at depth 0) and
            `llama-bench -p 0 -n NG -d NP -t T -r R` (tg NG at depth NP: the context perfx decodes at);
  * decode roofline: weight bytes read per token / read bandwidth from membw, both at a DRAM-sized buffer
            and at a buffer the size of the weights (cache-resident when they fit in the LLC).
--sched fifo runs every timed command (perfx, llama.cpp, membw) under `chrt -f 10` so that other users'
processes on a shared machine cannot preempt it (needs root or CAP_SYS_NICE; the kernel's RT throttling still
leaves them 5%). Under fifo llama-completion usually loses its own log lines (its logger thread is starved and
never drained at exit), so only its wall clock / RSS are used there.
Prints a Markdown report on stdout; --json writes every raw number.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def log(msg):
    print("[run_peer] " + msg, file=sys.stderr, flush=True)


SCHED_PREFIX = []  # ["chrt", "-f", "10"] under --sched fifo


def run(cmd, timeout=900, stdin=subprocess.DEVNULL, bench=False):
    """bench=True: a timed command, prefixed with SCHED_PREFIX."""
    if bench:
        cmd = SCHED_PREFIX + cmd
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    p = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.stderr.write(err[-4000:])
        raise RuntimeError("command failed (%d): %s" % (p.returncode, " ".join(cmd)))
    return out, err


def timed(cmd, timeout=900):
    """Runs cmd under /usr/bin/time -v; returns (stdout, stderr_without_time, wall_s, max_rss_bytes)."""
    fd, tpath = tempfile.mkstemp(prefix="run_peer_time_")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        out, err = run(["/usr/bin/time", "-v", "-o", tpath] + cmd, timeout=timeout, bench=True)
        wall = time.perf_counter() - t0
        with open(tpath) as f:
            tv = f.read()
    finally:
        os.unlink(tpath)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv)
    rss = int(m.group(1)) * 1024 if m else None
    return out, err, wall, rss


# ---------------------------------------------------------------------------------------------------------
# GGUF header: tensor bytes (what a decode step reads) and a few keys
GG_TYPE_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34)}


def gguf_summary(path):
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the header of the small models here; tensor data is not needed
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def rstr():
        nonlocal pos
        n = rd("Q")
        s = data[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            vals = [rval(et) for _ in range(n)]
            return vals if n <= 16 else "<array of %d>" % n
        return rd(scal[t])

    magic, ver, n_t, n_kv = rd("I"), rd("I"), rd("Q"), rd("Q")
    if magic != 0x46554747:
        raise RuntimeError("%s is not a GGUF file" % path)
    kv = {}
    for _ in range(n_kv):
        k = rstr()
        kv[k] = rval(rd("I"))
    total = 0
    types = {}
    for _ in range(n_t):
        rstr()
        nd = rd("I")
        ne = [rd("Q") for _ in range(nd)]
        t = rd("I")
        rd("Q")
        nel = 1
        for d in ne:
            nel *= d
        blk, bsz = GG_TYPE_SIZE.get(t, (1, 4))
        total += nel // blk * bsz
        types[t] = types.get(t, 0) + 1
    return {"version": ver, "tensors": n_t, "tensor_bytes": total, "types": types,
            "arch": kv.get("general.architecture"), "kv": kv}


def perfx_tokenize(perfx, model, text):
    out, _ = run([perfx, "tokenize", "-m", model, "-p", text])
    return [int(x) for x in out.split()]


def llama_tokenize(bindir, gguf, text):
    out, _ = run([os.path.join(bindir, "llama-tokenize"), "-m", gguf, "-p", text, "--ids", "--log-disable",
                  "--no-escape"])
    m = re.search(r"\[([\d, ]*)\]", out)
    if not m:
        raise RuntimeError("cannot parse llama-tokenize output: " + out[-300:])
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def make_prompt(args, perfx_model, gguf, np_tokens):
    """A prefix of the text with exactly np_tokens tokens (BOS included) for both engines: whole words where
    possible, else cut inside the next word (small-vocabulary models add several tokens per word)."""
    with open(args.prompt_file, encoding="utf-8") as f:
        text_all = " ".join(f.read().split())

    def count(text):
        return len(perfx_tokenize(args.perfx, perfx_model, text))

    # candidate cut points: ends of words first
    ends = [i for i, ch in enumerate(text_all) if ch == " "][: np_tokens * 2]
    lo, hi = 0, len(ends) - 1
    while lo < hi:  # largest word count with <= np_tokens tokens (monotone in the number of words)
        mid = (lo + hi + 1) // 2
        if count(text_all[:ends[mid]]) <= np_tokens:
            lo = mid
        else:
            hi = mid - 1
    cands = [ends[lo]] + list(range(ends[lo] + 1, ends[min(lo + 1, len(ends) - 1)]))
    for cut in cands:
        text = text_all[:cut].rstrip()
        a = perfx_tokenize(args.perfx, perfx_model, text)
        if len(a) != np_tokens:
            continue
        b = llama_tokenize(args.llama_bin, gguf, text)
        if a != b:
            log("WARNING: token ids differ between perfx and llama.cpp for the prompt (%d vs %d tokens)"
                % (len(a), len(b)))
        if len(b) == np_tokens:
            return text, a == b
    raise RuntimeError("could not build a prompt of exactly %d tokens" % np_tokens)


PERFX_RE = re.compile(r"perfx: prompt (\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\); generated (\d+) tokens in "
                      r"([\d.]+) s \(([\d.]+) tokens/s\)")
PERFX_WB = re.compile(r"perfx: weight bytes (\d+)")
LL_P = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens \(.*?([\d.]+) tokens per second\)")
LL_E = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs\s*\(.*?([\d.]+) tokens per second\)")


def run_perfx_once(args, model, prompt):
    out, err, wall, rss = timed([args.perfx, "run", "-m", model, "-p", prompt, "-n", str(args.ng), "--temp", "0",
                                 "-t", str(args.threads), "--ignore-eos"])
    m = PERFX_RE.search(err)
    if not m:
        raise RuntimeError("cannot parse perfx timings:\n" + err[-2000:])
    wb = PERFX_WB.search(err)
    return {"prompt_tokens": int(m.group(1)), "prefill_s": float(m.group(2)), "pp_tps": float(m.group(3)),
            "gen_tokens": int(m.group(4)), "decode_s": float(m.group(5)), "tg_tps": float(m.group(6)),
            "wall_s": wall, "rss": rss, "weight_bytes": int(wb.group(1)) if wb else None, "text": out}


def run_llama_completion_once(args, gguf, prompt):
    exe = os.path.join(args.llama_bin, "llama-completion")
    tries = 1 if args.sched == "fifo" else 8
    for _ in range(tries):
        out, err, wall, rss = timed([exe, "-m", gguf, "-p", prompt, "-n", str(args.ng), "--temp", "0",
                                     "-t", str(args.threads), "-tb", str(args.threads), "--ignore-eos", "-no-cnv",
                                     "--no-warmup", "--no-display-prompt", "--no-escape", "-c",
                                     str(args.np + args.ng + 16)])
        mp, me = LL_P.search(err), LL_E.search(err)
        if mp and me:
            return {"prompt_tokens": int(mp.group(2)), "prefill_s": float(mp.group(1)) / 1e3,
                    "pp_tps": float(mp.group(3)), "gen_runs": int(me.group(2)), "decode_s": float(me.group(1)) / 1e3,
                    "tg_tps": float(me.group(3)), "wall_s": wall, "rss": rss, "text": out}
        # Exit status 0 but the end of the text and the perf lines are missing: llama.cpp's common logger is
        # intentionally leaked, so its asynchronous queue is not drained at exit (seen on a loaded machine, and
        # nearly always under --sched fifo, where the logger thread gets no CPU).
        args.truncated_runs += 1
        if args.sched != "fifo":
            log("llama-completion exited without its perf lines (truncated output); running it again")
    return {"pp_tps": None, "tg_tps": None, "wall_s": wall, "rss": rss, "text": None}


def run_pair(args, pmodel, gguf, prompt):
    """perfx and llama-completion alternately, so that both see the same background load."""
    px, lc = [], []
    for _ in range(args.reps):
        px.append(run_perfx_once(args, pmodel, prompt))
        lc.append(run_llama_completion_once(args, gguf, prompt))
    return px, lc


def run_llama_bench(args, gguf):
    exe = os.path.join(args.llama_bin, "llama-bench")
    rows = []
    for extra in (["-p", str(args.np), "-n", str(args.ng)], ["-p", "0", "-n", str(args.ng), "-d", str(args.np)]):
        out, _ = run([exe, "-m", gguf, "-t", str(args.threads), "-r", str(args.reps), "-o", "json"] + extra,
                     bench=True)
        rows += json.loads(out)
    res = {}
    for r in rows:
        key = ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"])
        if r.get("n_depth"):
            key += "@d%d" % r["n_depth"]
        res[key] = {"avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"], "samples_ts": r.get("samples_ts"),
                    "type": r.get("model_type")}
    return res


def membw(args, nbytes, reps):
    out, _ = run([args.membw, "--threads", str(args.threads), "--bytes", str(int(nbytes)), "--reps", str(reps)],
                 bench=True)
    r = {}
    for line in out.splitlines():
        m = re.match(r"membw (\w+) threads=\d+ bytes=\d+ gbps=([\d.]+)", line)
        if m:
            r[m.group(1)] = float(m.group(2))
    return r


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def machine_info():
    info = {}
    try:
        out, _ = run(["lscpu"])
        for k in ("Model name", "CPU(s)", "Thread(s) per core", "L2 cache", "L3 cache", "Flags"):
            m = re.search(r"^%s:\s*(.*)$" % re.escape(k), out, re.M)
            if m:
                info[k] = m.group(1).strip()
        fl = info.pop("Flags", "").split()
        info["simd"] = " ".join(x for x in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16") if x in fl)
    except Exception as e:  # noqa: BLE001
        info["error"] = str(e)
    with open("/proc/meminfo") as f:
        m = re.search(r"MemTotal:\s*(\d+) kB", f.read())
        info["mem_gib"] = round(int(m.group(1)) / 2**20, 1) if m else None
    return info


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def git_info(repo):
    try:
        h = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        d = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout
        return h, [ln[3:] for ln in d.splitlines() if ln.strip()]
    except Exception:  # noqa: BLE001
        return "unknown", []


def fmt(x, nd=1):
    return "-" if x is None or x != x else ("%.*f" % (nd, x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", default=os.environ.get("LLAMA_CPP_BIN"), help="dir with llama-bench, "
                    "llama-completion, llama-tokenize (env LLAMA_CPP_BIN)")
    ap.add_argument("--perfx", default=os.environ.get("PERFX_BIN", os.path.join(REPO, "build-peer", "perfx")))
    ap.add_argument("--membw", required=True, help="compiled membw binary")
    ap.add_argument("--case", action="append", default=[], metavar="LABEL=PERFX_MODEL,GGUF",
                    help="a model: perfx loads PERFX_MODEL (HF folder or .gguf), llama.cpp loads GGUF (repeatable)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--np", type=int, default=128, help="prompt tokens (BOS included)")
    ap.add_argument("--ng", type=int, default=64, help="generated tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sched", choices=["normal", "fifo"], default="normal",
                    help="fifo: run timed commands under chrt -f 10 (shared, oversubscribed machines)")
    ap.add_argument("--dram-bytes", type=int, default=512 << 20, help="membw buffer for the DRAM figure")
    ap.add_argument("--prompt-file", default=os.path.join(REPO, "models", "default", "heldout.txt"))
    ap.add_argument("--llama-commit", default=os.environ.get("LLAMA_CPP_COMMIT", ""))
    ap.add_argument("--perfx-src", default=os.environ.get("PERFX_SRC", REPO),
                    help="git checkout (or a folder with a COMMIT file) the perfx binary was built from")
    ap.add_argument("--json", default="", help="write all raw numbers here")
    args = ap.parse_args()
    if not args.llama_bin or not args.case:
        ap.error("need --llama-bin and at least one --case")
    for exe in ("llama-bench", "llama-completion", "llama-tokenize"):
        if not os.access(os.path.join(args.llama_bin, exe), os.X_OK):
            ap.error("%s not found in %s" % (exe, args.llama_bin))
    if not os.access(args.perfx, os.X_OK):
        ap.error("perfx binary not found: %s" % args.perfx)
    if args.sched == "fifo":
        SCHED_PREFIX[:] = ["chrt", "-f", "10"]
        run(["true"], bench=True)  # fails early without the privilege

    args.truncated_runs = 0
    report = {"machine": machine_info(), "load_before": loadavg(), "threads": args.threads, "np": args.np,
              "ng": args.ng, "reps": args.reps, "sched": args.sched, "cases": []}
    if os.path.isfile(os.path.join(args.perfx_src, "COMMIT")):
        with open(os.path.join(args.perfx_src, "COMMIT")) as f:
            report["perfx_commit"], report["perfx_dirty"] = f.read().strip() + " (clean export)", []
    else:
        report["perfx_commit"], report["perfx_dirty"] = git_info(args.perfx_src)
    report["llama_commit"] = args.llama_commit
    bw_dram = membw(args, args.dram_bytes, 5)
    report["membw_dram"] = bw_dram

    for spec in args.case:
        label, rest = spec.split("=", 1)
        pmodel, gguf = rest.split(",", 1)
        log("case %s: perfx %s | llama.cpp %s" % (label, pmodel, gguf))
        g = gguf_summary(gguf)
        prompt, same_ids = make_prompt(args, pmodel, gguf, args.np)
        px, lc = run_pair(args, pmodel, gguf, prompt)
        lb = run_llama_bench(args, gguf)
        pw = px[0]["weight_bytes"] or g["tensor_bytes"]
        lw = g["tensor_bytes"]
        lc_text = next((r["text"] for r in lc if r["text"] is not None), None)
        c = {"label": label, "perfx_model": pmodel, "gguf": gguf, "gguf_types": g["types"],
             "prompt_ids_equal": same_ids, "prompt_chars": len(prompt), "prompt": prompt, "perfx": px,
             "llama_completion": lc, "llama_bench": lb, "perfx_weight_bytes": pw, "llama_weight_bytes": lw,
             "membw_at_perfx_weights": membw(args, pw, 20), "membw_at_llama_weights": membw(args, lw, 20),
             "same_text": None if lc_text is None else px[0]["text"].strip() == lc_text.strip()}
        tgd = lb.get("tg%d@d%d" % (args.ng, args.np), {}).get("avg_ts", float("nan"))
        pp = lb.get("pp%d" % args.np, {}).get("avg_ts", float("nan"))
        lc_pp = [r["pp_tps"] for r in lc if r["pp_tps"] is not None]
        lc_tg = [r["tg_tps"] for r in lc if r["tg_tps"] is not None]
        c["summary"] = {
            "perfx_pp": med([r["pp_tps"] for r in px]), "perfx_tg": med([r["tg_tps"] for r in px]),
            "perfx_wall": med([r["wall_s"] for r in px]), "perfx_rss": max(r["rss"] for r in px),
            "bench_pp": pp, "bench_tg_d": tgd,
            "bench_tg_0": lb.get("tg%d" % args.ng, {}).get("avg_ts", float("nan")),
            "lc_pp": med(lc_pp) if lc_pp else None, "lc_tg": med(lc_tg) if lc_tg else None,
            "lc_wall": med([r["wall_s"] for r in lc]), "lc_rss": max(r["rss"] for r in lc)}
        report["cases"].append(c)
    report["load_after"] = loadavg()
    report["llama_completion_truncated_runs"] = args.truncated_runs

    # ------------------------------------------------------------------ report
    p = print
    mi = report["machine"]
    p("- machine: %s, %s CPUs (%s thread/core), L2 %s, L3 %s, %s GiB RAM, %s"
      % (mi.get("Model name"), mi.get("CPU(s)"), mi.get("Thread(s) per core"), mi.get("L2 cache"), mi.get("L3 cache"),
         mi.get("mem_gib"), mi.get("simd")))
    p("- perfx %s%s; llama.cpp %s" % (report["perfx_commit"],
                                       " (working tree also had uncommitted changes in: %s)"
                                       % ", ".join(report["perfx_dirty"]) if report["perfx_dirty"] else "",
                                       args.llama_commit or "(commit unknown)"))
    p("- %d threads, prompt %d tokens (BOS included), %d generated tokens, %d reps (medians; llama-bench: mean ± sd); "
      "scheduling: %s" % (args.threads, args.np, args.ng, args.reps,
                          "SCHED_FIFO (chrt -f 10) for every timed command" if args.sched == "fifo" else "normal"))
    p("- load average (1/5/15 min) before / after: %s / %s" % (report["load_before"], report["load_after"]))
    if args.truncated_runs:
        p("- llama-completion runs that exited without their perf lines: %d%s" % (
            args.truncated_runs, " (expected under SCHED_FIFO; their wall clock and RSS are still used)"
            if args.sched == "fifo" else " (repeated)"))
    p("- membw (%d threads, %d MiB buffer = DRAM): read %s GB/s, copy %s GB/s"
      % (args.threads, args.dram_bytes >> 20, fmt(bw_dram.get("read"), 2), fmt(bw_dram.get("copy"), 2)))
    p("")
    p("Throughput (tokens/s). perfx: its own prefill / decode timings of `perfx run`. llama.cpp: llama-bench "
      "pp%d and tg%d at depth %d (decode at the same context as perfx), and tg%d at depth 0 for reference."
      % (args.np, args.ng, args.np, args.ng))
    p("")
    p("| model | perfx prefill | llama.cpp pp%d | ratio | perfx decode | llama.cpp tg%d@d%d | ratio | "
      "llama.cpp tg%d@d0 |" % (args.np, args.ng, args.np, args.ng))
    p("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in report["cases"]:
        s, lb = c["summary"], c["llama_bench"]
        pp = lb.get("pp%d" % args.np, {})
        tgd = lb.get("tg%d@d%d" % (args.ng, args.np), {})
        tg0 = lb.get("tg%d" % args.ng, {})
        p("| %s | %s | %s ± %s | %s | %s | %s ± %s | %s | %s ± %s |" % (
            c["label"], fmt(s["perfx_pp"]), fmt(pp.get("avg_ts")), fmt(pp.get("stddev_ts")),
            fmt(s["perfx_pp"] / s["bench_pp"], 2), fmt(s["perfx_tg"]), fmt(tgd.get("avg_ts")),
            fmt(tgd.get("stddev_ts")), fmt(s["perfx_tg"] / s["bench_tg_d"], 2), fmt(tg0.get("avg_ts")),
            fmt(tg0.get("stddev_ts"))))
    p("")
    p("Whole process, same command shape (`perfx run` vs `llama-completion`, load + %d-token prompt + %d tokens, "
      "alternating runs):" % (args.np, args.ng))
    p("")
    p("| model | perfx wall s | llama-completion wall s | wall ratio (llama/perfx) | perfx peak RSS MiB | "
      "llama-completion peak RSS MiB | llama-completion prefill / decode tok/s (own timings) |")
    p("|---|---:|---:|---:|---:|---:|---|")
    for c in report["cases"]:
        s = c["summary"]
        own = "%s / %s" % (fmt(s["lc_pp"]), fmt(s["lc_tg"])) if s["lc_tg"] is not None else "not printed"
        p("| %s | %s | %s | %s | %s | %s | %s |" % (
            c["label"], fmt(s["perfx_wall"], 3), fmt(s["lc_wall"], 3), fmt(s["lc_wall"] / s["perfx_wall"], 2),
            fmt(s["perfx_rss"] / 2**20), fmt(s["lc_rss"] / 2**20), own))
    p("")
    p("Decode roofline: limit tok/s = read bandwidth / weight bytes read per token (every weight once; a tied "
      "embedding is read whole as the output projection; KV-cache reads not counted). @DRAM uses the %d MiB "
      "membw figure; @LLC uses membw on a buffer of exactly the weight bytes (cache-resident if it fits)."
      % (args.dram_bytes >> 20))
    p("")
    p("| model | engine | weight bytes/token | decode tok/s | limit @DRAM | fraction | read GB/s @weights | "
      "limit @LLC | fraction |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in report["cases"]:
        s = c["summary"]
        for name, wb, tg, bw in (("perfx", c["perfx_weight_bytes"], s["perfx_tg"], c["membw_at_perfx_weights"]),
                                 ("llama.cpp (bench tg@d%d)" % args.np, c["llama_weight_bytes"], s["bench_tg_d"],
                                  c["membw_at_llama_weights"])):
            lim_d = bw_dram["read"] * 1e9 / wb
            lim_c = bw["read"] * 1e9 / wb
            p("| %s | %s | %.2f MiB | %s | %s | %.1f%% | %s | %s | %.1f%% |" % (
                c["label"], name, wb / 2**20, fmt(tg), fmt(lim_d), 100 * tg / lim_d, fmt(bw["read"], 2), fmt(lim_c),
                100 * tg / lim_c))
    p("")
    for c in report["cases"]:
        p("- %s: prompt = first %d characters of %s (whitespace runs collapsed); prompt token ids identical in "
          "both engines: %s; greedy continuation text identical: %s" % (
              c["label"], c["prompt_chars"], os.path.relpath(args.prompt_file, REPO), c["prompt_ids_equal"],
              "not checked (llama-completion printed nothing)" if c["same_text"] is None else c["same_text"]))
    if args.json:
        for c in report["cases"]:
            for r in c["perfx"] + c["llama_completion"]:
                if r.get("text"):
                    r["text"] = r["text"][:400]
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        log("wrote " + args.json)


if __name__ == "__main__":
    main()
