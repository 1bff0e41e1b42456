# Sourced (from the repository root) by the tools/device scripts that run the binaries packed by
# tools/device/pack_cuda_bins.sh: unpacks .devpack/bin.tar.xz into /tmp/devbin and puts the
# libraries the GPU machine lacks (.devpack/lib) and CUDA's on LD_LIBRARY_PATH. Sets ROOT (the
# repository root), B (the folder with perfx, perfx_opencl_check and tests/), OUT (kept if set,
# else /tmp/perfx_out; created), PERFX_SHARED_DIR (kept if set, else .devshared — the carried copy
# of ../shared's models — when the call carried it), SAN (compute-sanitizer) and T0 (the start,
# for BUDGET checks), and defines the helpers below.
ROOT=$PWD
mkdir -p /tmp/devbin
export LD_LIBRARY_PATH="$ROOT/.devpack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
tar -xJf "$ROOT/.devpack/bin.tar.xz" -C /tmp/devbin
B=/tmp/devbin/.devbin
OUT=${OUT:-/tmp/perfx_out}
mkdir -p "$OUT"
if [ -z "${PERFX_SHARED_DIR:-}" ] && [ -d "$ROOT/.devshared" ]; then
  export PERFX_SHARED_DIR=$ROOT/.devshared
fi
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
T0=$(date +%s)

# trace_bin: unpacks the trace build (.devpack/trace.tar.xz, tools/device/pack_trace.sh) into
# /tmp/devtrace and sets PT to its perfx_trace.
trace_bin() {
  mkdir -p /tmp/devtrace && tar -xJf "$ROOT/.devpack/trace.tar.xz" -C /tmp/devtrace
  PT=/tmp/devtrace/perfx_trace
}

# gtest_line LOG: a googletest binary's PASSED / FAILED / SKIPPED summary lines, on one line.
gtest_line() { grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]' "$1" | tr '\n' ' '; }

# cuda_suite DIR [DTYPES]: the CUDA conformance suite in each of DTYPES (default "f16 bf16") and
# the CUDA model tests (their '*cuda*' cases), logs in DIR (conf_DTYPE.log, model.log); one summary
# line each.
cuda_suite() {
  local dir=$1 dts=${2:-f16 bf16} dt
  for dt in $dts; do
    PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
      --gtest_filter='*cuda*' > "$dir/conf_$dt.log" 2>&1
    echo "conformance $dt rc=$?: $(gtest_line "$dir/conf_$dt.log")"
  done
  PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' \
    > "$dir/model.log" 2>&1
  echo "model tests rc=$?: $(gtest_line "$dir/model.log")"
}

# kernel_line LABEL RC LOG: a linear_kernels_test family's PASS / FAIL counts and first fatal line.
kernel_line() {
  printf "%-22s rc=%-3s pass %4s fail %3s %s\n" "$1" "$2" "$(grep -c '^PASS' "$3")" \
    "$(grep -c '^FAIL' "$3")" "$(grep -m1 -E '^FATAL|error' "$3" | cut -c1-150)"
}

# over_budget: whether BUDGET seconds (default 540) have passed since T0.
over_budget() { [ $(( $(date +%s) - T0 )) -gt "${BUDGET:-540}" ]; }

# tg_line LABEL BINARY MODEL: one tg128 (BINARY bench -m MODEL --device cuda -p 0 -n 128 -r 3),
# printed as "LABEL MODEL tg128: t/s ± sd"; skipped past the budget. Table in $OUT/tg_line.md.
tg_line() {
  over_budget && { echo "$1: skipped (budget)"; return; }
  timeout 90 "$2" bench -m "$3" --device cuda -p 0 -n 128 -r 3 > "$OUT/tg_line.md" 2>&1
  echo "$1 $3 tg128: $(grep tg128 "$OUT/tg_line.md" | awk -F'|' '{print $(NF-1)}')"
}

