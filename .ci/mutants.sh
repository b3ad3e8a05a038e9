#!/usr/bin/env bash
# Mutation testing with cargo-mutants (docs/verification.md, "Mutation testing"): the files
# that carry the crate's promises (.cargo/mutants.toml), each group of files with the tests
# that speak for it.
#
#   .ci/mutants.sh --check     cheap, in CI (no build): every mutant the last full run left
#                              alive (missed, or caught only by a timeout) is listed in
#                              .cargo/mutants-equivalent.txt with its reason, or it fails; it
#                              also says how many of today's mutants that run did not see.
#   .ci/mutants.sh --summary   rewrites verify/mutants/summary.txt from the groups there.
#   .ci/mutants.sh --survivors GROUP...
#                              re-tests, at HEAD, only the mutants the group's last full run
#                              left alive (every missed one, and the timeouts not explained in
#                              .cargo/mutants-equivalent.txt) after tests were added for them:
#                              those now caught move to caught.txt; retest.txt says which
#                              commit re-tested them.
#   .ci/mutants.sh [GROUP...]  the full run, by hand (some hours on 2 cores: a periodic run,
#                              too long for CI): each group (all, or those named) in a copy of
#                              HEAD under $MUTANTS_WORK (so the tree may change meanwhile), its
#                              outcome into verify/mutants/GROUP/, and verify/mutants/summary.txt
#                              updated. Commit what it wrote: that is the last full result.
#
# Needs cargo-mutants (`cargo install --locked cargo-mutants`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

RESULTS=verify/mutants
EQUIVALENT=.cargo/mutants-equivalent.txt

# name | the mutants (a regex on cargo-mutants' names) | cargo test's arguments.
# Each group's tests are its files' unit tests (the whole library's: 12 s in debug, less the
# bound property test where it is not the group's) and the integration tests that state its
# promises, chosen to run in under a minute: the whole suite takes an hour.
GROUP_LIST=(
    "bounds|^src/collect/events/bounds\.rs:|--lib --test clock --test clock_worlds"
    "mapping|^src/collect/events/mapping\.rs:|--lib --test clock --test clock_worlds"
    "clock|^src/collect/events/clock\.rs:|--lib --test clock --test clock_worlds --test exact_times --test timestamps -- --skip collect::events::bounds"
    "read|^src/collect/events/read\.rs:|--lib --test clock --test clock_worlds --test exact_times --test timestamps --test bad_input -- --skip collect::events::bounds"
    "freelist|^src/slots/freelist\.rs:|--lib --test magazines --test lifecycle -- --skip collect::events::bounds"
    "magazine|^src/slots/magazine/|--lib --test magazines --test lifecycle -- --skip collect::events::bounds"
    "lanes|^src/shared/lanes/|--lib --test many_streams --test recording --test lifecycle -- --skip collect::events::bounds"
    "assemble|^src/collect/activities/assemble\.rs:|--lib --test activities --test sources -- --skip collect::events::bounds"
    "rows|^src/sink/perfetto/rows\.rs:|--features perfetto --lib --test perfetto -- --skip collect::events::bounds"
)

