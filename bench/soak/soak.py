#!/usr/bin/env python3
"""Soak test for `perfx serve` (issue 13; not run in CI). Python 3 standard library only.

Starts `perfx serve` on a model with a KV cache small enough to force preemption, then for
--duration seconds runs --clients concurrent clients that send a mix of requests:

  * non-streamed and streamed completions and chat completions (max_tokens 1..32, some n=2),
  * prompts that share one of a few long prefixes (prefix caching) plus a random tail,
  * streams that the client abandons after the first few events (a disconnect mid-stream),

while another thread sends one malformed request every --malformed-every seconds (each expects a
specific 4xx status) and a sampler reads the server's RSS, thread count (/proc/PID/status) and open
file descriptors (/proc/PID/fd) every --sample-every seconds, plus a few /metrics gauges.

Every request is classified:
  ok          the expected response (200 with choices; a stream ending with finish_reason and
              [DONE]; a disconnect that got its first events; a malformed request's exact 4xx)
  rejected    429 queue full (not expected with the default flags; counted, not lost)
  errored     any other status or a malformed response body
  lost        the connection failed or closed before a complete response
  hung        no byte for --client-timeout seconds

At the end (clients stopped, server idle) it checks /metrics: perfx_kv_blocks_used must be 0 and
perfx_running_sequences 0. It prints a summary, writes the samples to --csv and a JSON summary
to --json, and exits 0 only when every acceptance check passed:
  requests >= --min-requests, lost == hung == errored == 0, KV blocks in use at the end == 0,
  RSS at the end <= 1.05 x RSS at --rss-baseline-s (default 300 s), threads min == max (once
  the connection pool runs),
  open fds after the load == open fds before it.
"""

import argparse
import csv
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

PREFIXES = [
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them,",
    "Blessed is the man that walketh not in the counsel of the ungodly, nor standeth in the way of "
    "sinners, nor sitteth in the seat of the scornful.",
    "Now these are the generations of the sons of Noah, Shem, Ham, and Japheth: and unto them were "
    "sons born after the flood.",
]
TAILS = ["And", "Then", "For", "But the", "And it came to pass", "Behold", "Thus saith", "He"]

# (method, path, body, expected status, what it tests)
MALFORMED = [
    ("POST", "/v1/completions", '{"prompt": ', 400, "truncated JSON"),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": "many"}', 400, "max_tokens type"),
    ("POST", "/v1/completions", '{"prompt": "a", "n": 1000}', 400, "n out of range"),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": 100000}', 400, "context exceeded"),
    ("POST", "/v1/completions", '{"model": "/etc/passwd", "prompt": "a"}', 404, "model as a path"),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": 7}]}', 400,
     "content type"),
    ("POST", "/v1/embeddings", '{"input": "x"}', 404, "unknown route"),
    ("GET", "/v1/completions", "", 405, "wrong method"),
    ("POST", "/v1/completions", '[1, 2, 3]', 400, "body not an object"),
    ("RAW", "", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + "a" * 9000 + "\r\n\r\n", 431,
     "header line over 8 KiB"),
    ("RAW", "", "\r\n\r\n", 0, "stray empty lines, then close (crashed the server before)"),
]


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {k: 0 for k in ("sent", "ok", "rejected", "errored", "lost", "hung",
                                 "stream", "nonstream", "disconnect", "malformed", "chat")}
        self.examples = []  # first few problems, for the report

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n

    def problem(self, kind, what):
        with self.lock:
            self.c[kind] += 1
            if len(self.examples) < 20:
                self.examples.append(f"{kind}: {what}")


