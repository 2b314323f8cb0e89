package gateway

import (
	"io/fs"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/relaygw/relay/web"
)

// Handler returns the node's HTTP routes:
//
//	GET  /socket/websocket            Phoenix socket (token param or authToken subprotocol)
//	GET, POST /socket/longpoll        Phoenix LongPoll transport (same sockets, polled)
//	POST /api/sessions/{id}/events    post an event (API key or JWT)
//	POST /api/sessions/{id}/turns/{turn}/stop  stop a running turn (API key or JWT)
//	POST /api/sessions/{id}/interrupts/{iid}   answer an interrupt (API key or JWT)
//	GET  /api/sessions/{id}           session view (API key or JWT)
//	GET  /healthz, /readyz            liveness, readiness (false while draining)
//	GET  /metrics                     Prometheus metrics
//	/admin/...                        admin routes (admin token), incl. /admin/debug/pprof/
//	GET  /, /ops, /assets/*           demo and ops pages
func (n *Node) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, n.metrics.observeHTTP)
	// Mounted per method so that any other method gets the router's 405
	// method_not_allowed body, not the transports' bare 400.
	r.Method(http.MethodGet, "/socket/websocket", n.endpoint)
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodOptions} {
		r.Method(m, "/socket/longpoll", n.longpoll)
	}
	r.Route("/api", func(r chi.Router) {
		r.Use(n.auth.requireAPI)
		r.Post("/sessions/{id}/events", n.handlePostEvent)
		r.Post("/sessions/{id}/turns/{turn}/stop", n.handleStopTurn)
		r.Post("/sessions/{id}/interrupts/{iid}", n.handleAnswerInterrupt)
		r.Get("/sessions/{id}", n.handleGetSession)
	})
	r.Route("/admin", func(r chi.Router) {
		r.Use(n.auth.requireAdmin)
		r.Get("/node", n.handleAdminNode)
		r.Get("/sessions", n.handleAdminSessions)
		r.Post("/drain", n.handleAdminDrain)
		r.Get("/muster", n.handleAdminMuster)
		r.Get("/viewers", n.handleAdminViewers)
		n.mountAdminOps(r) // cluster, undrain, nodes/{node}/drain|undrain, stats, sessions/{id}
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.HandleFunc("/debug/pprof/{name}", func(w http.ResponseWriter, r *http.Request) {
			pprof.Handler(chi.URLParam(r, "name")).ServeHTTP(w, r)
		})
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", n.handleReady)
	r.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	n.mountWeb(r)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such route"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route"))
	})
	return r
}

// handleReady answers /readyz: 503 draining once a drain started, 503
// not_ready with the failing checks while the node cannot do its job (see
// readiness), else 200.
func (n *Node) handleReady(w http.ResponseWriter, _ *http.Request) {
	if n.draining.Load() {
		writeError(w, errorf(http.StatusServiceUnavailable, CodeDraining, "draining"))
		return
	}
	if ok, reasons := n.readiness.state(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": CodeNotReady, "message": strings.Join(reasons, "; "), "reasons": reasons,
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// mountWeb serves the embedded demo (/) and ops (/ops) pages and the bundles
// built into web/dist (/assets/*).
func (n *Node) mountWeb(r chi.Router) {
	static, _ := fs.Sub(web.FS, "static")
	dist, _ := fs.Sub(web.FS, "dist")
	if _, err := fs.Stat(dist, "app.js"); err != nil {
		// A binary built without `npm run build:web` serves pages whose scripts 404.
		n.log.Warn("the pages' bundles are missing from this build (web/dist): / and /ops load without their scripts; build with `make run` or `make build`, or run `npm run build:web` first")
	}
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			http.ServeFileFS(w, r, static, name)
		}
	}
	r.Get("/", page("index.html"))
	r.Get("/ops", page("ops.html"))
	r.Handle("/static/*", assetHandler("/static/", static))
	r.Handle("/assets/*", assetHandler("/assets/", dist))
}
