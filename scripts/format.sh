#!/usr/bin/env bash
# Formats the tree's C++ and CUDA sources with clang-format and the repository's .clang-format;
# with --check, changes nothing and fails naming each file that is not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z "$fmt" ]]; then
  echo "format: clang-format not found (apt-get install clang-format-14)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find alloc bench client fuzz kernels proto runtime server tests util \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
fi
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$fmt" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "format: $f is not formatted (scripts/format.sh formats it)"
      bad=1
    fi
  done
  exit $bad
fi
"$fmt" --style=file -i "${files[@]}"