# ab_tg VAR "V1 V2 ...": tg128 (perfx bench -p 0 -n 128 -r 3) on the random Llama-2-7B and
# TinyLlama-1.1B shapes (MODELS overrides) with environment variable VAR set to each value in turn,
# interleaved, ROUNDS rounds (default 2); one line per run; what would start past the budget is
# skipped. Tables in $OUT/bench_MODEL_VAR_VALUE_rROUND.md.
ab_tg() {
  local var=$1 vals=$2 round m v f
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for m in ${MODELS:-llama-2-7b tinyllama-1.1b}; do
      for v in $vals; do
        over_budget && continue
        f="$OUT/bench_${m}_${var}_${v}_r$round.md"
        env "$var=$v" timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n 128 -r 3 \
          > "$f" 2>&1
        echo "$m $var=$v round $round: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
      done
    done
  done
}

# ab_b8 VAR "V1 V2 ...": batched decode, 8 sequences of tg32 on the random Llama-2-7B shape, per
# value of VAR (one run each, within the budget).
ab_b8() {
  local var=$1 vals=$2 v f
  for v in $vals; do
    over_budget && continue
    f="$OUT/bench_b8_${var}_$v.md"
    env "$var=$v" timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
      > "$f" 2>&1
    echo "7B batch 8 $var=$v: $(grep -E 'tg32' "$f" | awk -F'|' '{print $(NF-1)}')"
  done
}

# v3_checks ENV_ASSIGNMENT LABEL: linear_kernels_test ($B/lin, packed by pack_cuda_bins.sh) — the
# GEMV family's cases, the dispatcher and graph families with w4_gemv3 forced and ENV_ASSIGNMENT
# (e.g. PERFX_CUDA_GEMV3_XV=2) set, memcheck over the GEMV family's reduced set, then the w4_gemv3
# kernel bench (--bench-v3) and its table. Logs in $OUT.
v3_checks() {
  local env_set=$1 label=$2 fam T=$B/lin/linear_kernels_test
  timeout 90 "$T" --only gemv > "$OUT/test_gemv.log" 2>&1
  kernel_line gemv $? "$OUT/test_gemv.log"
  grep '^FAIL' "$OUT/test_gemv.log" | head -6 | cut -c1-200
  for fam in auto graph; do
    env PERFX_CUDA_W4_GEMV=v3 "$env_set" timeout 60 "$T" --only $fam > "$OUT/test_${fam}_v3.log" 2>&1
    kernel_line "$fam (v3, $label)" $? "$OUT/test_${fam}_v3.log"
  done
  timeout 90 "$SAN" --tool memcheck --error-exitcode 3 "$T" --quick --only gemv > "$OUT/memcheck.log" 2>&1
  echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log"))"
  timeout 150 "$T" --bench-v3 > "$OUT/bench_v3.log" 2>&1
  echo "bench rc=$?"
  grep -m1 "device-to-device" "$OUT/bench_v3.log"
  sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
}

# case_counts TAG "V1 V2 ...": PASS / FAIL counts of the GEMV family's cases labelled TAG + value
# (e.g. "/xv" "1 2" counts the "/xv1 " and "/xv2 " cases of $OUT/test_gemv.log).
case_counts() {
  local tag=$1 v
  for v in $2; do
    echo "  ${tag#/}$v cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c "$tag$v ") fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c "$tag$v ")"
  done
}

# attn_san TIMEOUT "TOOL..." [LABEL]: each compute-sanitizer TOOL (memcheck, racecheck, ...) over
# the attention kernel tests' --quick set ($B/attn), one summary line each (LABEL after --quick);
# logs $OUT/attn_TOOL.log.
attn_san() {
  local limit=$1 tools=$2 label=${3:-} tool
  for tool in $tools; do
    timeout "$limit" "$SAN" --tool $tool --error-exitcode 7 "$B/attn/attention_kernels_test" --quick \
      > "$OUT/attn_$tool.log" 2>&1
    echo "attention $tool --quick${label:+ $label} rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/attn_$tool.log" | tail -1)"
  done
}

