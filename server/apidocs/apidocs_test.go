package apidocs

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// bundleSHA256 is the SHA-256 of dist/rapidoc-min.js of rapidoc@9.3.8 on
// npm (README.md).
const bundleSHA256 = "affbd173a65e870e18f392cca963113bcdafb6e50e88cd2f6a834a65b22db94d"

func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /docs", Page)
	mux.HandleFunc("GET /docs/{file}", Asset)
	return mux
}

func get(t *testing.T, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	handler().ServeHTTP(rec, req)
	return rec
}

// The embedded bundle is npm's, unchanged, and its licences are beside it.
func TestVendoredBundle(t *testing.T) {
	gz := mustRead("rapidoc-min.js.gz")
	sum := sha256.Sum256(gunzip(gz))
	if got := hex.EncodeToString(sum[:]); got != bundleSHA256 {
		t.Errorf("rapidoc-min.js: SHA-256 %s, want %s (npm's rapidoc@%s)", got, bundleSHA256, RapiDocVersion)
	}
	lic := string(Licenses())
	for _, want := range []string{"MIT License", "Mrinmoy Majumdar", "BSD-3-Clause", RapiDocVersion} {
		if !strings.Contains(lic, want) {
			t.Errorf("the licences lack %q", want)
		}
	}
	page := string(mustRead("index.html"))
	if !strings.Contains(page, "RapiDoc "+RapiDocVersion) && !strings.Contains(page, "RapiDoc (MIT)") {
		t.Error("the page does not credit RapiDoc")
	}
}

// The page loads only what this server serves: every src and href is a
// path of /docs/ (an embedded asset) or /openapi/, nothing names another
// origin, and RapiDoc's web fonts are off.
func TestPageLoadsOnlyEmbeddedAssets(t *testing.T) {
	rec := get(t, "/docs", nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /docs: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if got := rec.Header().Get("Content-Security-Policy"); got != CSP {
		t.Errorf("CSP %q", got)
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no nosniff")
	}
	doc, err := html.Parse(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	var rapidoc *html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "rapi-doc" {
				rapidoc = n
			}
			if n.Data == "script" && attr(n, "src") == "" {
				t.Error("an inline script: the CSP refuses it")
			}
			if attr(n, "style") != "" || n.Data == "style" {
				t.Error("inline style on the page: keep it in docs.css")
			}
			for _, a := range n.Attr {
				if a.Key == "src" || a.Key == "href" || strings.HasPrefix(a.Key, "on") {
					refs = append(refs, a.Key+"="+a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	assets := Assets()
	docs := 0
	for _, ref := range refs {
		key, v, _ := strings.Cut(ref, "=")
		switch {
		case strings.HasPrefix(key, "on"):
			t.Errorf("an inline event handler %s: the CSP refuses it", ref)
		case strings.HasPrefix(v, "/docs/"):
			if !slices.Contains(assets, strings.TrimPrefix(v, "/docs/")) {
				t.Errorf("%s: not an embedded asset (%v)", ref, assets)
			}
		case strings.HasPrefix(v, "/docs?api="):
			docs++
		case regexp.MustCompile(`^/openapi/[a-z]+\.json$`).MatchString(v):
		default:
			t.Errorf("%s: the page may load only its own assets and documents", ref)
		}
	}
	if docs != 3 {
		t.Errorf("%d links to documents, want 3 (tools, admin, opensandbox)", docs)
	}
	if rapidoc == nil || attr(rapidoc, "load-fonts") != "false" || attr(rapidoc, "allow-spec-url-load") != "false" {
		t.Error(`<rapi-doc> must have load-fonts="false" (else it fetches Google's fonts) and allow-spec-url-load="false"`)
	}
	// None of our files names another origin.
	for _, name := range []string{"index.html", "docs.js", "docs.css"} {
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).FindString(string(mustRead(name))); m != "" {
			t.Errorf("%s names %s", name, m)
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// The assets answer with their content types, the bundle gzip-compressed
// when the client takes gzip (and whole otherwise), and revalidate.
func TestAssets(t *testing.T) {
	for _, c := range []struct{ name, ctype string }{
		{"docs.js", "text/javascript; charset=utf-8"},
		{"docs.css", "text/css; charset=utf-8"},
		{"rapidoc-min.js", "text/javascript; charset=utf-8"},
		{"licenses.txt", "text/plain; charset=utf-8"},
	} {
		rec := get(t, "/docs/"+c.name, nil)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != c.ctype || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %q", c.name, rec.Code, rec.Header().Get("Content-Type"))
		}
		if rec.Header().Get("Content-Encoding") != "" {
			t.Errorf("%s: encoded for a client that takes no encoding", c.name)
		}
		etag := rec.Header().Get("ETag")
		if again := get(t, "/docs/"+c.name, map[string]string{"If-None-Match": etag}); etag == "" || again.Code != http.StatusNotModified {
			t.Errorf("%s: ETag %q, revalidation %d", c.name, etag, again.Code)
		}
	}

	plain := get(t, "/docs/rapidoc-min.js", nil)
	sum := sha256.Sum256(plain.Body.Bytes())
	if hex.EncodeToString(sum[:]) != bundleSHA256 {
		t.Error("the unencoded bundle is not the bundle")
	}
	for _, ae := range []string{"gzip", "gzip, deflate, br, zstd", "br;q=1.0, gzip;q=0.8", "*"} {
		rec := get(t, "/docs/rapidoc-min.js", map[string]string{"Accept-Encoding": ae})
		if rec.Header().Get("Content-Encoding") != "gzip" || !strings.Contains(rec.Header().Get("Vary"), "Accept-Encoding") {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, Vary %q", ae, rec.Header().Get("Content-Encoding"), rec.Header().Get("Vary"))
			continue
		}
		if rec.Body.Len() > plain.Body.Len()/3 {
			t.Errorf("gzip: %d bytes of %d", rec.Body.Len(), plain.Body.Len())
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(zr)
		if !bytes.Equal(data, plain.Body.Bytes()) {
			t.Error("the gzip answer is not the bundle")
		}
		if rec.Header().Get("ETag") == plain.Header().Get("ETag") {
			t.Error("the same ETag for both encodings")
		}
	}
	for _, ae := range []string{"", "identity", "gzip;q=0", "br, gzip; q=0.000", "deflate"} {
		if rec := get(t, "/docs/rapidoc-min.js", map[string]string{"Accept-Encoding": ae}); rec.Header().Get("Content-Encoding") != "" {
			t.Errorf("Accept-Encoding %q: encoded as %q", ae, rec.Header().Get("Content-Encoding"))
		}
	}
	for _, name := range []string{"nope.js", "rapidoc-min.js.gz", "index.html", "..%2fapidocs.go"} {
		if rec := get(t, "/docs/"+name, nil); rec.Code != http.StatusNotFound {
			t.Errorf("/docs/%s: %d", name, rec.Code)
		}
	}
}
