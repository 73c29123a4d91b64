// Package layout holds a test of the module's import graph: which package may import which
// (docs/architecture.md). It has no code of its own.
package layout
