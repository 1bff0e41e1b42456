#!/usr/bin/env python3
"""Markdown table of `perfx bench-serve --json` results; the first file is the reference for ratios.

usage: bench/serve/report.py A.json [B.json ...]
"""
import json
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    rows = [
        ("completed / failed", lambda r: f"{r['completed']} / {r['failed']}", None),
        ("requests/s", lambda r: f"{r['requests_per_s']:.2f}", "requests_per_s"),
        ("output tokens/s", lambda r: f"{r['output_tokens_per_s']:.1f}", "output_tokens_per_s"),
        ("TTFT p50 (ms)", lambda r: f"{r['ttft_p50_s'] * 1e3:.1f}", "ttft_p50_s"),
        ("TTFT p99 (ms)", lambda r: f"{r['ttft_p99_s'] * 1e3:.1f}", "ttft_p99_s"),
        ("TPOT p50 (ms)", lambda r: f"{r['tpot_p50_s'] * 1e3:.2f}", "tpot_p50_s"),
        ("TPOT p99 (ms)", lambda r: f"{r['tpot_p99_s'] * 1e3:.2f}", "tpot_p99_s"),
        ("latency p50 (s)", lambda r: f"{r['latency_p50_s']:.3f}", "latency_p50_s"),
        ("latency p99 (s)", lambda r: f"{r['latency_p99_s']:.3f}", "latency_p99_s"),
        ("mean prompt / output tokens",
         lambda r: f"{r['mean_prompt_tokens']:.0f} / {r['mean_output_tokens']:.0f}", None),
    ]
    first = runs[0]
    print(f"clients {first['clients']}, {first['endpoint']}, prompt {first['prompt_tokens_requested']} "
          f"tokens requested, {first['max_tokens']} output tokens\n")
    labels = [r.get("label", p) for r, p in zip(runs, paths)]
    head = "| | " + " | ".join(labels)
    if len(runs) > 1:
        head += " | " + " | ".join(f"{labels[0]} / {l}" for l in labels[1:])
    print(head + " |")
    print("|---" * (1 + len(runs) + max(0, len(runs) - 1)) + "|")
    for name, fmt, key in rows:
        line = f"| {name} | " + " | ".join(fmt(r) for r in runs)
        if len(runs) > 1:
            ratios = []
            for r in runs[1:]:
                if key and r[key]:
                    ratios.append(f"{first[key] / r[key]:.2f}")
                else:
                    ratios.append("")
            line += " | " + " | ".join(ratios)
        print(line + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1:])
