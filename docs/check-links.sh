#!/usr/bin/env bash
# Checks the links of the project's Markdown pages: every link must be relative and resolve to a
# file or folder of the repository, and a #fragment must name a heading of its target (GitHub's
# heading ids). Links inside code blocks and inline code are not links. Run from the project root:
#   docs/check-links.sh                 # README.md, docs/*.md, perf/*.md
#   docs/check-links.sh FILE.md ...     # the files given
# Prints each bad link and exits 1 if there is any. Needs bash, awk, python3.
set -u
[ $# -gt 0 ] || set -- README.md docs/*.md $(ls perf/*.md 2>/dev/null)
headings() { # FILE: its heading ids, one a line
  awk '/^```/{f=!f; next} !f && /^#+ /{sub(/^#+ /,""); print}' "$1" | python3 -c '
import re, sys
seen = {}
for h in sys.stdin:
    s = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
    n = seen.get(s, 0); seen[s] = n + 1
    print(s if n == 0 else f"{s}-{n}")'
}
bad=0 n=0
for f in "$@"; do
  dir=$(dirname "$f")
  while read -r l; do
    n=$((n+1))
    case "$l" in
      *://*|mailto:*) echo "$f: not a relative link: $l"; bad=$((bad+1)); continue ;;
    esac
    path=${l%%#*} frag=
    [[ "$l" == *#* ]] && frag=${l#*#}
    target=$dir/$path; [ -z "$path" ] && target=$f
    if [ ! -e "$target" ]; then echo "$f: no such file: $l"; bad=$((bad+1)); continue; fi
    if [ -n "$frag" ] && { [ -d "$target" ] || ! grep -qx -- "$frag" <<<"$(headings "$target")"; }; then
      echo "$f: no heading #$frag in $target"; bad=$((bad+1))
    fi
  done < <(awk '/^```/{f=!f; next} !f' "$f" | sed 's/`[^`]*`//g' | grep -o '\]([^)]*)' | sed 's/^](//; s/)$//')
done
echo "$n links in $# files, $bad bad"
[ $bad = 0 ]
