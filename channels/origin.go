package channels

import (
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// originAllowed implements the pre-upgrade Origin check (transport.ex
// check_origin; docs/PHOENIX.md §1.2 step 2). No Origin header: allowed
// (non-browser clients). An Origin whose host equals the request's Host:
// allowed. Otherwise the Origin must match one of patterns:
//   - "example.com" matches the Origin's host name (any port);
//   - "*.example.com" matches subdomains and the apex example.com;
//   - "example.com:8080" (with a port) matches host and port;
//   - "https://*.example.com" (with a scheme) also requires the scheme.
//
// Patterns are path.Match globs, compared case-insensitively.
func originAllowed(r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	host := strings.ToLower(u.Host)
	hostname := strings.ToLower(u.Hostname())
	scheme := strings.ToLower(u.Scheme)
	for _, p := range patterns {
		p = strings.ToLower(p)
		target := hostname
		rest := p
		if s, r, ok := strings.Cut(p, "://"); ok {
			if s != scheme && s != "*" {
				continue
			}
			rest = r
		}
		if _, _, err := net.SplitHostPort(rest); err == nil {
			target = host
		}
		if ok, _ := path.Match(rest, target); ok {
			return true
		}
		if apex, ok := strings.CutPrefix(rest, "*."); ok && apex == target {
			return true
		}
	}
	return false
}