# attn_checks: the attention kernel tests ($B/attn), memcheck and racecheck over their --quick
# set, the CUDA conformance suite in fp16 and bf16, memcheck over it (graphs off), the CUDA model
# tests; one line each, the first failures after. Logs in $OUT.
attn_checks() {
  local A=$B/attn/attention_kernels_test tool dt
  timeout 120 "$A" > "$OUT/attn_test.log" 2>&1
  echo "attention kernels rc=$?: $(grep -m1 SUMMARY "$OUT/attn_test.log")"
  grep -m4 '^\[FAIL\]' "$OUT/attn_test.log" | cut -c1-220
  attn_san 120 "memcheck racecheck"
  for dt in f16 bf16; do
    PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
      --gtest_filter='*cuda*' > "$OUT/conf_$dt.log" 2>&1
    echo "conformance $dt rc=$?: $(gtest_line "$OUT/conf_$dt.log")"
  done
  PERFX_TEST_DEVICE=cuda:0 PERFX_CUDA_GRAPHS=0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 \
    "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf_memcheck.log" 2>&1
  echo "conformance memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/conf_memcheck.log")"
  PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
  echo "model rc=$?: $(gtest_line "$OUT/model.log")"
  grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" | head -6 | cut -c1-220
}

# run_variants MODEL "LABEL=ENV[,ENV] ..." ROUNDS: perfx bench tg128 (-r 3) on random:MODEL once per
# variant per round, interleaved, each with its environment assignments; one line per run; what
# would start past the budget is skipped. Tables in $OUT/bench_MODEL_LABEL_rROUND.md.
run_variants() {
  local m=$1 variants=$2 rounds=$3 r v label envs f
  for r in $(seq 1 "$rounds"); do
    for v in $variants; do
      over_budget && continue
      label=${v%%=*}
      envs=${v#*=}
      f="$OUT/bench_${m}_${label}_r$r.md"
      env ${envs//,/ } timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
      echo "$m $label round $r: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
    done
  done
}

# bench_arm LABEL ENVS MODEL TEST BENCH-ARGS...: one perfx bench run on random:MODEL with the
# environment assignments ENVS (space-separated; "" for none), its table appended to
# $OUT/benches.md under "## LABEL", one line "LABEL: t/s ± sd" for the row whose test column is
# exactly TEST (tg128, "tg32 x8", pp512); skipped past the budget (90 s a run). The binary is
# $BIN when set (e.g. `BIN=$B/perfx_base bench_arm ...`), else $B/perfx.
bench_arm() {
  local label=$1 envs=$2 m=$3 t=$4
  shift 4
  over_budget && { echo "$label: skipped (budget)"; return; }
  env $envs timeout 90 "${BIN:-$B/perfx}" bench -m "random:$m" --device cuda "$@" > /tmp/b.md 2>&1
  { echo "## $label"; cat /tmp/b.md; } >> "$OUT/benches.md"
  echo "$label: $(grep -F "| $t |" /tmp/b.md | awk -F'|' '{print $(NF-1)}')"
}

# lm_head_arms HEAD...: for each HEAD (fp16 = the lm_head as stored, q8_0, q4_0), one tg128 of
# Llama-2-7B and one of TinyLlama AWQ (bench_arm, -r 3), labelled "7B tg128 HEAD head" and
# "tiny tg128 HEAD head"; --lm-head-type HEAD unless fp16.
lm_head_arms() {
  local h a
  for h in "$@"; do
    a=(); [ "$h" != fp16 ] && a=(--lm-head-type "$h")
    bench_arm "7B tg128 $h head" "" llama-2-7b tg128 -p 0 -n 128 -r 3 "${a[@]}"
    bench_arm "tiny tg128 $h head" "" tinyllama-1.1b tg128 -p 0 -n 128 -r 3 "${a[@]}"
  done
}

# split_arm LABEL SPLITS FUSE MODEL TEST BENCH-ARGS...: bench_arm with PERFX_CUDA_NORM_FUSE=FUSE
# and PERFX_CUDA_ATTN_SPLITS=SPLITS (0: the cost model's count), labelled "LABEL splits=S" (its
# runs' limit is bench_arm's 90 s; it was 60 s when session_splits26.sh ran).
split_arm() {
  local label=$1 s=$2 f=$3 m=$4 t=$5
  shift 5
  local envs="PERFX_CUDA_NORM_FUSE=$f"
  [ "$s" != 0 ] && envs="$envs PERFX_CUDA_ATTN_SPLITS=$s"
  bench_arm "$label splits=${s/#0/model}" "$envs" "$m" "$t" "$@"
}

# e2e_on BINARY FILTER: test_e2e's FILTER cases against BINARY (a file of $B, e.g. perfx) on cuda:0
# (PERFX_TEST_BIN), log in $OUT/e2e_BINARY.log; one summary line, then perfx's stderr notes.
e2e_on() {
  local bin=$1 filter=$2
  PERFX_TEST_BIN="$B/$bin" PERFX_TEST_DEVICE=cuda:0 timeout 60 "$B/tests/test_e2e" \
    --gtest_filter="$filter" > "$OUT/e2e_$bin.log" 2>&1
  echo "e2e $filter on $bin rc=$?: $(gtest_line "$OUT/e2e_$bin.log")"
  grep -h 'note' "$OUT/e2e_$bin.log" | cut -c1-200
}

# reps LABEL BINARY MODEL [ARGS...]: BINARY bench -m random:MODEL --device cuda -r 5 -o json ARGS;
# per test one line "LABEL MODEL TEST: mean ± sd | reps r1 r2 ..." (tok/s, from samples_ts), then
# any stderr note; skipped past the budget.
reps() {
  local label=$1 bin=$2 m=$3
  shift 3
  over_budget && { echo "$label $m: skipped (budget)"; return; }
  timeout 120 "$bin" bench -m "random:$m" --device cuda -r 5 -o json "$@" > /tmp/r.json 2> /tmp/r.err
  python3 -c '
import json, sys
for t in json.load(open("/tmp/r.json")):
    s = t["samples_ts"]
    name = ("pp%d" % t["n_prompt"]) if t["n_prompt"] else ("tg%d x%d" % (t["n_gen"], t["n_batch_seqs"]))
    print("%s %s: %.1f ± %.1f | reps %s" % (sys.argv[1], name, t["avg_ts"], t["stddev_ts"],
          " ".join("%.1f" % x for x in s)))
' "$label $m" || { echo "$label $m: no json"; head -3 /tmp/r.err; }
  grep -h 'note' /tmp/r.err | head -2
}

# serve64 BINARY: the 64-stream server e2e test (ServeE2E.SixtyFour*: batched greedy streams
# against solo ones, near-ties allowed on a GPU) with the server BINARY on cuda:0; one summary
# line, then its near-tie and failure lines. Log in $OUT/serve.log.
serve64() {
  PERFX_TEST_SERVE_ARGS="--device cuda" PERFX_TEST_BIN="$1" timeout 120 \
    "$B/tests/test_e2e" --gtest_filter='ServeE2E.SixtyFour*' > "$OUT/serve.log" 2>&1
  echo "serve e2e on cuda rc=$?: $(gtest_line "$OUT/serve.log")"
  grep -E 'near-tie|Failure|request [0-9]+:' "$OUT/serve.log" | head -12 | cut -c1-240
}

# memcheck_gtest TEST FILTER LOG LABEL: compute-sanitizer memcheck over test binary $B/tests/TEST's
# FILTER cases on cuda:0 (120 s at most), log $OUT/LOG; one line "memcheck LABEL rc=...: its
# ERROR SUMMARY and the gtest summary".
memcheck_gtest() {
  PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 \
    "$B/tests/$1" --gtest_filter="$2" > "$OUT/$3" 2>&1
  echo "memcheck $4 rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/$3") $(gtest_line "$OUT/$3")"
}

# acceptance_reps LABEL: issue 9's benches with $B/perfx (reps, -r 5): tg128 on TinyLlama, 7B AWQ
# and 7B GGUF Q4_0, then pp512 on TinyLlama and 7B.
acceptance_reps() {
  local m
  for m in tinyllama-1.1b llama-2-7b llama-2-7b:q4_0; do reps "$1" "$B/perfx" "$m" -p 0 -n 128; done
  for m in tinyllama-1.1b llama-2-7b; do reps "$1" "$B/perfx" "$m" -p 512 -n 0; done
}
