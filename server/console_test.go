package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/server"
)

// Strings an agent chooses, planted where the console shows them: a file
// name and a command line. They must show as text.
const (
	plantedFile    = `<img src=x onerror="window.pwned=1">.txt`
	plantedCommand = `echo '<script>window.pwned=2</script>'`
)

// consoleServer is a server with both keys, a pool of main and an audit
// trail, over the local backend.
func consoleServer(t *testing.T) (*server.Server, *httptest.Server) {
	t.Helper()
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.APIKey, o.AdminKey = observeAPIKey, observeAdminKey
		o.Pools = map[string]config.PoolConfig{"main": {Size: 1}}
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

// login logs a cookie jar's client in and returns it with the page's CSRF
// token.
func consoleLogin(t *testing.T, base string) (*http.Client, string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(base+"/ui/login", url.Values{"key": {observeAdminKey}})
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", page)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(page)
	require.NotNil(t, m, "no CSRF token on the page after login")
	return c, string(m[1])
}

// Every console route refuses callers without the admin key (the agents'
// key included); the cookie is HttpOnly, SameSite=Strict and the console's
// alone; state-changing requests need the session's CSRF token and this
// server's origin; what agents chose is escaped.
func TestConsoleSecurity(t *testing.T) {
	_, hs := consoleServer(t)
	id := toolCall(t, hs.URL, "conv-x", "create_sandbox", nil).SandboxID
	require.NotEmpty(t, id)
	toolCall(t, hs.URL, "conv-x", "write_file", map[string]any{"sandbox_id": id, "path": plantedFile, "content": "x"})
	toolCall(t, hs.URL, "conv-x", "execute", map[string]any{"sandbox_id": id, "command": plantedCommand})

	routes := []struct{ method, path string }{
		{"GET", "/ui/"}, {"GET", "/ui/events"}, {"GET", "/ui/sandboxes/" + id}, {"GET", "/ui/sandboxes/" + id + "/download?path=x"},
		{"GET", "/ui/sandboxes/" + id + "/terminal"}, {"POST", "/ui/sandboxes/" + id + "/delete"}, {"POST", "/ui/sandboxes/" + id + "/renew"},
		{"POST", "/ui/logout"},
	}
	for _, key := range []string{"", observeAPIKey, "wrong"} {
		for _, r := range routes {
			req, _ := http.NewRequest(r.method, hs.URL+r.path, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultTransport.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with key %q", r.method, r.path, key)
		}
	}
	// A browser without a login is sent to the login page.
	req, _ := http.NewRequest("GET", hs.URL+"/ui/sandboxes/"+id, nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/ui/login?next=%2Fui%2Fsandboxes%2F"+id, resp.Header.Get("Location"))

	// Login: a wrong key (the API key too) is refused; the right one sets
	// the cookie; a next= elsewhere is not followed.
	for _, key := range []string{observeAPIKey, ""} {
		resp, err := http.PostForm(hs.URL+"/ui/login", url.Values{"key": {key}})
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "login with %q", key)
	}
	resp, err = http.DefaultTransport.RoundTrip(mustRequest(t, "POST", hs.URL+"/ui/login", url.Values{"key": {observeAdminKey}, "next": {"//evil.example/ui/"}}))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/ui/", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	assert.True(t, cookies[0].HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	assert.Equal(t, "/ui/", cookies[0].Path)

	c, csrf := consoleLogin(t, hs.URL)
	post := func(path string, form url.Values, origin string) int {
		req := mustRequest(t, "POST", hs.URL+path, form)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, post("/ui/sandboxes/"+id+"/delete", url.Values{}, ""), "no CSRF token")
	assert.Equal(t, http.StatusForbidden, post("/ui/sandboxes/"+id+"/delete", url.Values{"csrf": {strings.Repeat("0", 64)}}, ""), "a wrong token")
	assert.Equal(t, http.StatusForbidden, post("/ui/sandboxes/"+id+"/delete", url.Values{"csrf": {csrf}}, "http://evil.example"), "another origin")
	assert.Equal(t, http.StatusForbidden, post("/ui/logout", url.Values{}, ""), "logout without a token")
	code, _ := get(t, hs.URL, "/ui/sandboxes/"+id, observeAdminKey)
	require.Equal(t, http.StatusOK, code, "the sandbox must survive the refused deletes")

	// The console's terminal WebSocket needs the token and this origin.
	wsBase := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ui/sandboxes/" + id + "/terminal"
	u, _ := url.Parse(hs.URL)
	hdr := http.Header{"Cookie": {jarCookie(c, u)}, "Origin": {hs.URL}}
	_, resp, err = websocket.DefaultDialer.Dial(wsBase, hdr)
	require.Error(t, err)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "terminal without a token")
	hdr.Set("Origin", "http://evil.example")
	_, resp, err = websocket.DefaultDialer.Dial(wsBase+"?csrf="+csrf, hdr)
	require.Error(t, err)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "terminal from another origin")

	// Planted markup is text.
	for _, path := range []string{"/ui/sandboxes/" + id, "/ui/"} {
		resp, err := c.Get(hs.URL + path)
		require.NoError(t, err)
		html, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.NotContains(t, string(html), "<img src=x", path)
		assert.NotContains(t, string(html), "<script>window", path)
		assert.Equal(t, "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
			resp.Header.Get("Content-Security-Policy"))
	}
	resp, err = c.Get(hs.URL + "/ui/sandboxes/" + id)
	require.NoError(t, err)
	html, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(html), "&lt;img src=x")
	assert.Contains(t, string(html), "&lt;script&gt;window.pwned=2&lt;/script&gt;")

	// With a token, the action works and is audited.
	assert.Equal(t, http.StatusOK, post("/ui/sandboxes/"+id+"/delete", url.Values{"csrf": {csrf}}, hs.URL))
	entries := auditEntries(t, hs.URL, "kind=admin&sandbox="+id)
	require.Len(t, entries, 1)
	assert.Equal(t, "POST /ui/sandboxes/{id}/{action}", entries[0].Route)
	assert.Equal(t, "console", entries[0].Conversation)
	// (Its pool removes it in the background.)
	waitFor(t, func() bool {
		code, _ := get(t, hs.URL, "/ui/sandboxes/"+id, observeAdminKey)
		return code == http.StatusNotFound
	})
}

