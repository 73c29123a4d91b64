#!/usr/bin/env bash
# Lines of Go per package, tests and generated files left out (docs/architecture.md's table):
# every package of the repository's modules, with its share of the total. A file is generated
# when a "// Code generated ... DO NOT EDIT." line comes before its package clause (Go's rule).
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.go' | grep -v '_test\.go$' | while read -r f; do
	awk 'BEGIN {g = 1} /^package /{exit} /^\/\/ Code generated .* DO NOT EDIT\.$/ {g = 0; exit} END {exit g}' "$f" && continue
	echo "$(dirname "$f") $(wc -l <"$f")"
done | awk '{n[$1] += $2; t += $2} END {for (p in n) printf "%6d %5.1f%% %s\n", n[p], 100 * n[p] / t, p; printf "%6d total\n", t}' | sort -rn
