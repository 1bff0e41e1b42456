#!/usr/bin/env python3
"""Check a GGUF written by hf_to_gguf.py against our engine and the reference greedy ids, using an already
built llama.cpp (this script never fetches or builds it). python3 standard library only.

  python3 bench/compare/check_gguf.py --llama-bin DIR --gguf /work/peer/default-f32.gguf \
      [--model-dir models/default] [--perfx build-peer/perfx] [--n 64]

1. tokenizer: `perfx tokenize -m MODEL_DIR` ids == `llama-tokenize -m GGUF` ids for a set of strings
   (ASCII, punctuation, runs of spaces/newlines/tabs, digits, non-ASCII, a long slice of heldout.txt);
2. greedy ids: llama-server (bound to 127.0.0.1, random free port) /completion with temperature 0 and
   return_tokens, for every prompt of MODEL_DIR/reference_greedy.json; reports the number of leading
   generated ids equal to the transformers reference and the first divergence with its reference logit margin;
3. perfx on the GGUF: `perfx run -m GGUF --temp 0` text == `perfx run -m MODEL_DIR --temp 0` text.
Exit status 1 if the tokenizer or the greedy prefix check (--min-match ids, default 39) fails.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def sh(cmd):
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise RuntimeError("failed: %s" % " ".join(cmd))
    return p.stdout


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model-dir", default=os.path.join(REPO, "models", "default"))
    ap.add_argument("--perfx", default=os.path.join(REPO, "build-peer", "perfx"))
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--min-match", type=int, default=39)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    ok = True

    # 1. tokenizer
    with open(os.path.join(args.model_dir, "heldout.txt"), encoding="utf-8") as f:
        held = f.read()
    strings = ["In the beginning", "And the LORD said unto Moses", "Hello, world! It's 2024 -- don't   stop...  ok?",
               "a\tb\n\nc   \n  d", "x  \n\n\n  y'S 'll don't I'M", "emoji \U0001F600 and \u4e2d\u6587 and \r\n crlf",
               "   ", "\n", "12,345.67 $%^&*()", "\u00fcn\u00efc\u00f6d\u00e9 caf\u00e9", held[:3000], held[50000:56000]]
    n_ok = 0
    for s in strings:
        a = [int(x) for x in sh([args.perfx, "tokenize", "-m", args.model_dir, "-p", s]).split()]
        out = sh([os.path.join(args.llama_bin, "llama-tokenize"), "-m", args.gguf, "-p", s, "--ids", "--log-disable",
                  "--no-escape"])
        b = json.loads(out.strip().splitlines()[-1])
        if a == b:
            n_ok += 1
        else:
            ok = False
            print("tokenizer MISMATCH for %r:\n  perfx %s\n  llama %s" % (s[:60], a[:30], b[:30]))
    print("tokenizer: %d/%d strings give identical ids (BOS included)" % (n_ok, len(strings)))

    # 2. greedy ids through llama-server on loopback
    with open(os.path.join(args.model_dir, "reference_greedy.json")) as f:
        refs = json.load(f)
    port = free_port()
    srv = subprocess.Popen([os.path.join(args.llama_bin, "llama-server"), "-m", args.gguf, "--host", "127.0.0.1",
                            "--port", str(port), "-t", str(args.threads), "-c", "512", "-np", "1", "--no-webui"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001
                if srv.poll() is not None:
                    raise RuntimeError("llama-server exited: " + srv.stderr.read().decode()[-2000:])
            time.sleep(0.2)
        for r in refs:
            tok = post(port, "/tokenize", {"content": r["prompt"], "add_special": True})["tokens"]
            res = post(port, "/completion", {"prompt": r["prompt"], "n_predict": args.n, "temperature": 0,
                                             "top_k": 1, "return_tokens": True, "cache_prompt": False,
                                             "ignore_eos": True, "seed": random.randint(0, 1 << 30)})
            got = res["tokens"]
            ref = r["generated_ids"][:args.n]
            m = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), min(len(got), len(ref)))
            line = "greedy %r: prompt ids %s (ref %s); %d/%d generated ids equal the transformers reference" % (
                r["prompt"], tok, r["prompt_ids"], m, len(ref))
            if m < len(ref):
                line += "; first divergence at %d (ref logit margin there %.4f)" % (m, r["logit_margins"][m])
            print(line)
            if tok != r["prompt_ids"] or m < min(args.min_match, len(ref)):
                ok = False
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()

    # 3. perfx on the GGUF vs perfx on the HF folder
    for r in refs:
        cmd = ["run", "-p", r["prompt"], "--temp", "0", "-n", str(args.n), "--ignore-eos", "-t", str(args.threads)]
        a = sh([args.perfx] + cmd[:1] + ["-m", args.model_dir] + cmd[1:])
        b = sh([args.perfx] + cmd[:1] + ["-m", args.gguf] + cmd[1:])
        print("perfx %r: GGUF text %s HF-folder text; HF-folder text %s reference text" % (
            r["prompt"], "==" if a == b else "!=", "==" if a.rstrip("\n") == r["text"] else "!="))
    print("RESULT: %s" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
