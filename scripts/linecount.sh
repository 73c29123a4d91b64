#!/usr/bin/env bash
# Lines of Go per package, tests and generated files left out (docs/architecture.md's table):
# every package of the repository's modules, with its share of the total.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.go' | grep -v '_test\.go$' | while read -r f; do
	head -5 "$f" | grep -q '^// Code generated .* DO NOT EDIT\.$' && continue
	echo "$(dirname "$f") $(wc -l <"$f")"
done | awk '{n[$1] += $2; t += $2} END {for (p in n) printf "%6d %5.1f%% %s\n", n[p], 100 * n[p] / t, p; printf "%6d total\n", t}' | sort -rn
