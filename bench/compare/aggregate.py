#!/usr/bin/env python3
"""Aggregate several run_peer.py --json results (rounds of the same configuration) into Markdown tables:
medians over rounds, with the min-max range of each per-round ratio. python3 standard library only.

  python3 bench/compare/aggregate.py run1.json run2.json ...
"""
import json
import statistics
import sys


def med(v):
    return statistics.median(v) if v else float("nan")


def rng(v):
    return "%.2f (%.2f–%.2f)" % (med(v), min(v), max(v)) if v else "-"


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit(__doc__)
    reps = [json.load(open(f)) for f in files]
    r0 = reps[0]
    np_, ng = r0["np"], r0["ng"]
    labels = [c["label"] for c in r0["cases"]]
    per = {lab: [] for lab in labels}
    for r in reps:
        if (r["np"], r["ng"], r["threads"]) != (np_, ng, r0["threads"]):
            sys.exit("%s: a different configuration" % r)
        for c in r["cases"]:
            per[c["label"]].append((r, c))
    p = print
    p("%d rounds (%s), each: %d threads, prompt %d, generate %d, %d reps per engine; scheduling %s; "
      "load average (1 min) %s–%s" % (
          len(reps), ", ".join(files), r0["threads"], np_, ng, r0["reps"], r0.get("sched", "normal"),
          min(float(r["load_before"].split()[0]) for r in reps),
          max(float(r["load_after"].split()[0]) for r in reps)))
    p("")
    p("| model | perfx prefill tok/s | llama.cpp pp%d tok/s | prefill ratio | perfx decode tok/s | "
      "llama.cpp tg%d@d%d tok/s | decode ratio | llama.cpp tg%d@d0 tok/s | decode ratio vs d0 |"
      % (np_, ng, np_, ng))
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lab in labels:
        S = [c["summary"] for _, c in per[lab]]
        p("| %s | %.0f | %.0f | %s | %.0f | %.0f | %s | %.0f | %s |" % (
            lab, med([s["perfx_pp"] for s in S]), med([s["bench_pp"] for s in S]),
            rng([s["perfx_pp"] / s["bench_pp"] for s in S]), med([s["perfx_tg"] for s in S]),
            med([s["bench_tg_d"] for s in S]), rng([s["perfx_tg"] / s["bench_tg_d"] for s in S]),
            med([s["bench_tg_0"] for s in S]), rng([s["perfx_tg"] / s["bench_tg_0"] for s in S])))
    p("")
    p("| model | perfx wall s | llama-completion wall s | wall ratio llama/perfx | perfx peak RSS MiB | "
      "llama-completion peak RSS MiB | llama-completion own prefill / decode tok/s | perfx/llama-completion "
      "prefill | perfx/llama-completion decode |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lab in labels:
        S = [c["summary"] for _, c in per[lab]]
        L = [s for s in S if s.get("lc_tg")]
        p("| %s | %.3f | %.3f | %s | %.1f | %.1f | %s | %s | %s |" % (
            lab, med([s["perfx_wall"] for s in S]), med([s["lc_wall"] for s in S]),
            rng([s["lc_wall"] / s["perfx_wall"] for s in S]), med([s["perfx_rss"] for s in S]) / 2**20,
            med([s["lc_rss"] for s in S]) / 2**20,
            "%.0f / %.0f" % (med([s["lc_pp"] for s in L]), med([s["lc_tg"] for s in L])) if L else "not printed",
            rng([s["perfx_pp"] / s["lc_pp"] for s in L]), rng([s["perfx_tg"] / s["lc_tg"] for s in L])))
    p("")
    p("| model | engine | weight MiB read/token | decode tok/s | DRAM read GB/s | limit @DRAM tok/s | fraction | "
      "read GB/s on a weights-sized buffer | limit @that tok/s | fraction |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lab in labels:
        rows = per[lab]
        for name, wk, tk, bk in (("perfx", "perfx_weight_bytes", "perfx_tg", "membw_at_perfx_weights"),
                                 ("llama.cpp tg%d@d%d" % (ng, np_), "llama_weight_bytes", "bench_tg_d",
                                  "membw_at_llama_weights")):
            wb = rows[0][1][wk]
            tg = med([c["summary"][tk] for _, c in rows])
            bwd = med([r["membw_dram"]["read"] for r, _ in rows])
            bwc = med([c[bk]["read"] for _, c in rows])
            ld, lc = bwd * 1e9 / wb, bwc * 1e9 / wb
            p("| %s | %s | %.2f | %.0f | %.1f | %.0f | %.0f%% | %.1f | %.0f | %.1f%% |" % (
                lab, name, wb / 2**20, tg, bwd, ld, 100 * tg / ld, bwc, lc, 100 * tg / lc))


if __name__ == "__main__":
    main()
