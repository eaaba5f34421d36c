package config

import (
	"fmt"
	"strings"
)

// splitCommand splits an entry's command string into argv the way OpenSage
// gets it split on native (docker-py uses Python's shlex.split): words
// separated by blanks, 'single quotes' literal, "double quotes" with
// backslash escapes of \ " $ ` and newline, and a backslash outside quotes
// escaping the next character. Nothing is expanded.
//
// A command with unquoted shell syntax (| & ; < > ` $( ) cannot mean what it
// says as words, so it is meant for a shell, as OpenSage's k8s and
// OpenSandbox backends run every command: shell is true and argv is nil, and
// the caller runs the command as /bin/sh -c COMMAND.
func splitCommand(s string) (argv []string, shell bool, err error) {
	var (
		args   []string
		word   strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\\':
			i++
			if i == len(s) {
				return nil, false, fmt.Errorf("command %q ends with a backslash", s)
			}
			if s[i] != '\n' { // backslash-newline continues the line
				word.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, false, fmt.Errorf("command %q: unterminated single quote", s)
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			j, err := doubleQuoted(s, i+1, &word)
			if err != nil {
				return nil, false, err
			}
			i = j
			inWord = true
		case strings.IndexByte("|&;<>`", c) >= 0 || (c == '$' && i+1 < len(s) && s[i+1] == '('):
			return nil, true, nil
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		args = append(args, word.String())
	}
	return args, false, nil
}

// doubleQuoted copies the double-quoted text starting at s[i] (after the
// opening quote) into w and returns the index of the closing quote.
func doubleQuoted(s string, i int, w *strings.Builder) (int, error) {
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return i, nil
		case '\\':
			if i+1 < len(s) && strings.IndexByte("\\\"$`\n", s[i+1]) >= 0 {
				i++
				if s[i] != '\n' {
					w.WriteByte(s[i])
				}
				continue
			}
			w.WriteByte(c)
		default:
			w.WriteByte(c)
		}
	}
	return 0, fmt.Errorf("command %q: unterminated double quote", s)
}
