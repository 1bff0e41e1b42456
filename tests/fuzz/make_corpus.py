#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/seed-*.

Every seed is written here from scratch (tiny GGUF / safetensors headers, hand-written JSON, Jinja
and text); nothing is copied from ../shared. Re-running rewrites the seed-* files and leaves the
regress-* reproducers alone. Usage: python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------------------------------ GGUF
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
           U64: "<Q", I64: "<q", F64: "<d"}
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(fmt[t], v)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne (ggml order), ggml type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    offs, data = [], b""
    for name, ne, typ, blob in tensors:
        data += b"\0" * ((-len(data)) % align)
        offs.append(len(data))
        data += blob
    for (name, ne, typ, blob), off in zip(tensors, offs):
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", typ, off)
    out += b"\0" * ((-len(out)) % align)
    return out + data


def f32s(*xs):
    return b"".join(struct.pack("<f", x) for x in xs)


spm_tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)] + \
    ["\u2581", "\u2581H", "ello", "\u2581Hello", "\u2581world", "o", "l"]
spm_kvs = [
    ("general.architecture", STRING, "llama"),
    ("general.name", STRING, "fuzz-seed"),
    ("general.alignment", U32, 32),
    ("llama.context_length", U32, 128),
    ("llama.embedding_length", U32, 64),
    ("llama.block_count", U32, 2),
    ("llama.feed_forward_length", U32, 128),
    ("llama.attention.head_count", U32, 4),
    ("llama.attention.head_count_kv", U32, 2),
    ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
    ("llama.rope.freq_base", F32, 10000.0),
    ("llama.rope.dimension_count", U32, 16),
    ("llama.rope.scaling.type", STRING, "linear"),
    ("llama.rope.scaling.factor", F32, 2.0),
    ("tokenizer.ggml.model", STRING, "llama"),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, spm_tokens)),
    ("tokenizer.ggml.scores", ARRAY, (F32, [float(-i) for i in range(len(spm_tokens))])),
    ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3] + [6] * 256 + [1] * 7)),
    ("tokenizer.ggml.bos_token_id", U32, 1),
    ("tokenizer.ggml.eos_token_id", U32, 2),
    ("tokenizer.ggml.add_bos_token", BOOL, 1),
    ("tokenizer.chat_template", STRING, "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
]
tensors = [
    ("token_embd.weight", [4, 2], 0, f32s(*range(8))),
    ("blk.0.attn_q.weight", [32, 1], 8, b"\0\x3c" + bytes(range(32))),  # Q8_0: f16 scale + 32 i8
    ("blk.0.attn_norm.weight", [4], 1, b"\0\x3c" * 4),                 # F16
    ("blk.0.ffn_down.weight", [256, 1], 12, b"\0" * 144),              # Q4_K (listed unsupported)
]
write("gguf", "llama-spm", gguf(spm_kvs, tensors))
write("gguf", "v2-no-tensors", gguf(spm_kvs[:6], [], version=2))
gpt2_tokens = [bytes([b]).decode("latin-1") for b in range(ord("a"), ord("z") + 1)] + \
    ["\u0120", "he", "ll", "hello", "<|end|>"]