func mustRequest(t *testing.T, method, u string, form url.Values) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

func jarCookie(c *http.Client, u *url.URL) string {
	cu := *u
	cu.Path = "/ui/"
	var parts []string
	for _, ck := range c.Jar.Cookies(&cu) {
		parts = append(parts, ck.Name+"="+ck.Value)
	}
	return strings.Join(parts, "; ")
}

// The whole console (pages, script, styles and the vendored terminal) is
// at most 300 KiB gzipped, and refers to nothing of another origin.
func TestConsoleSize(t *testing.T) {
	var total int
	root := "ui"
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), "LICENSE") || strings.HasSuffix(d.Name(), ".md") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(data)
		zw.Close()
		total += buf.Len()
		if strings.HasSuffix(p, ".html") || strings.HasSuffix(p, ".css") || strings.HasSuffix(p, "app.js") {
			assert.NotRegexp(t, `(src|href)="https?:`, string(data), "%s links another origin", p)
		}
		return nil
	})
	require.NoError(t, err)
	t.Logf("console: %d KiB gzipped", total>>10)
	assert.LessOrEqual(t, total, 300<<10)
}

// chromium finds the browser, or skips (fails with SBX_REQUIRE_CHROMIUM).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SBX_REQUIRE_CHROMIUM") != "" {
		t.Fatal("SBX_REQUIRE_CHROMIUM is set and no chromium is on PATH (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// A real browser uses the console: it logs in, sees a sandbox an agent
// made, browses and downloads a file, sees the agent's command in the
// trail, runs a terminal (keys, resize, colours), sees a pool's figures
// move without a reload, and deletes the sandbox. Each page's layout is
// checked by geometry and screenshotted.
func TestConsoleInBrowser(t *testing.T) {
	bin := chromium(t)
	s, hs := consoleServer(t)
	shots := os.Getenv("SBX_TEST_ARTIFACTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "sandboxkit-console")
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))

	// Wait for the pool's member, so the next create is a claim.
	waitFor(t, func() bool {
		st := s.PoolStats()
		return len(st) == 1 && st[0].Ready == 1
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The browser starts with the first Run; every step after that has a
	// deadline of its own.
	_, err := chromedp.Run(ctx, chromedp.Navigate("about:blank"))
	require.NoError(t, err, "starting chromium")
	browser := ctx
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(browser, time.Minute) }
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := step()
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...), what)
	}
	eval := func(what, expr string) any {
		t.Helper()
		ctx, cancel := step()
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr, chromedp.EvalAwaitPromise))
		require.NoError(t, err, what)
		return v
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := step()
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		require.NoError(t, err, sel)
		return v
	}
	var onFail func() string // what the page shows, for a failed poll
	poll := func(what, expr string, within time.Duration) {
		t.Helper()
		ctx, cancel := step()
		defer cancel()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within)))
		if err != nil && onFail != nil {
			t.Logf("%s failed; the page shows:\n%s", what, onFail())
		}
		require.NoError(t, err, what)
	}
	shot := func(name string) {
		t.Helper()
		ctx, cancel := step()
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644))
	}
	noPwn := func(where string) {
		t.Helper()
		assert.Equal(t, false, eval("pwned?", `window.pwned !== undefined`), "planted markup ran on %s", where)
	}
	// layoutOK: nothing overflows the window sideways, and each selector
	// names a visible box at least w x h inside it.
	layoutOK := func(where string, boxes map[string][2]float64) {
		t.Helper()
		assert.Equal(t, false, eval("overflow", `document.documentElement.scrollWidth > window.innerWidth + 1`), "%s overflows the window sideways", where)
		for sel, min := range boxes {
			r := eval("box "+sel, fmt.Sprintf(`(() => { const b = document.querySelector(%q).getBoundingClientRect(); return [b.x, b.y, b.width, b.height, window.innerWidth]; })()`, sel)).([]any)
			x, w, h, win := r[0].(float64), r[2].(float64), r[3].(float64), r[4].(float64)
			assert.True(t, w >= min[0] && h >= min[1] && x >= 0 && x+w <= win+1, "%s: %s is at x=%v, %vx%v (window %v), want at least %vx%v inside", where, sel, x, w, h, win, min[0], min[1])
		}
	}
	line := func(want string) string { // a JS test that some line of the terminal is want
		return fmt.Sprintf(`(() => { const b = window.sbxTerm.buffer.active; for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true) === %q) return true; return false; })()`, want)
	}

	// Log in.
	do("open", chromedp.Navigate(hs.URL+"/ui/"), chromedp.WaitVisible("#login-form"))
	layoutOK("login", map[string][2]float64{"#key": {200, 20}, "#login-button": {40, 20}})
	shot("login")
	do("log in", chromedp.SendKeys("#key", observeAdminKey), chromedp.Click("#login-button"))
	do("logged in", chromedp.WaitVisible("#sandbox-table"))

	// An agent makes a sandbox (claimed from the pool), writes files and
	// runs a command; the page shows them without a reload.
	id := toolCall(t, hs.URL, "conv-browser", "create_sandbox", nil).SandboxID
	toolCall(t, hs.URL, "conv-browser", "write_file", map[string]any{"sandbox_id": id, "path": "report.txt", "content": "the report\n"})
	toolCall(t, hs.URL, "conv-browser", "write_file", map[string]any{"sandbox_id": id, "path": plantedFile, "content": "x"})
	toolCall(t, hs.URL, "conv-browser", "execute", map[string]any{"sandbox_id": id, "command": plantedCommand})
	do("row appears", chromedp.WaitVisible(fmt.Sprintf(`#sandbox-table tr[data-id="%s"]`, id)))
	poll("pool moved", `document.querySelector('[data-pool="main"] .claimed')?.textContent === "1"`, 30*time.Second)
	assert.Equal(t, "conv:conv-browser", text(fmt.Sprintf(`#sandbox-table tr[data-id="%s"] .owner`, id)))
	// The filter hides rows that do not match.
	visible := `[...document.querySelectorAll("#sandbox-table tbody tr[data-id]")].filter(r => !r.hidden).length`
	do("filter", chromedp.SendKeys("#filter", "no-such-sandbox"))
	assert.Equal(t, 0.0, eval("filtered", visible))
	eval("unfilter", `(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); })()`)
	assert.GreaterOrEqual(t, eval("unfiltered", visible).(float64), 1.0)
	layoutOK("overview", map[string][2]float64{"#sandbox-table": {900, 40}, "header.top": {1200, 30}, "#pools": {200, 40}, "#health": {200, 60}})
	noPwn("overview")
	shot("overview")

	// The sandbox's page: files, download, commands.
	do("sandbox page", chromedp.Click(fmt.Sprintf(`#sandbox-table tr[data-id="%s"] a`, id)), chromedp.WaitVisible("#files"))
	files := text("#files")
	assert.Contains(t, files, "report.txt")
	assert.Contains(t, files, plantedFile, "the planted file name shows as text")
	assert.Contains(t, text("#command-table"), plantedCommand, "the planted command shows as text")
	downloaded := eval("download", `fetch([...document.querySelectorAll("#files a")].find(a => a.textContent === "report.txt").href).then(r => r.text())`)
	assert.Equal(t, "the report\n", downloaded)
	noPwn("sandbox page")

	// The terminal: keys, a resize, colours.
	do("terminal", chromedp.Click("#term-open"))
	poll("terminal started", `document.getElementById("term").dataset.terminal !== undefined`, 30*time.Second)
	do("type", chromedp.Focus(".xterm-helper-textarea"), typeKeys("printf '\\033[31m%s\\033[0m\\n' red-$((6*7)); stty size\n"))
	screen := func() string {
		return eval("screen", `(() => { const b = window.sbxTerm.buffer.active; let s = ""; for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + "\n"; return s; })()`).(string)
	}
	onFail = screen
	poll("output", line("red-42"), 30*time.Second)
	red := eval("colour", `(() => { const b = window.sbxTerm.buffer.active; for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l.translateToString(true) === "red-42") return l.getCell(0).isFgPalette() && l.getCell(0).getFgColor() === 1; } return false; })()`)
	assert.Equal(t, true, red, "red-42 is not drawn in palette colour 1:\n%s", screen())
	size := eval("size", `[window.sbxTerm.rows, window.sbxTerm.cols]`).([]any)
	poll("stty size", line(fmt.Sprintf("%v %v", size[0], size[1])), 15*time.Second)
	// A narrower window resizes the terminal, and the sandbox sees it.
	do("resize", chromedp.EmulateViewport(900, 900))
	poll("narrower", fmt.Sprintf(`window.sbxTerm.cols < %v`, size[1]), 10*time.Second)
	size = eval("size", `[window.sbxTerm.rows, window.sbxTerm.cols]`).([]any)
	do("stty again", chromedp.Focus(".xterm-helper-textarea"), typeKeys("stty size\n"))
	poll("resized in the sandbox", line(fmt.Sprintf("%v %v", size[0], size[1])), 15*time.Second)
	do("window back", chromedp.EmulateViewport(1280, 900))
	layoutOK("sandbox", map[string][2]float64{"#term": {600, 300}, "#files": {300, 40}, "#command-table": {600, 40}})
	shot("sandbox")

	// Delete it from its page.
	do("delete", chromedp.Click("#action-delete"), chromedp.WaitVisible("#sandbox-table"))
	waitFor(t, func() bool {
		code, _ := get(t, hs.URL, "/ui/sandboxes/"+id, observeAdminKey)
		return code == http.StatusNotFound
	})
	poll("row gone", fmt.Sprintf(`document.querySelector('#sandbox-table tr[data-id="%s"]') === null`, id), 15*time.Second)

	// The API docs render the three documents in the page (no key).
	for api, want := range map[string]string{"tools": "/tools/create_sandbox", "admin": "/admin/audit", "opensandbox": "/v1/sandboxes"} {
		do("docs "+api, chromedp.Navigate(hs.URL+"/docs?api="+api))
		poll("docs "+api+" rendered", fmt.Sprintf(`(document.getElementById("doc")?.shadowRoot?.textContent || "").includes(%q)`, want), 30*time.Second)
		layoutOK("docs "+api, map[string][2]float64{"#doc": {900, 400}, "#apis": {900, 20}})
		if api == "tools" {
			shot("docs")
		}
	}
	t.Logf("screenshots in %s", shots)
}

