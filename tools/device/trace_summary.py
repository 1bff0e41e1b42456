#!/usr/bin/env python3
"""Summarises a PERFX_CUDA_TRACE file (src/backend/cuda/trace.cuh): per decode step, where the time
goes among the PDL-chained kernels.

Usage: trace_summary.py TRACE.csv [--steps N] [--timeline]

Each CSV row is one CTA: kind, tag (a per-layer pointer), cta, smid, t_start, t_prewait (entering
griddepcontrol.wait; absent in older traces), t_wait (its return; 0: no PDL wait), t_end and
t_mark (a probe point after the wait, PERFX_CUDA_TRACE_PROBE; 0 or absent: none), in ns of
%globaltimer. A step ends with its argmax / sample launch. Inside a step the
rows of one (kind, tag) form one launch unless a CTA index repeats (then the next launch of the
same pair). Linear launches are named by their order (qkv, o, gate_up, down per layer; the dense
GEMV is lm_head); a norm by the linear launch after it (qkv: attn, gate_up: ffn, lm_head: final;
"?" when none follows).

Printed, over the last N complete steps (default 8):
  - the step time (first CTA start to last CTA end) and the timer's resolution;
  - per op: its share of the step's critical path (how far its last CTA end moved the step's
    frontier past the previous launch's), its span (first start to last end), the wait (previous
    launch's last end to this launch's last wait return) and what runs after the wait (last wait
    return to last end), in us per launch, median over launches;
  - --timeline: every launch of the median step, in order.
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict

LINEAR_NAMES = ["qkv", "o", "gate_up", "down"]


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((r["kind"], r["tag"], int(r["cta"]), int(r["smid"]), int(r["t_start"]),
                         int(r["t_wait"]), int(r["t_end"]), int(r.get("t_prewait") or 0),
                         int(r.get("t_mark") or 0)))
    return rows


def launches_of(rows):
    """Groups rows into launches: (kind, tag) pairs, split where a CTA index repeats."""
    open_l = defaultdict(list)  # (kind, tag) -> list of launches (dict: ctas set, rows)
    for r in sorted(rows, key=lambda r: r[4]):
        key = (r[0], r[1])
        ls = open_l[key]
        if not ls or r[2] in ls[-1]["ctas"]:
            ls.append({"kind": r[0], "tag": r[1], "ctas": set(), "rows": []})
        ls[-1]["ctas"].add(r[2])
        ls[-1]["rows"].append(r)
    out = []
    for ls in open_l.values():
        for l in ls:
            rs = l["rows"]
            waits = [r[5] for r in rs if r[5] > 0]
            pre = [r[7] - r[4] for r in rs if r[7] > 0]  # start to entering the wait
            blk = [r[5] - r[7] for r in rs if r[7] > 0]  # inside the wait
            mark = [r[8] - r[5] for r in rs if r[8] > 0 and r[5] > 0]  # wait return to the probe
            out.append({
                "kind": l["kind"],
                "n": len(rs),
                "start": min(r[4] for r in rs),
                "end": max(r[6] for r in rs),
                "first_end": min(r[6] for r in rs),
                "wait_max": max(waits) if waits else 0,
                "wait_min": min(waits) if waits else 0,
                "pre": statistics.median(pre) if pre else None,
                "blocked": statistics.median(blk) if blk else None,
                "mark": statistics.median(mark) if mark else None,
            })
    out.sort(key=lambda l: l["start"])
    return out


def name_launches(step):
    lin = 0
    for l in step:
        k = l["kind"]
        if k in ("gemv3", "gemv1"):
            l["op"] = "%s (%s)" % (LINEAR_NAMES[lin % 4], k)
            lin += 1
        elif k == "dense_gemv":
            l["op"] = "lm_head (dense_gemv)"
        elif k == "embed":  # copy_rows: the embedding first, then the gather of sampled rows
            l["op"] = "embed" if not any(m["kind"] == "embed" for m in step[:step.index(l)]) \
                else "gather"
        else:
            l["op"] = k
    # a norm is named by the linear after it: QKV (attn), gate|up (ffn) or lm_head (final); with
    # PERFX_CUDA_NORM_FUSE=1 most attn norms are inside the QKV launch, so counting would mislabel
    for i, l in enumerate(step):
        if l["kind"] != "norm":
            continue
        nxt = next((m["op"] for m in step[i + 1:] if m["kind"] in ("gemv3", "gemv1", "dense_gemv")),
                   "")
        l["op"] = "norm (%s)" % ("attn" if nxt.startswith("qkv") else
                                 "ffn" if nxt.startswith("gate_up") else
                                 "final" if nxt.startswith("lm_head") else "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args()
    rows = load(a.trace)
    if not rows:
        sys.exit("no records")
    ts = sorted({t for r in rows for t in (r[4], r[6])})
    diffs = [b - a_ for a_, b in zip(ts, ts[1:]) if b > a_]
    res = min(diffs) if diffs else 0
    ls = launches_of(rows)
    # a step ends with its token choice (argmax or sample): cut after each
    ends = [i for i, l in enumerate(ls) if l["kind"] in ("argmax", "sample")]
    if len(ends) < 2:
        sys.exit("fewer than two argmax / sample launches: no complete step in the trace")
    steps = [ls[i0 + 1:i1 + 1] for i0, i1 in zip(ends, ends[1:])]
    # between steps: the next step's first start minus this step's last end (host, graph launch)
    gaps = [(nxt[0]["start"] - max(l["end"] for l in st)) / 1e3 for st, nxt in zip(steps, steps[1:])]
    steps = steps[-a.steps:]
    gaps = gaps[-a.steps:]
    per_op = defaultdict(lambda: defaultdict(list))
    step_us = []
    for st in steps:
        name_launches(st)
        t0 = st[0]["start"]
        frontier = t0
        prev_end = t0
        for l in st:
            adv = max(0, l["end"] - frontier)
            frontier = max(frontier, l["end"])
            d = per_op[l["op"]]
            d["critical"].append(adv / 1e3)
            d["span"].append((l["end"] - l["start"]) / 1e3)
            d["n"].append(l["n"])
            if l["wait_max"]:
                d["wait"].append((l["wait_max"] - prev_end) / 1e3)
                d["after_wait"].append((l["end"] - l["wait_max"]) / 1e3)
            d["start_gap"].append((l["start"] - prev_end) / 1e3)
            if l["pre"] is not None:
                d["pre"].append(l["pre"] / 1e3)
                d["blocked"].append(l["blocked"] / 1e3)
            if l["mark"] is not None:
                d["mark"].append(l["mark"] / 1e3)
            prev_end = l["end"]
        step_us.append((frontier - t0) / 1e3)
    print("trace %s: %d records, %d complete steps summarised, timer resolution %d ns" %
          (a.trace, len(rows), len(steps), res))
    print("step (first start to last end): median %.1f us, min %.1f, max %.1f" %
          (statistics.median(step_us), min(step_us), max(step_us)))
    if gaps:
        print("between steps (last end to the next step's first start): median %.1f us" %
              statistics.median(gaps))
    print("\n%-22s %6s %5s %9s %9s %9s %9s %9s %9s %7s %7s %7s" %
          ("op", "count", "CTAs", "crit/stp", "crit", "span", "startgap", "wait", "afterwait",
           "pre", "inwait", "mark"))
    tot = 0.0
    med = lambda v: statistics.median(v) if v else float("nan")
    for op, d in sorted(per_op.items(), key=lambda kv: -sum(kv[1]["critical"])):
        per_step = sum(d["critical"]) / len(steps)
        tot += per_step
        print("%-22s %6d %5d %9.1f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f %7.2f %7.2f" %
              (op, len(d["critical"]) // len(steps), int(med(d["n"])), per_step, med(d["critical"]),
               med(d["span"]), med(d["start_gap"]), med(d["wait"]), med(d["after_wait"]),
               med(d["pre"]), med(d["blocked"]), med(d["mark"])))
    print("%-22s %6s %5s %9.1f   (= the step's critical path, us)" % ("total", "", "", tot))
    print("\ncrit/stp: us per step this op moved the step's end (sum over its launches); crit: the "
          "same per launch (median);\nspan: first CTA start to last CTA end; startgap: first CTA "
          "start minus the previous launch's last end (negative: started under it);\nwait: the "
          "last griddepcontrol.wait return minus the previous launch's last end; afterwait: last "
          "end minus that return;\npre / inwait: per CTA (median), its start to entering griddepcontrol.wait / the time "
          "inside it (traces with t_prewait);\nmark: per CTA (median), the wait's return to the "
          "probe point after it (PERFX_CUDA_TRACE_PROBE; traces with t_mark).")
    if a.timeline:
        st = steps[len(steps) // 2]
        t0 = st[0]["start"]
        print("\ntimeline of one step (us from its first start):")
        for l in st:
            print("  %-22s n=%4d start %8.2f wait %8s end %8.2f" %
                  (l["op"], l["n"], (l["start"] - t0) / 1e3,
                   "%.2f" % ((l["wait_max"] - t0) / 1e3) if l["wait_max"] else "-",
                   (l["end"] - t0) / 1e3))


if __name__ == "__main__":
    main()
