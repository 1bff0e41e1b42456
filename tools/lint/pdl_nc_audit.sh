#!/usr/bin/env bash
# PDL coherence audit (src/backend/cuda/pdl.cuh's contract; docs/cuda_linear_notes.md §27–§28).
#
# A kernel launched with programmatic dependent launch starts while its predecessor still runs,
# so after griddepcontrol.wait it must read what earlier kernels of the chain wrote through
# coherent loads. ld.global.nc (the read-only path: __ldg, an explicit .nc, or what nvcc makes of
# a `const T* __restrict__` pointer) is only for data no kernel writes during the step: weights,
# records, norm weights, biases, uploaded batch layouts. §27's race was an activation read that
# way. This audit reads the PTX of the CUDA sources (compiled with -lineinfo) and checks every
# ld.global.nc in every entry that executes griddepcontrol.wait, and in every non-inlined
# function (.func: it may be called after a wait). Each load is attributed to the innermost
# source line of this repository (through the .loc's inlined_at, for a load inside a CUDA
# header's function such as __ldg); that line's statement must say why its data is immutable,
# with a comment containing "nc-ok" on one of its lines or in the comment lines right above it.
# A load with no line of this repository (a CUDA header called from a CUDA header) fails: the
# audit cannot tell what it reads. Loads before the wait are checked too (no control flow is
# followed): a weight preload is marked like any other.
#
# usage: tools/lint/pdl_nc_audit.sh FILE.ptx...   (exit 0: clean; 1: unmarked loads, listed)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 FILE.ptx..." >&2; exit 2; }
here=$(cd "$(dirname "$0")/../.." && pwd)
hits=$(mktemp)
trap 'rm -f "$hits"' EXIT
for ptx in "$@"; do
  [ -s "$ptx" ] || { echo "pdl_nc_audit: $ptx: missing or empty" >&2; exit 2; }
  # Pass 1 maps .file numbers to paths (PTX lists them at the end); pass 2 walks the bodies. A
  # body runs to the next entry or function (inline asm puts bare braces inside bodies).
  awk -v root="$here/" '
    function inrepo(f) { return index(f, root) == 1 }
    function flush(  i) {
      if (inside && audit) for (i = 0; i < n; ++i) print name "\t" at[i]
      inside = 0
    }
    FNR == NR { if ($1 == ".file") { f = $3; gsub(/[",]/, "", f); file[$2] = f } next }
    /^(\.visible |\.weak |\.extern )*\.(entry|func) / {
      flush(); name = $0; sub(/.*\.(entry|func) +/, "", name)
      sub(/^\([^)]*\) */, "", name)  # a .func return value
      sub(/\(.*/, "", name)
      n = 0; audit = ($0 ~ /\.func /); inside = 1; next
    }
    inside && $1 == ".loc" {
      loc = file[$2] ":" $3
      if (!inrepo(file[$2])) {  # a CUDA header: its caller, when the caller is ours
        loc = "?" loc
        for (i = 4; i < NF; ++i)
          if ($i == "inlined_at" && inrepo(file[$(i + 1)])) loc = file[$(i + 1)] ":" $(i + 2)
      }
    }
    inside && /griddepcontrol\.wait/ { audit = 1 }
    inside && /ld\.global\.nc/ { at[n++] = loc }
    END { flush() }' "$ptx" "$ptx" >> "$hits"
done

# marked FILE LINE: whether LINE's statement (LINE and the continuation lines above it, up to the
# previous line ending in ; { or }) or the comment lines right above it say nc-ok.
marked() {
  awk -v L="$2" '{ t[NR] = $0 } END {
    i = L
    if (t[i] ~ /nc-ok/) exit 0
    while (i > 1) {
      p = t[i - 1]
      if (p ~ /^[[:space:]]*\/\//) { if (p ~ /nc-ok/) exit 0; --i; continue }
      if (p ~ /[;{}][[:space:]]*(\/\/.*)?$/ || p ~ /^[[:space:]]*$/) exit 1
      if (p ~ /nc-ok/) exit 0
      --i
    }
    exit 1 }' "$1"
}
demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }

bad=0
while IFS= read -r loc; do
  path=${loc%:*}
  line=${loc##*:}
  kernels=$(awk -F'\t' -v l="$loc" '$2 == l { print $1 }' "$hits" | sort -u | demangle |
    sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/(.*//' | sort -u | head -3 |
    paste -sd' ' || true)
  case "$path" in
    "?"*)
      echo "pdl_nc_audit: ${path#\?}:$line: ld.global.nc in $kernels with no line of this" \
        "repository to attribute it to"
      bad=1
      ;;
    *)
      if [ ! -f "$path" ]; then
        echo "pdl_nc_audit: $path:$line: ld.global.nc in $kernels; the source is not there"
        bad=1
      elif ! marked "$path" "$line"; then
        echo "pdl_nc_audit: ${path#"$here"/}:$line: ld.global.nc after griddepcontrol.wait" \
          "in $kernels"
        echo "    $(sed -n "${line}p" "$path" | sed 's/^ *//')"
        bad=1
      fi
      ;;
  esac
done < <(cut -f2 "$hits" | sort -u)
if [ $bad -ne 0 ]; then
  echo "pdl_nc_audit: the lines above read through the non-coherent path in kernels that wait on"
  echo "a PDL predecessor. Read what the chain writes coherently (pdl.cuh: ld_act, no"
  echo "__restrict__) or, for data no kernel writes during the step, say so: 'nc-ok: <why>'."
  exit 1
fi
echo "pdl_nc_audit: $(cut -f2 "$hits" | sort -u | wc -l) source lines of ld.global.nc in PDL" \
  "kernels, all marked, in $# PTX files"