// typeKeys types keys as a person does: a keyDown that carries the text
// (so the browser makes the keypress and input events) and a keyUp, as
// Puppeteer's keyboard does. chromedp's own key events add a separate
// "char" event, which xterm.js takes as a second key.
func typeKeys(keys string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			var down *input.DispatchKeyEventParams
			for _, k := range kb.Encode(r) {
				switch k.Type {
				case kb.KeyDown:
					down = k
					continue
				case kb.KeyChar:
					down.Text, down.UnmodifiedText = k.Text, k.UnmodifiedText
					continue
				}
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *down); err != nil {
					return err
				}
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// On a backend with containers, a sandbox's page shows the memory and CPU
// time of its own cgroup, and they move with what it does.
func TestConsoleUsageNative(t *testing.T) {
	s, _, _ := nativeServer(t, func(o *server.Options) { o.APIKey, o.AdminKey = observeAPIKey, observeAdminKey })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	id := toolCall(t, hs.URL, "conv-usage", "create_sandbox", nil).SandboxID
	require.NotEmpty(t, id)
	usage := func() (mem string, cpu float64) {
		code, page := get(t, hs.URL, "/ui/sandboxes/"+id, observeAdminKey)
		require.Equal(t, http.StatusOK, code, "%s", page)
		m := regexp.MustCompile(`id="usage-memory">([^<]+)<`).FindSubmatch(page)
		c := regexp.MustCompile(`id="usage-cpu">([0-9.]+) s<`).FindSubmatch(page)
		require.NotNil(t, m, "no memory figure on the page")
		require.NotNil(t, c, "no CPU figure on the page: %s", regexp.MustCompile(`id="usage-cpu">[^<]*`).Find(page))
		fmt.Sscan(string(c[1]), &cpu)
		return string(m[1]), cpu
	}
	mem, before := usage()
	assert.Regexp(t, `^[0-9.]+ (KiB|MiB)$`, mem)
	// A fixed amount of work (not a wall-clock second, which a loaded
	// machine may spend on other things): its CPU time shows.
	res := toolCall(t, hs.URL, "conv-usage", "execute", map[string]any{"sandbox_id": id, "command": "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo $i"})
	require.False(t, res.IsError, res.Output)
	require.Contains(t, res.Output, "100000")
	_, after := usage()
	assert.Greater(t, after-before, 0.05, "CPU time before %.2f s, after the work %.2f s", before, after)
}
