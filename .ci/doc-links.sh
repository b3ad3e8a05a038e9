#!/usr/bin/env bash
# The documentation's links into what `cargo package` leaves out (Cargo.toml's `include`:
# docs/img, docs/bench-results) must be absolute, or they break on crates.io and docs.rs;
# every absolute link into the repository must name a path that exists here (and, for a
# Markdown file with an #anchor, a heading that makes that anchor); the Markdown files under
# docs/bench-results (read on GitHub only) may link relatively, to paths that exist.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

repository=$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
shipped=(README.md docs/*.md)
status=0
fail() { echo "$1" >&2; status=1; }

# The anchors GitHub makes from a Markdown file's headings (outside code fences): lowercased,
# everything but letters, digits, spaces, '-' and '_' dropped, spaces turned into '-'.
anchors() {
    awk '/^(```|~~~)/ { fenced = !fenced; next } !fenced && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}

# Every link target of a Markdown file: ](target) and ](target "title").
targets() { grep -oE '\]\([^) ]+' "$1" | sed 's/^](//' || true; }

for file in "${shipped[@]}"; do
    while read -r target; do
        case "$target" in
            "$repository"/blob/main/*) ;;
            *img/* | *bench-results/*)
                fail "$file: $target: a link into docs/img or docs/bench-results must be $repository/blob/main/<path>" ;;
        esac
    done < <(targets "$file")
    while read -r link; do
        path=${link#"$repository"/blob/main/}
        anchor=""
        case "$path" in *'#'*) anchor=${path#*#}; path=${path%%#*} ;; esac
        path=${path%%\?*}
        if [ ! -e "$path" ]; then
            fail "$file links to $path, which is not in the repository"
        elif [ -n "$anchor" ] && [ "${path##*.}" = md ] && ! anchors "$path" | grep -qxF "$anchor"; then
            fail "$file links to $path#$anchor, and no heading of $path makes that anchor"
        fi
    done < <(grep -oE "$repository/blob/main/[A-Za-z0-9_./#?=-]+" "$file" | sed 's/[.]$//' | sort -u)
done

while IFS= read -r -d '' file; do
    dir=$(dirname "$file")
    while read -r target; do
        case "$target" in http://* | https://* | '#'* | mailto:*) continue ;; esac
        path=${target%%#*}
        [ -e "$dir/$path" ] || fail "$file links to $target, which is not at $dir/$path"
    done < <(targets "$file")
done < <(find docs/bench-results -name '*.md' -print0)

if [ "$status" -ne 0 ]; then
    exit "$status"
fi
echo "doc links: ${#shipped[@]} shipped files and docs/bench-results/**/*.md checked"