# A mutant's name without its line and column, which move with every edit above it.
unplaced() { sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /'; }

check() {
    local alive unexplained
    alive="$(cat "$RESULTS"/*/missed.txt "$RESULTS"/*/timeout.txt 2>/dev/null | unplaced | sort -u)"
    unexplained="$(comm -23 <(printf '%s\n' "$alive" | sed '/^$/d') \
        <(grep -v '^#' "$EQUIVALENT" | sed -E 's/ +# .*$//; /^$/d' | unplaced | sort -u))"
    printf 'mutation testing: %s\n' "$(head -n 1 "$RESULTS/summary.txt")"
    if [ -n "$unexplained" ]; then
        printf 'FAILED: mutants left alive by the last full run and not in %s:\n' "$EQUIVALENT"
        printf '  %s\n' "$unexplained"
        exit 1
    fi
    printf 'every mutant left alive (%s) is listed as equivalent\n' "$(printf '%s\n' "$alive" | sed '/^$/d' | wc -l)"
    if ! cargo mutants --version >/dev/null 2>&1; then
        echo "(cargo-mutants is not installed: not compared with today's mutants)"
        return
    fi
    local now seen unseen
    now="$(cargo mutants --list 2>/dev/null | unplaced | sort -u)"
    seen="$(cat "$RESULTS"/*/mutants.txt 2>/dev/null | unplaced | sort -u)"
    unseen="$(comm -23 <(printf '%s\n' "$now") <(printf '%s\n' "$seen") | sed '/^$/d' | wc -l)"
    printf '%s of the %s mutants of today'"'"'s tree were not in the last full run (files changed since)\n' \
        "$unseen" "$(printf '%s\n' "$now" | wc -l)"
}

# The mutants a group's last run left alive, as one regex of their names (any line and
# column): what `--survivors` re-tests.
survivors_re() {
    # Every missed one (a few seconds each), and the timeouts not yet explained (a minute each).
    local explained
    explained="$(grep -v '^#' "$EQUIVALENT" | sed -E 's/ +# .*$//; /^$/d' | unplaced | sort -u)"
    { cat "$RESULTS/$1"/missed.txt 2>/dev/null | unplaced
      comm -23 <(cat "$RESULTS/$1"/timeout.txt 2>/dev/null | unplaced | sort -u) <(printf '%s\n' "$explained")
    } | sort -u | python3 -c '
import re, sys
names = [line.rstrip("\n") for line in sys.stdin if line.strip()]
parts = []
for name in names:
    path, rest = name.split(": ", 1)
    parts.append(re.escape(path) + r":[0-9]+:[0-9]+: " + re.escape(rest) + "$")
print("^(" + "|".join(parts) + ")" if parts else "^$^")
'
}

run() {
    local work="${MUTANTS_WORK:-/tmp/gpu-event-pool-mutants}"
    local only_survivors=0
    if [ "${1:-}" = "--survivors" ]; then
        only_survivors=1
        shift
    fi
    local commit
    commit="$(git rev-parse HEAD)"
    if ! git diff --quiet HEAD -- src tests Cargo.toml .cargo; then
        echo "the run tests HEAD ($commit): commit first what it should see" >&2
    fi
    mkdir -p "$work"
    rm -rf "$work/src"
    git archive --format=tar HEAD | (mkdir -p "$work/src" && tar -x -C "$work/src")
    local wanted=("$@") entry name re args
    for entry in "${GROUP_LIST[@]}"; do
        IFS='|' read -r name re args <<<"$entry"
        if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
            continue
        fi
        printf '\n=== %s: %s\n' "$name" "$args"
        local start=$SECONDS out="$work/out/$name"
        rm -rf "$out"
        mkdir -p "$out"
        # In place in the copy: its target directory is reused from group to group. The
        # targets and features go to every cargo call (`--cargo-arg`), so that each mutant
        # builds only the group's tests, not all sixty; what follows `--` goes to the tests.
        local cargo_args=() test_args=() word after=0
        for word in $args; do
            if [ "$word" = "--" ]; then
                after=1
            elif [ "$after" = 1 ]; then
                test_args+=("$word")
            else
                cargo_args+=("--cargo-arg=$word")
            fi
        done
        if [ "$only_survivors" = 1 ]; then
            local again
            again="$(survivors_re "$name")"
            (cd "$work/src" && cargo mutants --in-place --re "$again" -o "$out" "${cargo_args[@]}" \
                ${test_args[@]+-- -- "${test_args[@]}"}) || true
            # Those caught now leave the survivors; the rest stay where they were.
            # By name (lines move between commits); a name also left alive now (two mutants
            # of one name, one caught) stays alive: the conservative reading.
            local caught_now
            caught_now="$(comm -23 <(cat "$out/mutants.out/caught.txt" 2>/dev/null | unplaced | sort -u) \
                <(cat "$out/mutants.out/missed.txt" "$out/mutants.out/timeout.txt" 2>/dev/null | unplaced | sort -u))"
            for kind in missed timeout; do
                [ -f "$RESULTS/$name/$kind.txt" ] || continue
                while IFS= read -r line; do
                    if printf '%s\n' "$caught_now" | grep -qxF "$(printf '%s\n' "$line" | unplaced)"; then
                        printf '%s\n' "$line" >>"$RESULTS/$name/caught.txt"
                    else
                        printf '%s\n' "$line"
                    fi
                done <"$RESULTS/$name/$kind.txt" >"$RESULTS/$name/$kind.txt.new"
                mv "$RESULTS/$name/$kind.txt.new" "$RESULTS/$name/$kind.txt"
            done
            sort -o "$RESULTS/$name/caught.txt" "$RESULTS/$name/caught.txt"
            printf 'survivors re-tested at %s (%s s): %s caught now\n' "$commit" "$((SECONDS - start))" \
                "$(printf '%s\n' "$caught_now" | sed '/^$/d' | wc -l)" >>"$RESULTS/$name/retest.txt"
            continue
        fi
        (cd "$work/src" && cargo mutants --in-place --re "$re" -o "$out" "${cargo_args[@]}" \
            ${test_args[@]+-- -- "${test_args[@]}"}) || true

        mkdir -p "$RESULTS/$name"
        # (cargo-mutants' --re lets a few "delete field" mutants of other files through:
        # kept out, each is tested with its own file's group.)
        for kind in caught missed timeout unviable; do
            grep -E "$re" "$out/mutants.out/$kind.txt" | sort >"$RESULTS/$name/$kind.txt" || true
        done
        cat "$RESULTS/$name"/{caught,missed,timeout,unviable}.txt | sort >"$RESULTS/$name/mutants.txt"
        printf '%s\t%s\t%s\n' "$commit" "$((SECONDS - start))" "$args" >"$RESULTS/$name/run.txt"
    done
    summary
}

summary() {
    local name
    {
        printf 'last full run: %s mutants, %s left alive (%s)\n\n' \
            "$(cat "$RESULTS"/*/mutants.txt | wc -l)" "$(cat "$RESULTS"/*/{missed,timeout}.txt | wc -l)" \
            "$(cargo mutants --version)"
        printf '%-9s %7s %6s %6s %7s %8s %7s  %-12s %s\n' \
            group mutants caught missed timeout unviable seconds commit tests
        for dir in "$RESULTS"/*/; do
            name="$(basename "$dir")"
            printf '%-9s %7s %6s %6s %7s %8s %7s  %-12s %s\n' "$name" \
                "$(wc -l <"$dir/mutants.txt")" "$(wc -l <"$dir/caught.txt")" \
                "$(wc -l <"$dir/missed.txt")" "$(wc -l <"$dir/timeout.txt")" \
                "$(wc -l <"$dir/unviable.txt")" "$(cut -f2 "$dir/run.txt")" \
                "$(cut -f1 "$dir/run.txt" | cut -c1-12)" "$(cut -f3 "$dir/run.txt")"
        done
        for dir in "$RESULTS"/*/; do
            [ -f "$dir/retest.txt" ] && sed "s|^|$(basename "$dir"): |" "$dir/retest.txt"
        done
        true
    } >"$RESULTS/summary.txt"
    cat "$RESULTS/summary.txt"
}

if [ "${1:-}" = "--check" ]; then
    check
elif [ "${1:-}" = "--summary" ]; then
    summary
else
    run "$@"
fi
