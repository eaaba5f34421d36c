// Package apidocs serves the rendered API documentation of sbx serve: a
// page (GET /docs) that shows the server's OpenAPI documents
// (/openapi/tools.json, admin.json and opensandbox.json, made by package
// server) with RapiDoc, and the page's assets (GET /docs/{file}).
//
// Everything the page loads is embedded in the binary and served from
// /docs/: no CDN, no web fonts, no other origin, so the page works in a
// browser without internet. RapiDoc is vendored from npm (see README.md
// for its version, licence and how to update it), stored gzip-compressed
// and served so to clients that accept gzip.
package apidocs

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed index.html docs.js docs.css rapidoc-min.js.gz rapidoc-LICENSE.txt rapidoc-min.js.LICENSE.txt
var files embed.FS

// RapiDocVersion is the vendored RapiDoc's npm version.
const RapiDocVersion = "9.3.8"

// CSP is the Content-Security-Policy of the page. Only this server's own
// scripts, styles, images and fonts load ('self'), and the page talks to
// this server only (connect-src: the documents and RapiDoc's "try it").
// What RapiDoc needs beyond 'self':
//   - style-src 'unsafe-inline': RapiDoc is a Lit web component whose
//     templates carry style attributes and <style> elements in its shadow
//     roots; without it the page is unstyled. Inline styles cannot run
//     code, and scripts stay 'self' only (no inline script, no eval).
//   - img-src data: the icons of its stylesheets are data: URIs.
//
// object-src, base-uri and frame-ancestors 'none' and form-action 'self'
// close the rest. RapiDoc's font loading (Google's Open Sans) is switched
// off on the element (load-fonts="false") and would be refused here
// anyway (font-src 'self').
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// asset is one file the page loads.
type asset struct {
	ctype string
	// data is the file; gz, when set, its gzip form, and data is made
	// from it on first use (few clients do not take gzip).
	data func() []byte
	gz   []byte
	etag string
}

var assets = sync.OnceValue(func() map[string]*asset {
	m := map[string]*asset{}
	add := func(name, ctype string, data []byte) {
		m[name] = &asset{ctype: ctype, data: func() []byte { return data }, etag: etag(data)}
	}
	add("docs.js", "text/javascript; charset=utf-8", mustRead("docs.js"))
	add("docs.css", "text/css; charset=utf-8", mustRead("docs.css"))
	add("licenses.txt", "text/plain; charset=utf-8", Licenses())
	gz := mustRead("rapidoc-min.js.gz")
	m["rapidoc-min.js"] = &asset{ctype: "text/javascript; charset=utf-8", gz: gz, etag: etag(gz),
		data: sync.OnceValue(func() []byte { return gunzip(gz) })}
	return m
})

func mustRead(name string) []byte {
	data, err := files.ReadFile(name)
	if err != nil {
		panic("apidocs: " + err.Error()) // embedded: cannot happen
	}
	return data
}

func gunzip(gz []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		panic("apidocs: the embedded bundle: " + err.Error())
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		panic("apidocs: the embedded bundle: " + err.Error())
	}
	return data
}

func etag(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// Licenses is the text of the licences of the vendored renderer: RapiDoc's
// own and the notices of what its bundle holds.
func Licenses() []byte {
	var b bytes.Buffer
	b.WriteString("The API documentation page of sandboxkit renders with RapiDoc " + RapiDocVersion +
		" (https://github.com/rapi-doc/RapiDoc), vendored from npm.\n\n")
	b.WriteString("== RapiDoc's licence (MIT) ==\n\n")
	b.Write(mustRead("rapidoc-LICENSE.txt"))
	b.WriteString("\n== The licence notices of the libraries bundled in rapidoc-min.js ==\n\n")
	b.Write(mustRead("rapidoc-min.js.LICENSE.txt"))
	return b.Bytes()
}

// Assets lists the files served under /docs/, for tests.
func Assets() []string {
	var names []string
	for name := range assets() {
		names = append(names, name)
	}
	return names
}

// Page serves the documentation page (GET /docs).
func Page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/html; charset=utf-8")
	page := mustRead("index.html")
	h.Set("ETag", etag(page))
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(page))
}

// Asset serves the page's file named by the path's {file} (GET
// /docs/{file}), gzip-compressed when it is stored so and the client takes
// gzip.
func Asset(w http.ResponseWriter, r *http.Request) {
	a := assets()[r.PathValue("file")]
	if a == nil {
		http.Error(w, "404 no such file of the API documentation page", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	// Revalidated each time (cheap: the ETag answers 304), so a new
	// server's assets are never mixed with an old page.
	h.Set("Cache-Control", "no-cache")
	data := a.data
	if a.gz != nil {
		h.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			h.Set("ETag", a.etag)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.gz))
			return
		}
		// The same content, unencoded: a weak validator of its own.
		h.Set("ETag", "W/"+a.etag)
	} else {
		h.Set("ETag", a.etag)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data()))
}

// acceptsGzip reports whether an Accept-Encoding header takes gzip (not
// with q=0).
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "x-gzip" && coding != "*" {
			continue
		}
		if name, v, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.TrimSpace(name) == "q" {
			if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q <= 0 {
				return false
			}
		}
		return true
	}
	return false
}
