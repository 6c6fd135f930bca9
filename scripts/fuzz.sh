#!/usr/bin/env bash
# Runs every native Go fuzz target of the module, one after another, for a
# bounded time each, and fails if any of them fails. Go fuzzes one target per
# `go test` run, so the targets are found with `go test -list '^Fuzz' ./...`.
#
#   scripts/fuzz.sh [fuzztime] [go test flags...]
#   scripts/fuzz.sh 10s                      # CI: 10 s per target
#   scripts/fuzz.sh 5m -parallel 4           # longer, 4 workers per target
#
# fuzztime is go test's -fuzztime: a duration (30s, 5m) or a count of
# inputs (1000x); default 10s. The targets of ./api need PostgreSQL and
# Redis running (make services). FUZZ_MATCH (default ^Fuzz) picks the targets
# by name, e.g. FUZZ_MATCH='^FuzzCursor$'. FUZZ_MINIMIZE_TIME (default 5s) bounds
# how long the fuzzer minimizes each new input: with go's default of 60 s, a
# target that does a database round trip per input spends a short run
# minimizing instead of fuzzing.
#
# A failing input is written to <package>/testdata/fuzz/<Target>/<hash> and
# is run by every `go test` from then on: fix the bug, and commit that file
# only as a deliberate regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

fuzztime=${1:-10s}
shift || true
minimize=${FUZZ_MINIMIZE_TIME:-5s}
match=${FUZZ_MATCH:-^Fuzz}

# go test -list prints the matching names of each package (tests and
# examples too, for a FUZZ_MATCH that is not ^Fuzz…), then the package's
# "ok <import path> <time>" line.
if ! listing=$(go test -list "$match" ./... 2>&1); then
  printf '%s\n' "$listing" >&2
  echo "fuzz: cannot list the fuzz targets" >&2
  exit 1
fi
targets=()
pending=()
while IFS= read -r line; do
  case "$line" in
    Fuzz*) pending+=("$line") ;;
    ok*)
      pkg=$(awk '{print $2}' <<<"$line")
      for name in ${pending[@]+"${pending[@]}"}; do targets+=("$pkg $name"); done
      pending=()
      ;;
  esac
done <<<"$listing"
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi

echo "fuzz: ${#targets[@]} targets, $fuzztime each"
start=$SECONDS
failed=()
summary=()
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "=== fuzz $name ($pkg)"
  t0=$SECONDS
  dir=$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$name
  before=$(ls "$dir" 2>/dev/null | sort || true)
  ok=false
  for try in 1 2; do
    if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$@" "$pkg"; then
      ok=true
      break
    fi
    # Go's fuzz coordinator before 1.27 can fail a target at the -fuzztime
    # boundary with "context deadline exceeded" and no failing input
    # (go.dev/issue/75804), most on a loaded machine. A failure that wrote
    # an input is real and ends it at once; one that did not is run again.
    if [ "$(ls "$dir" 2>/dev/null | sort || true)" != "$before" ] || [ "$try" = 2 ]; then
      break
    fi
    echo "fuzz: $name failed without writing a failing input (go.dev/issue/75804?): once more"
  done
  if $ok; then
    summary+=("ok    $name $((SECONDS - t0))s")
  else
    summary+=("FAIL  $name $((SECONDS - t0))s")
    failed+=("$name ($pkg)")
  fi
done

echo "--- fuzz summary ($((SECONDS - start))s in all)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  if new=$(git status --porcelain --untracked-files=all -- '*testdata/fuzz/*' 2>/dev/null) && [ -n "$new" ]; then
    echo "fuzz: failing inputs (run again with go test -run '<Target>/<file>'):" >&2
    printf '%s\n' "$new" >&2
  fi
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed"
