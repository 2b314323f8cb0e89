package gateway

import (
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// assetHandler serves the files of dir under /assets/ (and /static/):
// a path naming no file answers the API's JSON 404 not_found
// (http.FileServerFS alone answers plain text), a directory too.
func assetHandler(prefix string, dir fs.FS) http.Handler {
	files := http.StripPrefix(prefix, http.FileServerFS(dir))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, prefix)), "/")
		if st, err := fs.Stat(dir, name); err != nil || st.IsDir() {
			writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such asset: "+name))
			return
		}
		files.ServeHTTP(w, r)
	})
}