gpt2_kvs = [
    ("general.architecture", STRING, "qwen2"),
    ("qwen2.context_length", U32, 64),
    ("qwen2.embedding_length", U32, 32),
    ("qwen2.block_count", U32, 1),
    ("qwen2.feed_forward_length", U32, 64),
    ("qwen2.attention.head_count", U32, 2),
    ("qwen2.attention.layer_norm_rms_epsilon", F32, 1e-6),
    ("tokenizer.ggml.model", STRING, "gpt2"),
    ("tokenizer.ggml.pre", STRING, "qwen2"),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, gpt2_tokens)),
    ("tokenizer.ggml.token_type", ARRAY, (I32, [1] * (len(gpt2_tokens) - 1) + [3])),
    ("tokenizer.ggml.merges", ARRAY, (STRING, ["h e", "l l", "he ll"])),
    ("tokenizer.ggml.eos_token_id", U32, len(gpt2_tokens) - 1),
    ("nested", ARRAY, (ARRAY, [(U8, [1, 2]), (I64, [-1])])),
    ("misc.f64", F64, 0.5), ("misc.i16", I16, -3), ("misc.u64", U64, 1 << 40),
]
write("gguf", "qwen2-gpt2", gguf(gpt2_kvs, [("output.weight", [32, 2], 30, b"\0" * 128)]))
full = gguf(spm_kvs, tensors)
write("gguf", "truncated", full[: len(full) // 2])
write("gguf", "bad-magic", b"GGUX" + full[4:64])
write("gguf", "big-endian", b"GGUF" + struct.pack(">I", 3) + b"\0" * 16)

# ----------------------------------------------------------------------------------- safetensors


def safetensors(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


write("safetensors", "two-tensors", safetensors({
    "__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
    "c": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [22, 22]}}, bytes(range(22))))
write("safetensors", "all-dtypes", safetensors({
    "i8": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]},
    "u8": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]},
    "i16": {"dtype": "I16", "shape": [1], "data_offsets": [2, 4]},
    "i32": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]},
    "i64": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
    "f64": {"dtype": "F64", "shape": [1], "data_offsets": [16, 24]}}, bytes(24)))
