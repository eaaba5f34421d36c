# Stand-in for OpenSage's compile_aflpp.sh (tests only). Like the original it
# moves $OUT aside to $OUT.bak and builds into a fresh $OUT; instead of
# cloning and building AFL++ and the project it writes small files recording
# the environment it ran with. $STANDIN_FAIL makes the build fail after the
# move, leaving a partial $OUT.
set -e
OUT=${OUT:-/out}
export FUZZING_ENGINE=afl
echo "SANITIZER=$SANITIZER FUZZING_LANGUAGE=$FUZZING_LANGUAGE ARCHITECTURE=$ARCHITECTURE FUZZING_ENGINE=$FUZZING_ENGINE"
rm -rf "$OUT.bak"
mv "$OUT" "$OUT.bak"
mkdir -p "$OUT"
if [ -n "$STANDIN_FAIL" ]; then
	echo partial > "$OUT/partial"
	echo "compile: error: $STANDIN_FAIL" >&2
	exit 1
fi
printf '%s\n' "$SANITIZER" "$FUZZING_LANGUAGE" "$ARCHITECTURE" "$FUZZING_ENGINE" > "$OUT/build.env"
printf '#!/bin/sh\necho "afl-fuzz stand-in: $*"\n' > "$OUT/afl-fuzz"
chmod +x "$OUT/afl-fuzz"
echo "built $OUT/afl-fuzz"
