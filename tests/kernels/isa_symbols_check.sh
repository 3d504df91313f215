#!/usr/bin/env bash
# Every function in the CPU loops' wider copies (kernels/cpu/isa.h) that uses AVX registers
# must be named in its level's namespace: a function of a shared name (a functor, a standard
# library template) compiled with AVX could be the one the linker keeps for every caller, and
# a CPU without AVX would then fault. Arguments: the object files of one level, then its
# namespace (isa_avx2 or isa_avx512) as the last argument; a directory stands for the object
# files under it.
set -euo pipefail
ns=${!#}
objects=()
# A directory stands for the object files under it.
for a in "${@:1:$#-1}"; do
  if [ -d "$a" ]; then
    while IFS= read -r f; do objects+=("$f"); done < <(find "$a" -name '*.o' | sort)
  else
    objects+=("$a")
  fi
done
[ ${#objects[@]} -gt 0 ] || { echo "no object files given" >&2; exit 2; }
bad=0
checked=0
for o in "${objects[@]}"; do
  # Function by function: the label line, then its instructions.
  out=$(objdump -d --no-show-raw-insn "$o" | awk -v ns="$ns" '
    /^[0-9a-f]+ <.*>:$/ { name = $2; gsub(/[<>:]/, "", name); next }
    /%[yz]mm[0-9]/ { used[name] = 1 }
    END {
      for (f in used) { total++; if (index(f, ns) == 0) print "BAD " f; }
      print "USED " total + 0
    }')
  n=$(printf '%s\n' "$out" | awk '/^USED/ { print $2 }')
  checked=$((checked + n))
  if printf '%s\n' "$out" | grep -q '^BAD'; then
    printf '%s\n' "$out" | grep '^BAD' | sed "s|^BAD |$o: AVX code outside $ns: |" | c++filt
    bad=1
  fi
done
# A check that finds no AVX code at all would pass for the wrong reason.
if [ "$checked" -eq 0 ]; then
  echo "no function with AVX registers found in the $ns objects" >&2
  exit 1
fi
if [ "$bad" -eq 0 ]; then
  echo "${#objects[@]} objects: $checked functions with AVX registers, all in $ns"
fi
exit $bad
