// Package web holds the gateway's browser pages as an embedded file system.
//
// FS has two top-level directories:
//
//	static/  hand-written HTML and CSS: index.html (the demo conversation page),
//	         ops.html (the operator page) and style.css.
//	dist/    the JavaScript bundles built from src/ by `npm run build:web`
//	         (esbuild, minified ESM): app.js, ops.js and their source maps.
//
// The gateway serves "/" from static/index.html, "/ops" from static/ops.html and
// "/assets/*" from dist/*. Before a build dist/ holds only .gitkeep, so the pages
// load without their scripts; the embed still compiles.
package web

import "embed"

// FS is the embedded page tree described in the package documentation.
//
//go:embed all:static all:dist
var FS embed.FS
