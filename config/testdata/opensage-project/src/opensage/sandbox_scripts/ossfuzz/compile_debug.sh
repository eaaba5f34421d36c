# Stand-in for OpenSage's ossfuzz/compile_debug.sh (tests only). Like the
# original it moves $OUT aside to $OUT.bak and builds into a fresh $OUT with
# debug flags; instead of compiling it records them. Run as `bash script`.
set -e
OUT=${OUT:-/out}
export CFLAGS="-g3 -O0" CXXFLAGS="-g3 -O0"
rm -rf "$OUT.bak"
if [ -e "$OUT" ]; then mv "$OUT" "$OUT.bak"; fi
mkdir -p "$OUT"
echo "$CFLAGS" > "$OUT/debug-build"
