# Stand-in for OpenSage's compile_coverage.sh (tests only). Like the original
# it removes $OUT (no backup) and builds into it with SANITIZER=coverage;
# instead of building the project it writes a file recording that.
# $STANDIN_FAIL makes the build fail.
set -e
OUT=${OUT:-/out}
export SANITIZER=coverage FUZZING_ENGINE=libfuzzer
rm -rf "$OUT"
mkdir -p "$OUT"
if [ -n "$STANDIN_FAIL" ]; then
	echo "$STANDIN_FAIL" >&2
	exit 1
fi
printf '%s\n' "$SANITIZER" "$FUZZING_ENGINE" > "$OUT/coverage.env"
echo "coverage build in $OUT"
