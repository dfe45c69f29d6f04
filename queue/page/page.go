// Package page is the buyer's page of the waiting rooms: one HTML file and
// one script, embedded (no build step, no CDN), served by `seckill serve`
// under Prefix. The buyer names the sale (?activity=<id>) and themselves
// (a user id for a gateway's X-User-ID, or a bearer token), joins, watches
// their place, gets a Buy button once admitted, and sees what became of
// the order. It talks to the API of the server that serves it, and nothing
// else.
package page

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is the path the page is served under.
const Prefix = "/queue/"

//go:embed assets
var assets embed.FS

// Handler serves the page. Its Content-Security-Policy lets it run its own
// script and call its own server only; no other site may frame it.
func Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
			"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "only GET and HEAD are allowed here")
			return
		}
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			// the page's files are relative to Prefix
			u := *r.URL
			u.Path = Prefix
			http.Redirect(w, r, u.String(), http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(sub, name); err != nil || strings.Contains(name, "/") {
			writeError(w, http.StatusNotFound, "not_found", "no such page resource")
			return
		}
		files.ServeHTTP(w, r)
	})
}

// writeError answers as the API does: {"error":{"code","message"}}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]map[string]string{"error": {"code": code, "message": msg}})
}
