package opensandbox

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// The wrapper's report
//
// Once the command has ended, the wrapper reports its output on its own
// stdout, which execd streams (the command's output goes to files): the
// two files' sizes and, when they are small, their bytes in base64. Base64
// text survives execd's line-by-line, UTF-8-only stream unchanged, so the
// command's output comes back byte-exact in the one request that ran it;
// only larger outputs (and images without base64 or wc) are downloaded.
// For a command without output (the common "true", "mkdir", "cp") no tool
// runs at all: the shell's own test sees both files empty.
//
//	sbxio:ID:size:OUT:ERR
//	sbxio:ID:out
//	<base64 of out>
//	sbxio:ID:err
//	<base64 of err>
//	sbxio:ID:end
//
// The end line says the report is whole; without it (a stream cut short,
// a tool missing) the files are downloaded as before.

// reportInlineMax is the largest output file the wrapper sends inline.
const reportInlineMax = 64 << 10

// reportMaxText is how much of the wrapper's stdout Exec keeps: both files
// in base64 with line ends, and the marker lines.
const reportMaxText = 2*(reportInlineMax*4/3+reportInlineMax/57+4) + 4096

// reportScript is the wrapper's report, run after the command ended with
// its output in "$d.out" and "$d.err". It never changes the wrapper's exit
// status, which the caller saved in rc.
func reportScript(execID string) string {
	m := "sbxio:" + execID
	return fmt.Sprintf(`if [ ! -s "$d.out" ] && [ ! -s "$d.err" ]; then
  printf '%%s\n' '%[1]s:size:0:0' '%[1]s:end'
elif so=$(wc -c <"$d.out") && se=$(wc -c <"$d.err"); then
  so=${so##* } se=${se##* }
  echo "%[1]s:size:$so:$se"
  if [ "$so" -le %[2]d ] && [ "$se" -le %[2]d ] && command -v base64 >/dev/null; then
    echo '%[1]s:out' && base64 <"$d.out" && echo '%[1]s:err' && base64 <"$d.err" && echo '%[1]s:end'
  fi
fi 2>/dev/null
`, m, reportInlineMax)
}

// outputReport is what the wrapper's report said.
type outputReport struct {
	sized    bool     // size holds the files' sizes
	size     [2]int64 // out, err
	complete bool     // data holds both files, entire
	data     [2][]byte
}

// parseReport reads the report of command execID from the wrapper's
// stdout (as execd streamed it: lines, without their ends).
func parseReport(stdout, execID string) outputReport {
	var rep outputReport
	m := "sbxio:" + execID + ":"
	section := -1
	var b64 [2]strings.Builder
	for line := range strings.SplitSeq(stdout, "\n") {
		line = strings.TrimRight(line, "\r")
		rest, ours := strings.CutPrefix(line, m)
		switch {
		case !ours:
			if section >= 0 {
				b64[section].WriteString(strings.TrimSpace(line))
			}
		case strings.HasPrefix(rest, "size:"):
			o, e, ok := strings.Cut(strings.TrimPrefix(rest, "size:"), ":")
			so, err1 := strconv.ParseInt(strings.TrimSpace(o), 10, 64)
			se, err2 := strconv.ParseInt(strings.TrimSpace(e), 10, 64)
			if !ok || err1 != nil || err2 != nil || so < 0 || se < 0 {
				return outputReport{}
			}
			rep.sized, rep.size = true, [2]int64{so, se}
		case rest == "out":
			section = 0
		case rest == "err":
			section = 1
		case rest == "end":
			if !rep.sized {
				return rep
			}
			for i := range b64 {
				data, err := base64.StdEncoding.DecodeString(b64[i].String())
				if err != nil || int64(len(data)) != rep.size[i] {
					return rep
				}
				rep.data[i] = data
			}
			rep.complete = true
			return rep
		}
	}
	return rep
}
