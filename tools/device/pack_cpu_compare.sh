#!/usr/bin/env bash
# Packs what tools/device/cpu_compare.sh needs on the GPU machine into .devcpu/ (ignored by git):
# perfx (built here: baseline x86-64, its kernels pick AVX-512 VNNI / AVX-VNNI / AVX2 at run time;
# stripped), the libraries that machine lacks (Debian's cpp-httplib + brotli), the llama SPM vocab
# GGUF from shared/tokenizers (0.7 MB), and a source
# tarball of llama.cpp (built there natively, so it uses that Xeon's AMX / AVX-512, as the issue's
# numbers did). Nothing of llama.cpp enters the repository: the tarball is made from a checkout
# given here and lives in the ignored .devcpu/.
#   usage: tools/device/pack_cpu_compare.sh LLAMA_CPP_CHECKOUT [BUILD_DIR]   (default build)
#   then:  run command "bash tools/device/cpu_compare.sh", carry [".devcpu"]
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA=${1:?usage: $0 LLAMA_CPP_CHECKOUT [BUILD_DIR]}
BUILD=${2:-build}
cmake --build "$BUILD" --target perfx
rm -rf .devcpu && mkdir -p .devcpu/lib
cp "$BUILD/perfx" .devcpu/perfx && strip .devcpu/perfx
for l in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1; do
  cp -L /usr/lib/x86_64-linux-gnu/$l .devcpu/lib/
done
# llama.cpp sources without models, docs, tests, examples (9 MB): enough for llama-bench and
# llama-quantize.
git -C "$LLAMA" archive --format=tar HEAD $(git -C "$LLAMA" ls-tree --name-only HEAD |
  grep -vE '^(models|media|docs|\.github|examples|tests|gguf-py|benches|pocs|requirements|scripts|skills)$') |
  gzip -6 > .devcpu/llama-src.tar.gz
git -C "$LLAMA" rev-parse --short=8 HEAD > .devcpu/LLAMA_COMMIT
# The llama SPM vocabulary the random GGUFs copy their tokenizer keys from (gen_random_gguf.py).
cp "${PERFX_SHARED_DIR:-../shared}/tokenizers/llama2/ggml-vocab-llama-spm.gguf" .devcpu/
git rev-parse --short=8 HEAD > .devcpu/PERFX_COMMIT
grep -qx '/.devcpu/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null ||
  echo '/.devcpu/' >> "$(git rev-parse --git-common-dir)/info/exclude"
du -sh .devcpu