write("safetensors", "empty", safetensors({}, b""))
write("safetensors", "overlap", safetensors({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
write("safetensors", "bad-dtype", safetensors({
    "a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, bytes(2)))
write("safetensors", "truncated", safetensors({
    "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))

# ------------------------------------------------------------------------------------- hf_config
llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
         "rope_theta": 500000.0, "vocab_size": 512, "hidden_act": "silu",
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": [2, 3],
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
write("hf_config", "llama3", json.dumps(llama, indent=1))
q2 = dict(llama, model_type="qwen2", architectures=["Qwen2ForCausalLM"], rope_scaling=None,
          attention_bias=True, eos_token_id=7)
write("hf_config", "qwen2", json.dumps(q2))
q3 = {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32,
      "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 32, "mscale": 1.0},
      "max_position_embeddings": 128, "num_key_value_heads": None, "partial_rotary_factor": 0.5}
write("hf_config", "qwen3-yarn", json.dumps(q3))
mis = {"architectures": ["MistralForCausalLM"], "sliding_window": 4096, "hidden_size": 32,
       "num_attention_heads": 2, "rope_scaling": {"type": "linear", "factor": 2}}
write("hf_config", "mistral", json.dumps(mis))
awq = dict(llama, rope_scaling={"type": "dynamic", "factor": 2.0},
           quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128,
                                "zero_point": True, "version": "GEMM",
                                "modules_to_not_convert": ["lm_head"]})
write("hf_config", "awq", json.dumps(awq))
write("hf_config", "legacy-quant", json.dumps({"zero_point": True, "q_group_size": 64,
                                                "w_bit": 4, "version": "gemv"}))
write("hf_config", "bad-type", '{"model_type": "gpt_neox", "hidden_size": "big"}')
write("hf_config", "broken", '{"model_type": "llama", "hidden_size": 4096,')

# -------------------------------------------------------------------------------- tokenizer_json
bl_vocab = {"!": 0, "a": 1, "b": 2, "c": 3, "\u0120": 4, "ab": 5, "\u0120a": 6, "abc": 7}
byte_level = {
    "version": "1.0",
    "added_tokens": [{"id": 8, "content": "<|eot|>", "special": True, "lstrip": False,
                      "rstrip": False, "normalized": False, "single_word": False},
                     {"id": 9, "content": "<think>", "special": False, "normalized": True}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<|eot|>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": bl_vocab, "merges": ["a b", ["ab", "c"], "\u0120 a"],
              "ignore_merges": True},
}
write("tokenizer_json", "byte-level", json.dumps(byte_level))
write("tokenizer_json", "byte-level-config", json.dumps(byte_level) + "\0" + json.dumps(
    {"bos_token": {"content": "<|eot|>"}, "eos_token": "<|eot|>", "add_bos_token": True,
     "chat_template": "{{ messages }}",
     "added_tokens_decoder": {"10": {"content": "<extra>", "special": True}}}))
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "\u2581a": 6, "ab": 7}
for i in range(256):
    sp_vocab["<0x%02X>" % i] = 8 + i
spm_like = {
    "added_tokens": [{"id": 1, "content": "<s>", "special": True},
                     {"id": 2, "content": "</s>", "special": True, "lstrip": True, "rstrip": True}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "vocab": sp_vocab, "merges": ["\u2581 a", "a b"],
              "byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True},
}
write("tokenizer_json", "spm-byte-fallback", json.dumps(spm_like))
meta = dict(spm_like, normalizer=None, pre_tokenizer={
    "type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
    decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"})
write("tokenizer_json", "metaspace", json.dumps(meta))
misc = dict(byte_level, normalizer={"type": "Sequence", "normalizers": [
    {"type": "Lowercase"}, {"type": "Strip", "left": True, "right": True}, {"type": "NFD"}]},
    pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, {"type": "Punctuation"},
        {"type": "WhitespaceSplit"}, {"type": "Whitespace"}, {"type": "BertPreTokenizer"},
        {"type": "Split", "pattern": {"String": "b"}, "behavior": "MergedWithNext", "invert": True},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}]},
    decoder=None)
write("tokenizer_json", "misc-components", json.dumps(misc))
write("tokenizer_json", "unigram-rejected", '{"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}')
write("tokenizer_json", "broken", json.dumps(byte_level)[:200])

# -------------------------------------------------------------------------------------- tokenize
for i, t in enumerate([
        "Hello world", " leading space", "multi  space\tand\nnewline\r\n",
        "\u4f60\u597d\uff0c\u4e16\u754c", "emoji \U0001F999 llama \U0001F468\u200D\U0001F469",
        "<s>Hello</s> <|begin_of_text|><|eot_id|><|im_start|>user<|im_end|><think>",
        "123456789 3.14159 1,000,000", "caf\u00e9 cafe\u0301 \u00c5ngstr\u00f6m \u1112\u1161\u11ab",
        "don't I'll we've", "\u2581\u2581 <0x41> <unk>", "    \n\n\n   x"]):
    write("tokenize", "text-%02d" % i, t)
write("tokenize", "invalid-utf8", b"\xff\xfe\xc3\x28 \xe2\x82 \xf0\x9f\x98 ok \xed\xa0\x80")
write("tokenize", "ids", struct.pack("<8I", 1, 15043, 3186, 2, 128000, 151644, 13, 0xFFFFFFFF))

# --------------------------------------------------------------------------------- chat_template
default_msgs = [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "Hi <b>there</b>"},
                {"role": "assistant", "content": "Hello!", "reasoning_content": "think"},
                {"role": "user", "content": "2+2?"}]
templates = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
              "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}"
              "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
              "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
              "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
              "{% endif %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
               "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
               "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
               "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
               "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception("
               "'Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    "features": "{%- macro fmt(m, sep=': ') -%}{{ m.role | upper }}{{ sep }}{{ m.content }}"
                "{%- endmacro -%}{%- set ns = namespace(n=0, sys='') -%}"
                "{%- for m in messages if m.role != 'tool' -%}{%- set ns.n = ns.n + 1 -%}"
                "{{ fmt(m) }}{{ '\\n' if not loop.last else '' }}{%- if loop.length > 10 %}"
                "{% break %}{% endif -%}{%- endfor -%}"
                "{# comment #}{{ messages | length }} {{ messages[0]['content'][:3] }}"
                "{{ messages | map(attribute='role') | join(',') }} {{ (messages|last).content|tojson }}"
                "{% if tools is defined and tools is not none %}{{ tools | tojson(indent=2) }}{% endif %}"
                "{{ 'x' * 3 }}{{ [1, 2, 3][-1] }}{{ {'a': 1}.items() | list }}{{ '%s'|format(1) }}"
                "{{ 'A,B'.split(',') }}{{ ' s '.strip().startswith('s') }}{{ range(3)|list }}"
                "{% generation %}{{ ns.n }}{% endgeneration %}{{ 7 // 2 }}{{ 2 ** 3 }}{{ -1 | abs }}"
                "{{ 'abc' | replace('b', 'B') }}{{ none is none }}{{ 1 in [1] }}{{ 'a' ~ 1 }}"
                "{% filter upper %}low{% endfilter %}{{ enable_thinking | default(true) }}",
    "content-parts": "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
                     "{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}"
                     "{% endfor %}{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
                     "{{ c.function.name }}({{ c.function.arguments | tojson }}){% endfor %}"
                     "{% endif %}{% endfor %}",
    "syntax-error": "{% for m in messages %}{{ m.content }",
    "unsupported": "{% include 'x.j2' %}",
}
for name, t in templates.items():
    write("chat_template", name, t)
write("chat_template", "chatml-msgs", templates["chatml"] + "\0" + json.dumps(default_msgs))
write("chat_template", "parts-extra", templates["content-parts"] + "\0" + json.dumps({
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "enable_thinking": False}))
write("chat_template", "mistral-bad-roles", templates["mistral"] + "\0" + json.dumps(
    [{"role": "assistant", "content": "x"}]))

# -------------------------------------------------------------------------------- openai_request
reqs = {
    "chat": {"model": "m", "messages": default_msgs, "max_tokens": 16, "temperature": 0.7,
             "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 1, "stop": ["\n\n", "END"], "n": 2,
             "stream": True, "stream_options": {"include_usage": True}, "logprobs": True,
             "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": 0.1,
             "repetition_penalty": 1.1, "ignore_eos": False},
    "chat-tools": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "tools": [{"type": "function", "function": {"name": "f"}}],
                   "chat_template_kwargs": {"enable_thinking": False},
                   "add_generation_prompt": False, "max_completion_tokens": 5},
    "completion": {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "echo": True,
                   "stop": "\n", "temperature": 0, "logit_bias": {}},
    "completion-list": {"prompt": ["a", "b", [1, 2, 3]], "logprobs": 2, "n": 1, "best_of": 1},
    "completion-ids": {"prompt": [1, 15043, 3186], "max_tokens": None, "seed": 42},
    "tokenize": {"prompt": "Hello world", "add_special_tokens": False, "with_pieces": True},
    "tokenize-content": {"content": "Hi", "add_special": True},
    "tokenize-chat": {"messages": [{"role": "user", "content": "Hi"}], "with_pieces": True},
    "detokenize": {"tokens": [1, 15043, 3186, 31999]},
    "bad-values": {"messages": "nope", "prompt": [], "n": 99, "temperature": -1, "top_p": 0,
                   "tokens": [-1, 1.5, 99999999999]},
}
for name, r in reqs.items():
    write("openai_request", name, json.dumps(r))
write("openai_request", "not-object", "[1, 2, 3]")
write("openai_request", "broken", '{"messages": [{"role": "user", "content": "Hi"}')

# ---------------------------------------------------------------------------------- stop_strings


def stop_seed(stops, chunks):
    return bytes([len(stops) - 1]) + b"\xff".join(
        [s.encode() for s in stops] + [c.encode() for c in chunks])


write("stop_strings", "simple", stop_seed(["END"], ["Hello E", "N", "D world"]))
write("stop_strings", "overlap", stop_seed(["abc", "b", "\n\n"], ["a", "xa", "bc", "\n", "\n"]))
write("stop_strings", "no-stop", stop_seed(["zzz", ""], ["hello ", "world", "zz"]))
write("stop_strings", "utf8", stop_seed(["\u4e16\u754c", "<|im_end|>"], ["\u4f60\u597d\u4e16", "\u754c!"]))
write("stop_strings", "four", stop_seed(["aa", "aaa", "ab", "ba"], ["a", "a", "b", "a"]))
