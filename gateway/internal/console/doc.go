// Package console is the gateway's console in the browser: its page, styles and scripts,
// embedded in the binary (assets/, plain HTML, CSS and JavaScript: no build step), with the
// headers they are served with, and the live view's snapshot, built from the exposition of
// the gateway's own metric series when the page asks for it. The page computes rates,
// percentiles and the last minute's histograms from successive snapshots, so nothing is
// kept or counted for it on the server: a gateway with no page open does no work for it.
//
// It knows nothing of HTTP servers or of the gateway's types: package gateway routes /ui/
// to it (console.go there) and fills a Snapshot's model states. It imports nothing of this
// module.
package console
