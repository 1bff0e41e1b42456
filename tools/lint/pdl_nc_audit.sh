#!/usr/bin/env bash
# PDL coherence audit (src/backend/cuda/pdl.cuh's contract; docs/cuda_linear_notes.md §27–§28).
#
# A kernel launched with programmatic dependent launch starts while its predecessor still runs, so
# after griddepcontrol.wait it must read what earlier kernels of the chain wrote through coherent
# loads. ld.global.nc (the read-only path: __ldg, an explicit .nc, or what nvcc makes of a
# `const T* __restrict__` pointer) is only for data no kernel writes during the step — weights,
# records, norm weights, biases, uploaded batch layouts. §27's race was an activation read that
# way. This audit reads the PTX of the CUDA sources (compiled with -lineinfo) and, for every entry
# that executes griddepcontrol.wait, every ld.global.nc: the source line the PTX attributes it to
# must say why its data is immutable, with a comment containing "nc-ok" on that line or one of the
# four above (a statement's loads are attributed to any of its lines; an asm block's to its
# last). A load inside a CUDA header's function (__ldg) counts at its caller's line; lines of
# CUDA's own headers with no caller in this repository are accepted. Loads before the wait are
# listed too (the audit does not follow control flow): a preload of weights is marked like any.
#
# usage: tools/lint/pdl_nc_audit.sh FILE.ptx...   (exit 0: clean; 1: unmarked loads, listed)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 FILE.ptx..." >&2; exit 2; }
here=$(cd "$(dirname "$0")/../.." && pwd)
hits=$(mktemp)
trap 'rm -f "$hits"' EXIT
for ptx in "$@"; do
  [ -s "$ptx" ] || { echo "pdl_nc_audit: $ptx: missing or empty" >&2; exit 2; }
  # Pass 1 maps .file numbers to paths (PTX lists them at the end); pass 2 walks the entries.
  awk -v root="$here" 'FNR == NR { if ($1 == ".file") { f = $3; gsub(/"/, "", f); sub(/,$/, "", f); file[$2] = f } next }
       # An entry runs to the next entry or function (inline asm puts bare braces in bodies).
       function flush(  i) { if (inside && wait) for (i = 0; i < n; ++i) print name "\t" at[i]; inside = 0 }
       /^(\.visible |\.weak )?\.func / { flush(); next }
       /^(\.visible |\.weak )?\.entry / { flush(); name = $0; sub(/\(.*/, "", name); sub(/.*\.entry /, "", name);
                                          n = 0; wait = 0; inside = 1; next }
       inside && $1 == ".loc" { loc = file[$2] ":" $3
                                # a load inside a CUDA header function (__ldg): its caller
                                if (index(file[$2], root "/") != 1 && $7 == "inlined_at")
                                  loc = file[$8] ":" $9 }
       inside && /griddepcontrol\.wait/ { wait = 1 }
       inside && /ld\.global\.nc/ { at[n++] = loc }
       END { flush() }' \
    "$ptx" "$ptx" >> "$hits"
done
bad=0
while IFS=$'\t' read -r loc; do
  path=${loc%:*}
  line=${loc##*:}
  case "$path" in
    "$here"/*) ;;
    *) continue ;;  # CUDA's headers
  esac
  if [ ! -f "$path" ]; then
    echo "pdl_nc_audit: $path:$line: ld.global.nc in a PDL kernel, and the source is not there to check"
    bad=1
  elif ! sed -n "$((line > 4 ? line - 4 : 1)),${line}p" "$path" | grep -q 'nc-ok'; then
    kernels=$(awk -F'\t' -v l="$loc" '$2 == l { print $1 }' "$hits" | sort -u | c++filt |
      sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/(.*//' | sort -u | head -3 | tr '\n' ' ')
    echo "pdl_nc_audit: ${path#"$here"/}:$line: ld.global.nc after griddepcontrol.wait in $kernels"
    echo "    $(sed -n "${line}p" "$path" | sed 's/^ *//')"
    bad=1
  fi
done < <(cut -f2 "$hits" | sort -u)
if [ $bad -ne 0 ]; then
  echo "pdl_nc_audit: the lines above read through the non-coherent path in kernels that wait on a"
  echo "PDL predecessor. Read what the chain writes coherently (pdl.cuh: ld_act, no __restrict__)"
  echo "or, for data no kernel writes during the step, say so with an 'nc-ok: <why>' comment."
  exit 1
fi
echo "pdl_nc_audit: $(cut -f2 "$hits" | sort -u | wc -l) source lines of ld.global.nc in PDL kernels, all marked, in $# PTX files"
