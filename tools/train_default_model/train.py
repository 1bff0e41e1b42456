#!/usr/bin/env python3
"""Train PerfXLLM's small default model: a byte-level BPE tokenizer and an 8-layer Llama on the
King James Bible (Debian package bible-kjv-text 4.38, public domain).

Input : the verse dump made by tools/train_default_model/prepare_data.sh
        (one verse per line, "Ge1:1 In the beginning ...", canonical order).
Output: --out (default models/default/): config.json, generation_config.json, model.safetensors (bf16),
        tokenizer.json, tokenizer_config.json, calib.txt, heldout.txt, loss_curve.png, MODEL_CARD.md,
        reference_greedy.json, reference_ppl.json, train_log.json.

Split (by chapter, deterministic): the 1189 chapters in canonical order get index i;
  i % 20 == 10 -> held out (never trained on, never used for model selection) -> heldout.txt
  i % 20 == 5  -> validation (early stopping / schedule selection)
  otherwise    -> train;  calib.txt = the train chapters with i % 20 == 15.
Text files hold one verse per line, chapters separated by one blank line.

Training: each chapter is one document  <|begin_of_text|> verses... <|end_of_text|>; documents are
concatenated and random 512-token windows are drawn (batch 64 x 512). AdamW, warmup + cosine, bf16 autocast.
Because the corpus is small (~1M tokens) the model overfits after some epochs. The script therefore trains a
few runs from the same seed -- cosine schedules of different length (in epochs) with a training-only residual
dropout (forward hooks; the saved model is plain Llama) -- each with early stopping on validation loss, and
keeps the checkpoint with the lowest validation loss -- all within --time-budget seconds.

Reference outputs (for the C++ engine) are computed from the SAVED bf16 checkpoint loaded in float32 on the
CPU with eager attention: plain argmax loop without KV cache, 64 new tokens, EOS does not stop.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import sys
import time

import torch
import torch.nn.functional as F

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
GREEDY_PROMPTS = ["In the beginning", "And the LORD said unto Moses"]
SAMPLE_PROMPTS = ["In the beginning", "And the LORD said unto Moses", "The LORD is my shepherd",
                  "Blessed are the", "For God so loved"]


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ------------------------------------------------------------------------------------------------ data


def read_chapters(path):
    chapters = {}
    order = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = VERSE_RE.match(line)
            if not m:
                raise ValueError(f"unparsable verse line: {line[:80]!r}")
            key = (m.group(1), int(m.group(2)))
            if key not in chapters:
                chapters[key] = []
                order.append(key)
            chapters[key].append(m.group(4).strip())
    return [(k, "\n".join(chapters[k]) + "\n") for k in order]


def split_chapters(chapters):
    train, val, held, calib = [], [], [], []
    for i, (key, text) in enumerate(chapters):
        r = i % 20
        if r == 10:
            held.append((key, text))
        elif r == 5:
            val.append((key, text))
        else:
            train.append((key, text))
            if r == 15:
                calib.append((key, text))
    return train, val, held, calib


# ------------------------------------------------------------------------------------------------ tokenizer


def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    assert (bos_id, eos_id) == (0, 1), (bos_id, eos_id)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1", special_tokens=[(BOS, bos_id)])
    return tok


def write_tokenizer_config(out, model_max_length):
    added = {}
    for i, t in enumerate([BOS, EOS]):
        added[str(i)] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                         "special": True}
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def encode_docs(tok, docs):
    """[BOS] + text + [EOS] per document, concatenated."""
    encs = tok.encode_batch([d for _, d in docs], add_special_tokens=False)
    ids = []
    for e in encs:
        ids.append(0)
        ids.extend(e.ids)
        ids.append(1)
    return torch.tensor(ids, dtype=torch.int64)


# ------------------------------------------------------------------------------------------------ model


def make_config(vocab_size, ctx, attn="sdpa"):
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=ctx,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu", initializer_range=0.02,
                      bos_token_id=0, eos_token_id=1, pad_token_id=None, attention_bias=False, mlp_bias=False,
                      use_cache=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    try:
        cfg._attn_implementation = attn
    except Exception as e:
        log("could not set attn implementation:", e)
    return cfg


def n_params(model):
    seen, n = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            n += p.numel()
    return n


@torch.no_grad()
def eval_loss(model, ids, ctx, batch, autocast=True):
    """Mean next-token NLL over non-overlapping ctx windows of the id stream (every token but the first
    of each window is predicted from its prefix inside the window)."""
    model.eval()
    n = (ids.numel() - 1) // ctx
    xs = ids[: n * ctx].view(n, ctx)
    ys = ids[1: n * ctx + 1].view(n, ctx)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        x, y = xs[i:i + batch], ys[i:i + batch]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and x.is_cuda):
            logits = model(input_ids=x).logits
        tot += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        cnt += y.numel()
    # the tail that does not fill a window
    rest = ids[n * ctx:]
    if rest.numel() > 1:
        x, y = rest[:-1][None], rest[1:][None]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and x.is_cuda):
            logits = model(input_ids=x).logits
        tot += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        cnt += y.numel()
    model.train()
    return tot / cnt


def lr_at(step, total, peak, warmup, min_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def add_dropout(model, p):
    """Training-only dropout on the embedding output and on every attention / MLP block output (before the
    residual add), via forward hooks, so the saved architecture and config stay plain Llama."""
    if p <= 0:
        return []

    def hook(mod, inp, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, mod.training),) + tuple(out[1:])
        return F.dropout(out, p, mod.training)

    hs = [model.model.embed_tokens.register_forward_hook(hook)]
    for layer in model.model.layers:
        hs.append(layer.self_attn.register_forward_hook(hook))
        hs.append(layer.mlp.register_forward_hook(hook))
    return hs


def train_run(args, cfg, train_ids, val_ids, epochs, dropout, deadline, dev, step_time_hint):
    from transformers import LlamaForCausalLM

    B, T = args.batch, args.ctx
    steps = max(60, int(round(epochs * train_ids.numel() / (B * T))))
    if step_time_hint is not None:
        need = steps * step_time_hint * 1.15 + 5
        if time.time() + need > deadline:
            log(f"skip run epochs={epochs} dropout={dropout}: needs ~{need:.0f}s, {deadline - time.time():.0f}s left")
            return None
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg).to(dev)
    model.train()
    add_dropout(model, dropout)
    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=(dev.type == "cuda"))
    g = torch.Generator().manual_seed(args.seed + 1)
    eval_every = max(10, steps // 40)
    offs = torch.arange(T + 1, device=dev)
    hist = {"epochs": epochs, "dropout": dropout, "steps_planned": steps, "eval_every": eval_every, "train": [], "val": []}
    best, best_ref, best_state, best_step, bad = float("inf"), float("inf"), None, -1, 0
    acc, acc_n = torch.zeros((), device=dev), 0
    t0 = time.time()
    stopped = "completed"
    for step in range(steps):
        lr = lr_at(step, steps, args.lr, args.warmup, args.min_lr_ratio)
        for grp in opt.param_groups:
            grp["lr"] = lr
        ix = torch.randint(0, train_ids.numel() - T - 1, (B,), generator=g).to(dev)
        w = train_ids[ix[:, None] + offs]
        x, y = w[:, :-1], w[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        acc += loss.detach()
        acc_n += 1
        last = step == steps - 1
        if (step + 1) % eval_every == 0 or last:
            tr = (acc / acc_n).item()
            acc.zero_()
            acc_n = 0
            va = eval_loss(model, val_ids, T, B)
            hist["train"].append([step + 1, tr])
            hist["val"].append([step + 1, va])
            el = time.time() - t0
            log(f"  epochs={epochs} dropout={dropout} step {step + 1}/{steps} lr {lr:.2e} train {tr:.4f} val {va:.4f} "
                f"({el:.0f}s, {el / (step + 1) * 1000:.1f} ms/step)")
            if va < best:
                best, best_step = va, step + 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if va < best_ref - 1e-3:
                best_ref, bad = va, 0
            else:
                bad += 1
            if bad >= args.patience:
                stopped = f"early stop at step {step + 1} (no val improvement for {bad} evals)"
                break
            if time.time() > deadline:
                stopped = f"time budget reached at step {step + 1}"
                break
    el = time.time() - t0
    hist.update(best_val=best, best_step=best_step, stopped=stopped, seconds=el,
                ms_per_step=el / max(1, step + 1) * 1000, steps_done=step + 1)
    log(f"run epochs={epochs} dropout={dropout}: best val {best:.4f} at step {best_step}; {stopped}; {el:.0f}s")
    return hist, best_state, el / max(1, step + 1)


# ------------------------------------------------------------------------------------------------ reference


@torch.no_grad()
def greedy(model, ids, n_new):
    ids = list(ids)
    gen, margins = [], []
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([ids], dtype=torch.int64)).logits[0, -1].float()
        top2 = torch.topk(logits, 2)
        nxt = int(top2.indices[0])
        margins.append(float(top2.values[0] - top2.values[1]))
        gen.append(nxt)
        ids.append(nxt)
    return gen, margins


@torch.no_grad()
def sample(model, ids, n_new, temperature, top_k, gen, dev):
    ids = list(ids)
    out = []
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([ids[-512:]], dtype=torch.int64, device=dev)).logits[0, -1].float()
        v, ix = torch.topk(logits / temperature, top_k)
        p = torch.softmax(v, -1).cpu()
        nxt = int(ix[int(torch.multinomial(p, 1, generator=gen))])
        if nxt == 1:
            break
        out.append(nxt)
        ids.append(nxt)
    return out


def load_saved_fp32(out, dev):
    from transformers import AutoModelForCausalLM

    try:
        m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32, attn_implementation="eager")
    return m.to(dev).eval()


def plot(runs, chosen, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, h in enumerate(runs):
        c = colors[i % len(colors)]
        lab = f"{h['epochs']:g} ep, dropout {h['dropout']:g}" + (" (chosen)" if h is chosen else "")
        tr = h["train"]
        va = h["val"]
        ax.plot([s for s, _ in tr], [l for _, l in tr], "--", color=c, alpha=0.6, lw=1)
        ax.plot([s for s, _ in va], [l for _, l in va], "-", color=c, lw=2 if h is chosen else 1, label=lab)
        if h is chosen:
            ax.axvline(h["best_step"], color=c, ls=":", lw=1)
    ax.set_xlabel("step (batch 64 x 512 tokens)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("default model: train (dashed) and validation (solid) loss")
    ax.set_ylim(bottom=max(0.0, min(l for h in runs for _, l in h["train"]) - 0.2),
                top=min(6.0, max(l for h in runs for _, l in h["val"][1:] or h["val"]) + 0.3))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=".data/kjv-verses.txt")
    ap.add_argument("--out", default="models/default")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--runs", nargs="+", default=["16:0", "32:0.1", "64:0.2", "96:0.3"],
                    help="EPOCHS:DROPOUT runs to try, in order: cosine schedule length in epochs and training-only "
                         "residual dropout (each skipped if it would overrun the time budget)")
    ap.add_argument("--patience", type=int, default=6, help="evals without val improvement before stopping a run")
    ap.add_argument("--time-budget", type=float, default=300, help="seconds of training wall time in total")
    args = ap.parse_args()
    cmdline = "python3 " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    t_start = time.time()

    import tokenizers
    import transformers

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    log("versions", versions)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    log("device", gpu)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    out = args.out
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        p = os.path.join(out, f)
        if os.path.isfile(p):
            os.remove(p)

    # ---- data
    chapters = read_chapters(args.data)
    n_verses = sum(t.count("\n") for _, t in chapters)
    log(f"{len(chapters)} chapters, {n_verses} verses")
    assert len(chapters) == 1189 and n_verses == 31102, "unexpected corpus"
    train_docs, val_docs, held_docs, calib_docs = split_chapters(chapters)
    assert chapters[0][0] == ("Ge", 1) and train_docs[0][0] == ("Ge", 1)
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write("\n".join(t for _, t in held_docs))
    with open(os.path.join(out, "calib.txt"), "w") as f:
        f.write("\n".join(t for _, t in calib_docs))
    sizes = {k: sum(len(t) for _, t in d) for k, d in
             [("train", train_docs), ("val", val_docs), ("heldout", held_docs), ("calib", calib_docs)]}
    log("split chars", sizes, "chapters", {k: len(d) for k, d in
                                           [("train", train_docs), ("val", val_docs), ("heldout", held_docs)]})

    # ---- tokenizer (trained on the train split only)
    tok = train_tokenizer([t for _, t in train_docs], args.vocab)
    assert tok.get_vocab_size() == args.vocab, tok.get_vocab_size()
    tok.save(os.path.join(out, "tokenizer.json"))
    write_tokenizer_config(out, args.ctx)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    train_ids, val_ids, held_ids = (encode_docs(tok, d) for d in (train_docs, val_docs, held_docs))
    log(f"tokens: train {train_ids.numel()} val {val_ids.numel()} heldout {held_ids.numel()} "
        f"({sizes['train'] / train_ids.numel():.2f} chars/token)")
    enc = tok.encode("In the beginning God created the heaven and the earth.")
    log("example encode", enc.ids, enc.tokens)
    assert enc.ids[0] == 0 and enc.ids.count(0) == 1
    assert tok.decode(enc.ids, skip_special_tokens=True) == "In the beginning God created the heaven and the earth."

    # ---- training
    train_ids, val_ids = train_ids.to(dev), val_ids.to(dev)
    cfg = make_config(args.vocab, args.ctx, "sdpa")
    deadline = time.time() + args.time_budget
    runs, best_state, chosen, step_time = [], None, None, None
    for spec in args.runs:
        ep, dp = (float(x) for x in spec.split(":"))
        r = train_run(args, cfg, train_ids, val_ids, ep, dp, deadline, dev, step_time)
        if r is None:
            continue
        hist, state, st = r
        step_time = st  # the latest run's ms/step (the first one includes CUDA warm-up)
        runs.append(hist)
        if chosen is None or hist["best_val"] < chosen["best_val"]:
            chosen, best_state = hist, state
        else:
            del state
        if time.time() > deadline:
            break
    train_seconds = sum(h["seconds"] for h in runs)
    log(f"chosen: epochs={chosen['epochs']} dropout={chosen['dropout']} best val {chosen['best_val']:.4f} at step {chosen['best_step']}")

    # ---- save (bf16)
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg)
    model.load_state_dict({k: v.to("cpu") for k, v in best_state.items()}, strict=True)
    nparam = n_params(model)
    model = model.to(torch.bfloat16)
    model.config.use_cache = True
    model.save_pretrained(out)
    cpath = os.path.join(out, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["torch_dtype"] = "bfloat16"
    if "dtype" in c:
        c["dtype"] = "bfloat16"
    c["bos_token_id"], c["eos_token_id"] = 0, 1
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": False,
                   "transformers_version": transformers.__version__}, f, indent=2)
        f.write("\n")
    st_path = os.path.join(out, "model.safetensors")
    st_size = os.path.getsize(st_path)
    from safetensors.torch import load_file

    saved = load_file(st_path)
    log(f"model.safetensors {st_size} bytes, {len(saved)} tensors, dtypes {sorted({str(v.dtype) for v in saved.values()})}")
    assert st_size <= 16 * 1024 * 1024, st_size
    assert "lm_head.weight" not in saved or torch.equal(saved["lm_head.weight"], saved["model.embed_tokens.weight"])

    # ---- evaluate the saved checkpoint in fp32 (what the engine runs)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m32 = load_saved_fp32(out, dev)
    sd32 = m32.state_dict()
    for k, v in saved.items():
        assert k in sd32 and torch.equal(sd32[k].detach().cpu(), v.float()), k
    log("saved bf16 tensors == fp32-loaded parameters: ok")
    final = {}
    for name, ids in [("train", train_ids), ("val", val_ids), ("heldout", held_ids.to(dev))]:
        final[name] = eval_loss(m32, ids, args.ctx, 32, autocast=False)
    log("final fp32 losses (chapter documents with BOS/EOS, 512 windows):", final)
    # heldout.txt as one text: tokenizer adds BOS, non-overlapping 512-token windows, mean NLL
    held_txt = open(os.path.join(out, "heldout.txt")).read()
    hid = torch.tensor(tok.encode(held_txt).ids, dtype=torch.int64)
    ppl_nll = eval_loss(m32, hid.to(dev), args.ctx, 32, autocast=False)
    ref_ppl = {"file": "heldout.txt", "procedure": "ids = tokenizer(heldout.txt) (BOS prepended by the "
               "post-processor); non-overlapping windows ids[k*512 : k*512+513] (the last one shorter); inside each "
               "window every token after the first is predicted from the window prefix; mean NLL over all "
               "predicted tokens; fp32, from the saved bf16 weights",
               "n_ctx": args.ctx, "n_tokens": int(hid.numel()), "mean_nll": ppl_nll, "ppl": math.exp(ppl_nll)}
    with open(os.path.join(out, "reference_ppl.json"), "w") as f:
        json.dump(ref_ppl, f, indent=2)
        f.write("\n")
    log("heldout.txt perplexity", ref_ppl["ppl"])

    # ---- greedy reference: CPU fp32 eager, no cache
    mcpu = load_saved_fp32(out, torch.device("cpu"))
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    try:
        from transformers import AutoTokenizer

        hft = AutoTokenizer.from_pretrained(out)
        hf_ok = all(hft(p)["input_ids"] == tok.encode(p).ids for p in GREEDY_PROMPTS + SAMPLE_PROMPTS)
    except Exception as e:  # the reference does not depend on it; record only
        log("AutoTokenizer check failed:", repr(e))
        hf_ok = f"error: {e!r}"
    log("transformers AutoTokenizer ids == tokenizers ids:", hf_ok)
    refs = []
    for p in GREEDY_PROMPTS:
        pid = tok.encode(p).ids
        gen, margins = greedy(mcpu, pid, 64)
        refs.append({"prompt": p, "prompt_ids": pid, "generated_ids": gen,
                     "text": tok.decode(gen, skip_special_tokens=False),
                     "min_logit_margin": min(margins), "logit_margins": [round(m, 5) for m in margins]})
        log("greedy", repr(p), "->", repr(refs[-1]["text"]), f"(min margin {min(margins):.4f})")
    with open(os.path.join(out, "reference_greedy.json"), "w") as f:
        json.dump(refs, f, indent=1)
        f.write("\n")

    # ---- samples for the card
    g = torch.Generator().manual_seed(args.seed)
    samples = []
    for p in SAMPLE_PROMPTS:
        pid = tok.encode(p).ids
        gen_g, _ = greedy(mcpu, pid, 48) if p not in GREEDY_PROMPTS else (None, None)
        s = sample(m32, pid, 60, 0.8, 40, g, dev)
        samples.append({"prompt": p,
                        "greedy": tok.decode(gen_g) if gen_g is not None else
                        next(r["text"] for r in refs if r["prompt"] == p),
                        "sampled": tok.decode(s)})

    # ---- plot, logs, card
    plot(runs, chosen, os.path.join(out, "loss_curve.png"))
    train_log = {"args": vars(args), "command": cmdline, "versions": versions, "device": gpu, "runs": runs,
                 "chosen_epochs": chosen["epochs"], "chosen_dropout": chosen["dropout"], "final_fp32": final, "heldout_ppl": ref_ppl,
                 "params": nparam, "split_chars": sizes,
                 "tokens": {"train": int(train_ids.numel()), "val": int(val_ids.numel()),
                            "heldout": int(held_ids.numel())},
                 "hf_tokenizer_matches": hf_ok, "train_seconds": train_seconds,
                 "total_seconds": time.time() - t_start}
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(train_log, f, indent=1)
        f.write("\n")
    write_card(out, args, cmdline, versions, gpu, nparam, st_size, sizes, train_log, chosen, runs, final, ref_ppl,
               refs, samples, hf_ok)
    log("done in", f"{time.time() - t_start:.0f}s")


def write_card(out, args, cmdline, versions, gpu, nparam, st_size, sizes, tl, chosen, runs, final, ref_ppl, refs,
               samples, hf_ok):
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    L = []
    L += ["# PerfXLLM default model (`models/default`)", "",
          "A small Llama-architecture language model trained from scratch by this project, so that the engine has",
          "a real (non-random) model it can ship, test and benchmark without downloading anything.", "",
          "## Data", "",
          "- Source: the King James Version of the Bible (1611), as shipped in the Debian package",
          "  **bible-kjv-text 4.38** (read with the `bible` program of package bible-kjv 4.38). The KJV text is",
          "  in the public domain (its copyright expired; see the package's copyright file).",
          "- Extraction: `tools/train_default_model/prepare_data.sh` (`bible -f 'Gen1:1-Rev22:21'`): 31,102 verses",
          "  in 1,189 chapters, plain ASCII.",
          "- Split by chapter (index i of the chapter in canonical order): i % 20 == 10 held out (`heldout.txt`,",
          "  never trained on and not used for model selection), i % 20 == 5 validation, the rest training.",
          "  `calib.txt` (quantization calibration text) = the training chapters with i % 20 == 15.",
          f"- Characters: train {sizes['train']:,}, validation {sizes['val']:,}, held out {sizes['heldout']:,},"
          f" calib {sizes['calib']:,}.",
          f"- Tokens: train {tl['tokens']['train']:,}, validation {tl['tokens']['val']:,}, held out"
          f" {tl['tokens']['heldout']:,} (each chapter as `<|begin_of_text|>` text `<|end_of_text|>`).", "",
          "## Tokenizer", "",
          f"Byte-level BPE trained with `tokenizers` on the training split: vocab {args.vocab} (ids 0"
          " `<|begin_of_text|>` = BOS, 1 `<|end_of_text|>` = EOS, then the 256 byte symbols, then merges),",
          "ByteLevel pre-tokenizer (add_prefix_space false, use_regex true = GPT-2 regex), ByteLevel decoder,",
          "TemplateProcessing post-processor that prepends BOS to single sequences. `tokenizer_config.json` sets",
          f"add_bos_token true, model_max_length {args.ctx}. transformers' AutoTokenizer gives the same ids as the"
          f" raw tokenizer for the prompts below: {hf_ok}.", "",
          "## Model", "",
          "LlamaForCausalLM: hidden 256, intermediate 768 (SiLU-gated MLP), 8 layers, 4 attention heads of 64,",
          f"2 KV heads (GQA), vocab {args.vocab}, context {args.ctx}, RoPE theta 10000, RMSNorm eps 1e-5, tied input/output",
          f"embeddings. **{nparam:,} parameters** ({nparam / 1e6:.2f} M). Stored in bfloat16:"
          f" `model.safetensors` {st_size:,} bytes. Every linear's input width (256 or 768) is a multiple of 128,",
          "so the model can be AWQ-quantized with group size 128.", "",
          "## Training", "",
          f"- Command (from the repository root, on one {gpu}): `{cmdline}`",
          f"  (the device run goes through `tools/device/reference_run.sh`). Versions: {json.dumps(versions)}.",
          f"- Batch {args.batch} x {args.ctx} tokens of random windows over the concatenated training documents;"
          f" AdamW (betas 0.9/0.95, weight decay {args.weight_decay} on matrices), peak lr {args.lr}, {args.warmup}"
          f" warmup steps, cosine decay to {args.min_lr_ratio} x peak; bf16 autocast, fp32 master weights, grad clip"
          f" 1.0; seed {args.seed}.",
          "- Because the corpus is small the model starts to overfit after some epochs. The script trains"
          " several runs from the same seed -- cosine schedules of different length (in epochs), with a"
          " training-only dropout on the embedding and on each attention/MLP block output (forward hooks; the"
          " saved model is plain Llama) -- each with early stopping on validation loss, and keeps the"
          " checkpoint with the lowest validation loss:", ""]
    L += ["| schedule (epochs) | dropout | steps planned | steps run | best val loss | at step | stopped | seconds |",
          "|---|---|---|---|---|---|---|---|"]
    for h in runs:
        L.append(f"| {h['epochs']:g}{' (chosen)' if h is chosen else ''} | {h['dropout']:g} | {h['steps_planned']} |"
                 f" {h['steps_done']} |"
                 f" {h['best_val']:.4f} | {h['best_step']} | {h['stopped']} | {h['seconds']:.0f} |")
    L += ["", f"Total training wall time {tl['train_seconds']:.0f} s (budget {args.time_budget:.0f} s).", "",
          "![loss curve](loss_curve.png)", "",
          "## Results", "",
          "Losses of the saved bf16 checkpoint evaluated in fp32 (mean next-token NLL in nats over non-overlapping",
          "512-token windows of the chapter documents):", "",
          f"| split | loss | perplexity |", "|---|---|---|"]
    for k in ["train", "val", "heldout"]:
        L.append(f"| {k} | {final[k]:.4f} | {math.exp(final[k]):.2f} |")
    L += ["", f"`heldout.txt` read as one text (tokenizer adds one BOS; {ref_ppl['n_tokens']:,} tokens; 512-token"
          f" windows): mean NLL {ref_ppl['mean_nll']:.4f}, perplexity {ref_ppl['ppl']:.2f} -- recorded in"
          " `reference_ppl.json` with the exact procedure.", "",
          "## Reference outputs for the engine", "",
          "`reference_greedy.json`: for each prompt, `prompt_ids` (with the BOS the tokenizer adds) and the 64",
          "`generated_ids` of a plain argmax loop over transformers' logits (the saved bf16 weights loaded in",
          "float32, eager attention, CPU, no KV cache, EOS does not stop), plus the decoded `text` and the",
          "top-1/top-2 logit margin per step (`logit_margins`; a tiny margin means fp differences may flip it).", ""]
    for r in refs:
        L += [f"- **{r['prompt']}** -> {json.dumps(r['text'])} (smallest margin {r['min_logit_margin']:.3f})"]
    L += ["", "## Sample outputs", "",
          "Greedy (48-64 tokens) and sampled (temperature 0.8, top-k 40, up to 60 tokens, seeded) continuations:", ""]
    for s in samples:
        L += [f"**{s['prompt']}**", "", "- greedy: " + json.dumps(s["greedy"]),
              "- sampled: " + json.dumps(s["sampled"]), ""]
    L += ["## Limitations", "",
          "A 7M-parameter model trained on one book for a few minutes: it imitates KJV style and vocabulary,",
          "repeats itself under greedy decoding and has no knowledge beyond the text. It is meant for engine",
          "tests, demos and benchmarks, not as an assistant. GPU training is not bitwise reproducible",
          "(atomics in kernels); the reference outputs are defined by the saved checkpoint, not by retraining.", "",
          f"Generated by `tools/train_default_model/train.py` on {date}."]
    with open(os.path.join(out, "MODEL_CARD.md"), "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
