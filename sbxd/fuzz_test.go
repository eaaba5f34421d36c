package sbxd

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// The client's own fuzz target: the agent's error answers, which it turns
// back into errors. The wire's decoders (the exec request header, the
// output frames) are fuzzed in internal/sbxdwire, the agent's (read
// ranges, glob patterns, limited output streams) in package sbxd/agent.
// Seeds are in testdata/fuzz.

func FuzzResponseError(f *testing.F) {
	f.Add([]byte(`{"code":"not_exist","op":"read","path":"/x","msg":"no such file"}`))
	f.Add([]byte(`{"code":"not_unique","count":3,"msg":"x"}`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		resp := &http.Response{StatusCode: 404, Status: "404 Not Found", Body: io.NopCloser(bytes.NewReader(body))}
		err := responseError(resp)
		if err == nil {
			t.Fatal("no error")
		}
		_ = err.Error()
	})
}
