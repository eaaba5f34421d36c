# Stand-in for OpenSage's run_codeql.sh (tests only). The original builds a
# CodeQL database with --command="$1" and writes three call graph CSVs to
# /shared/out/callgraph; this one runs "$1" as the build, records its
# arguments, and writes small CSVs. $STANDIN_NO_CSV names a CSV not to write.
set -e
out=/shared/out/callgraph
mkdir -p "$out" /tmp/standin
printf '%s\n' "$#" "$1" > /tmp/standin/run_codeql.args
echo "codeql database create --language=cpp --command=$1"
if ! sh -c "$1"; then
	echo "A fatal error occurred: Exit status 1 from command: [$1]" >&2
	exit 1
fi
write() { [ "$STANDIN_NO_CSV" = "$1" ] || printf '%s\n' "$2" > "$out/$1"; }
write results.csv 'caller,callee
main,parse_input'
write fp_accesses.csv 'function,pointer
main,handler'
write expr_calls.csv 'caller,expr
main,(*handler)(buf)'
echo "call graph written to $out"
