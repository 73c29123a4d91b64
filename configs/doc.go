// Package configs owns the gateway's YAML configuration: the files shipped in this folder
// (gateway.yaml is the default) and the code that loads, defaults and validates them.
//
// Parsing is strict: an unknown key is an error that names it. Zero values mean defaults, which
// Load fills in; Validate reports every problem with the name of the field to change. Relative
// paths in a file are resolved against the folder of that file. Config values are passed to
// constructors; nothing here is kept in globals. This package imports no other package of the
// repository.
package configs
