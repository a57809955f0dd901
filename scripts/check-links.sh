#!/usr/bin/env bash
# Every relative Markdown link in README.md, CHANGELOG.md, DESIGN*.md, BENCHMARKS.md and
# docs/*.md must name a file or directory that exists (an #anchor is cut off; http(s) and
# mailto links are not checked). Prints each broken link as file: target; exits 1 if any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=0
for f in README.md CHANGELOG.md DESIGN.md DESIGN-S3.md BENCHMARKS.md docs/*.md; do
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  while IFS= read -r link; do
    target=${link#](}; target=${target%)}; target=${target%%#*}
    case "$target" in ''|http://*|https://*|mailto:*) continue ;; esac
    if [ ! -e "$dir/$target" ]; then
      echo "$f: $target"; bad=1
    fi
  done < <(grep -o '](\([^)]*\))' "$f" || true)
done
exit $bad
