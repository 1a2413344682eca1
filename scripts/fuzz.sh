#!/usr/bin/env bash
# Runs every fuzz target of the module in turn for SECONDS each and says, per target, whether it
# passed, how many inputs it executed, and which crashers it wrote (new files under the package's
# testdata/fuzz/<Target>/, which go test then runs as regression inputs). Exits non-zero if any
# target failed. Not part of CI: it is for long runs by hand.
#
#   scripts/fuzz.sh SECONDS
#
# Environment:
#   FUZZ_PARALLEL  fuzzing workers per target (go test -parallel; default 1, for shared machines)
#   FUZZ_ONLY      an extended regular expression over "package/Target" names (default: all)
#   FUZZ_LOGS      a directory for each target's full output (default: a temporary directory)
#   FUZZ_MINIMIZE  go test -fuzzminimizetime (default 10s): go test minimizes every new
#                  interesting input for up to this long, and with one worker fuzzing stops
#                  meanwhile (its default of 60s took two thirds of a 10-minute run of a target
#                  whose inputs are operation sequences)
set -u

if [ $# -ne 1 ] || ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
	echo "usage: $0 SECONDS (the time each fuzz target runs)" >&2
	exit 2
fi
secs=$1
parallel=${FUZZ_PARALLEL:-1}
only=${FUZZ_ONLY:-}
minimize=${FUZZ_MINIMIZE:-10s}
cd "$(dirname "$0")/.." || exit 2
logs=${FUZZ_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/crem-fuzz.XXXXXX")}
mkdir -p "$logs" || exit 2

# The packages with a fuzz target, then the targets go test lists for each (build constraints
# and all).
mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u)
targets=()
for dir in "${pkgs[@]}"; do
	pkg=${dir#./}
	if ! names=$(go test -list '^Fuzz' "./$pkg" 2>"$logs/list.err"); then
		echo "FAIL  $pkg: cannot list its fuzz targets:" >&2
		cat "$logs/list.err" >&2
		exit 1
	fi
	for name in $names; do
		[[ $name == Fuzz* ]] || continue
		if [ -z "$only" ] || [[ "$pkg/$name" =~ $only ]]; then
			targets+=("$pkg/$name")
		fi
	done
done
if [ ${#targets[@]} -eq 0 ]; then
	echo "no fuzz target matches ${only:-anything}" >&2
	exit 1
fi
echo "fuzzing ${#targets[@]} targets for ${secs}s each, $parallel worker(s); logs in $logs"

failed=0
start=$(date +%s)
for t in "${targets[@]}"; do
	pkg=${t%/*}
	name=${t##*/}
	corpus="$pkg/testdata/fuzz/$name"
	before=$(ls "$corpus" 2>/dev/null | sort)
	log="$logs/${pkg//\//_}.$name.log"
	t0=$(date +%s)
	go test -run '^$' -fuzz "^$name\$" -fuzztime "${secs}s" -fuzzminimizetime "$minimize" \
		-timeout "$((secs + 600))s" -parallel "$parallel" "./$pkg" >"$log" 2>&1
	rc=$?
	took=$(($(date +%s) - t0))
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	after=$(ls "$corpus" 2>/dev/null | sort)
	new=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d')
	if [ $rc -ne 0 ] && [ -z "$new" ] && grep -q '^    context deadline exceeded$' "$log" &&
		! grep -qE '_test\.go:[0-9]+:|panic:' "$log"; then
		# Go's coordinator can report its own -fuzztime deadline as a failure, with no input to
		# blame (go.dev/issue/75804, fixed in Go 1.27): not a finding.
		printf 'ok    %-40s %4ss  %s execs  (go.dev/issue/75804 at the deadline, no crasher)\n' "$t" "$took" "${execs:-?}"
	elif [ $rc -eq 0 ]; then
		printf 'ok    %-40s %4ss  %s execs\n' "$t" "$took" "${execs:-?}"
	else
		failed=$((failed + 1))
		printf 'FAIL  %-40s %4ss  %s execs  (log %s)\n' "$t" "$took" "${execs:-?}" "$log"
		grep -m5 -E '^\s+(--- FAIL|.*_test\.go:[0-9]+:)|panic:' "$log" | sed 's/^/      /'
	fi
	for f in $new; do
		echo "      new crasher: $corpus/$f (re-run: go test ./$pkg -run '$name/$f')"
	done
done
echo "$((${#targets[@]} - failed)) of ${#targets[@]} targets passed in $(($(date +%s) - start))s"
[ $failed -eq 0 ]