def read_metrics(port, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in body.splitlines():
        m = re.match(r"^([a-z_]+) ([-+0-9.eInf]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def proc_sample(pid):
    rss_kib = threads = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kib, threads, fds


def one_request(port, rng, counters, args):
    """Sends one generated request and classifies the outcome."""
    chat = rng.random() < 0.3
    stream = rng.random() < 0.5
    disconnect = stream and rng.random() < 0.3
    prompt = rng.choice(PREFIXES) + " " + rng.choice(TAILS)
    body = {"max_tokens": rng.randint(1, 32), "temperature": rng.choice([0, 0.8]),
            "seed": rng.randint(0, 1 << 30)}
    if disconnect:
        body["max_tokens"] = 64 + rng.randint(0, 64)
        body["ignore_eos"] = True
    if rng.random() < 0.1 and not disconnect:
        body["n"] = 2
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
        counters.add("chat")
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    if stream:
        body["stream"] = True
    counters.add("stream" if stream else "nonstream")
    if disconnect:
        counters.add("disconnect")
    counters.add("sent")
    what = f"{path} stream={stream} disconnect={disconnect}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=args.client_timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status == 429:
            resp.read()
            counters.add("rejected")
            return
        if resp.status != 200:
            counters.problem("errored", f"{what}: HTTP {resp.status} {resp.read()[:200]!r}")
            return
        if not stream:
            j = json.loads(resp.read())
            n = body.get("n", 1)
            if len(j.get("choices", [])) != n or any(c.get("finish_reason") is None
                                                     for c in j["choices"]):
                counters.problem("errored", f"{what}: bad body {j!r:.200}")
                return
            counters.add("ok")
            return
        events, finished, done = 0, 0, False
        stop_after = rng.randint(1, 4) if disconnect else None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if "error" in j:
                counters.problem("errored", f"{what}: error event {payload[:200]!r}")
                return
            events += 1
            finished += sum(1 for c in j.get("choices", []) if c.get("finish_reason"))
            if stop_after is not None and events >= stop_after:
                break  # abandon the stream: the connection is closed below
        if disconnect and events >= 1:
            counters.add("ok")
        elif done and finished == body.get("n", 1):
            counters.add("ok")
        else:
            counters.problem("lost", f"{what}: stream ended early (events={events} "
                                     f"finished={finished} done={done})")
    except socket.timeout:
        counters.problem("hung", f"{what}: no byte for {args.client_timeout} s")
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        counters.problem("lost", f"{what}: {type(e).__name__}: {e}")
    except ValueError as e:  # JSON
        counters.problem("errored", f"{what}: {e}")
    finally:
        conn.close()


def malformed_request(port, idx, counters, args):
    method, path, body, want, what = MALFORMED[idx % len(MALFORMED)]
    counters.add("sent")
    counters.add("malformed")
    if method == "RAW":  # bytes on a raw socket; want 0: no answer expected, the server survives
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=args.client_timeout) as s:
                s.sendall(body.encode())
                if want == 0:
                    counters.add("ok")
                    return
                got = s.recv(65536)
            if got.startswith(f"HTTP/1.1 {want} ".encode()):
                counters.add("ok")
            else:
                counters.problem("errored", f"malformed ({what}): got {got[:80]!r}, want {want}")
        except socket.timeout:
            counters.problem("hung", f"malformed ({what}): no byte for {args.client_timeout} s")
        except OSError as e:
            counters.problem("lost", f"malformed ({what}): {type(e).__name__}: {e}")
        return
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=args.client_timeout)
    try:
        conn.request(method, path, body or None, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != want:
            counters.problem("errored", f"malformed ({what}): HTTP {resp.status}, want {want}")
            return
        j = json.loads(data)
        if not isinstance(j.get("error", {}).get("message"), str):
            counters.problem("errored", f"malformed ({what}): no error message: {data[:200]!r}")
            return
        counters.add("ok")
    except socket.timeout:
        counters.problem("hung", f"malformed ({what}): no byte for {args.client_timeout} s")
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        counters.problem("lost", f"malformed ({what}): {type(e).__name__}: {e}")
    except ValueError as e:
        counters.problem("errored", f"malformed ({what}): {e}")
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perfx", default="build/perfx")
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--duration", type=float, default=1800, help="seconds of load (default 1800)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--malformed-every", type=float, default=3.0)
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--client-timeout", type=float, default=60.0)
    ap.add_argument("--rss-baseline-s", type=float, default=300.0,
                    help="the RSS growth check compares the end with the sample at this time")
    ap.add_argument("--min-requests", type=int, default=10000)
    ap.add_argument("--serve-args",
                    default="-c 256 --kv-cache-tokens 320 --max-batch 8 -t 1",
                    help="extra perfx serve flags (default: a 20-block KV cache, so that 8 "
                         "sequences of up to ~170 tokens preempt each other)")
    ap.add_argument("--csv", default="soak_samples.csv")
    ap.add_argument("--json", default="soak_summary.json")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wrapper", default="",
                    help="command words before perfx (e.g. 'heaptrack -o FILE'); the samples are "
                         "then of the wrapper's process")
    args = ap.parse_args()

    cmd = args.wrapper.split() + [args.perfx, "serve", "-m", args.model, "--host", "127.0.0.1",
                                  "--port", "0"]
    cmd += args.serve_args.split()
    log = open(args.csv + ".server.log", "w")
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    m, line = None, ""
    for _ in range(50):  # a wrapper (heaptrack) may print lines of its own first
        line = srv.stdout.readline()
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m or not line:
            break
    if not m:
        print(f"soak: the server did not start: {line!r}; see {args.csv}.server.log",
              file=sys.stderr)
        srv.kill()
        return 2
    port = int(m.group(1))
    pid = srv.pid
    print(f"soak: {' '.join(cmd)} (pid {pid}, port {port}), {args.duration:.0f} s, "
          f"{args.clients} clients", flush=True)

    counters = Counters()
    stop = threading.Event()
    samples = []
    t0 = time.monotonic()

    def sample(phase):
        rss, thr, fds = proc_sample(pid)
        try:
            mt = read_metrics(port)
        except Exception as e:  # noqa: BLE001 - a sample must not kill the soak
            mt = {}
            counters.problem("errored", f"/metrics: {e}")
        with counters.lock:
            c = dict(counters.c)
        row = {"t_s": round(time.monotonic() - t0, 1), "phase": phase, "rss_kib": rss,
               "threads": thr, "fds": fds,
               "kv_blocks_used": mt.get("perfx_kv_blocks_used", -1),
               "running": mt.get("perfx_running_sequences", -1),
               "preemptions": mt.get("perfx_preemptions_total", -1),
               "sent": c["sent"], "ok": c["ok"], "errored": c["errored"], "lost": c["lost"],
               "hung": c["hung"], "rejected": c["rejected"]}
        samples.append(row)
        return row

    idle_before = sample("idle-before")

    def sampler():
        while not stop.wait(args.sample_every):
            r = sample("load")
            print(f"soak: t={r['t_s']:7.1f}s rss={r['rss_kib']} KiB threads={r['threads']} "
                  f"fds={r['fds']} kv_used={r['kv_blocks_used']:.0f} sent={r['sent']} "
                  f"ok={r['ok']} err={r['errored']} lost={r['lost']} hung={r['hung']}",
                  flush=True)

    def client(k):
        rng = random.Random(args.seed * 1000 + k)
        while not stop.is_set():
            one_request(port, rng, counters, args)

    def malformer():
        i = 0
        while not stop.wait(args.malformed_every):
            malformed_request(port, i, counters, args)
            i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    threads += [threading.Thread(target=malformer), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    try:
        while time.monotonic() - t0 < args.duration and srv.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
    stop.set()
    for t in threads:
        t.join()
    load_s = time.monotonic() - t0

    # Idle: wait until nothing runs (abandoned streams are reaped within a step) and the server
    # has closed the connections the clients just closed (its fd count back to the idle one, or
    # 10 s: an idle keep-alive connection ends after 5 s), then check.
    server_alive = srv.poll() is None
    end = None
    if server_alive:
        for attempt in range(50):
            if end is not None:
                samples.pop()  # keep only the last idle-after sample
                time.sleep(0.2)
            end = sample("idle-after")
            if (end["running"] == 0 and end["kv_blocks_used"] == 0
                    and end["fds"] == idle_before["fds"]):
                break
    exit_status = None
    if server_alive:
        srv.send_signal(signal.SIGTERM)
        try:
            exit_status = srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            exit_status = "killed after 30 s"
    else:
        exit_status = f"died during the soak with status {srv.returncode}"

    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(samples[0].keys()))
        w.writeheader()
        w.writerows(samples)

    c = counters.c
    load = [s for s in samples if s["phase"] == "load"]
    base = None
    for s in load:
        if s["t_s"] >= args.rss_baseline_s:
            base = s
            break
    if base is None and load:
        base = load[0]
    rss_end = end["rss_kib"] if end else None
    rss_growth = (rss_end / base["rss_kib"] - 1.0) if (base and rss_end) else None
    # Threads from the first load sample on: httplib starts its connection pool (a fixed number of
    # threads: max batch + max queue + 32) only after the "listening" line.
    thr = [s["threads"] for s in samples if s["phase"] != "idle-before"]
    fds = [s["fds"] for s in samples]
    summary = {
        "command": " ".join(cmd), "duration_s": round(load_s, 1), "clients": args.clients,
        "requests_sent": c["sent"], "ok": c["ok"], "errored": c["errored"],
        "rejected_429": c["rejected"], "lost": c["lost"], "hung": c["hung"],
        "streamed": c["stream"], "non_streamed": c["nonstream"], "chat": c["chat"],
        "disconnects": c["disconnect"], "malformed": c["malformed"],
        "requests_per_s": round(c["sent"] / load_s, 2),
        "preemptions": end["preemptions"] if end else None,
        "kv_blocks_used_end": end["kv_blocks_used"] if end else None,
        "running_end": end["running"] if end else None,
        "rss_kib_start": idle_before["rss_kib"],
        "rss_kib_baseline": base["rss_kib"] if base else None,
        "rss_baseline_t_s": base["t_s"] if base else None,
        "rss_kib_end": rss_end,
        "rss_growth_pct": round(100 * rss_growth, 2) if rss_growth is not None else None,
        "threads_min": min(thr), "threads_max": max(thr),
        "fds_min": min(fds), "fds_max": max(fds),
        "fds_idle_before": idle_before["fds"], "fds_idle_after": end["fds"] if end else None,
        "server_exit_status": exit_status,
        "problems": counters.examples,
    }
    checks = {
        f"requests >= {args.min_requests}": c["sent"] >= args.min_requests,
        "zero lost": c["lost"] == 0,
        "zero hung": c["hung"] == 0,
        "zero errored (every malformed request got its 4xx)": c["errored"] == 0,
        "0 KV blocks in use at the end": end is not None and end["kv_blocks_used"] == 0,
        "RSS growth <= 5% after the baseline": rss_growth is not None and rss_growth <= 0.05,
        "threads flat (min == max once serving)": min(thr) == max(thr),
        "fds back to the idle count": end is not None and end["fds"] == idle_before["fds"],
        "server exited 0 on SIGTERM": exit_status == 0,
    }
    summary["checks"] = checks
    summary["pass"] = all(checks.values())
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=2)
    print("\nsoak summary")
    for k, v in summary.items():
        if k not in ("checks", "problems"):
            print(f"  {k}: {v}")
    for p in counters.examples:
        print(f"  problem: {p}")
    for k, v in checks.items():
        print(f"  [{'PASS' if v else 'FAIL'}] {k}")
    print(f"soak: {'PASS' if summary['pass'] else 'FAIL'}; samples in {args.csv}, "
          f"summary in {args.json}")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
