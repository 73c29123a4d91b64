// Package configs owns the gateway's YAML configuration: the files shipped in this folder
// (gateway.yaml is the default) and the code that loads, defaults and validates them.
//
// Parsing is strict: an unknown key is an error that names it. Zero values mean defaults, which
// Load fills in (defaults.go is the only place that states them); Validate reports every
// problem with the name of the field to change. The keys a model file can tell (its input,
// output, preprocessing and labels) stay empty until Complete fills them from ModelFacts,
// which the caller reads from the model (cmd/gateway, through runtime/ort): this package
// imports neither ONNX Runtime nor any other package of the repository. Relative paths in a
// file are resolved against the folder of that file. Config values are passed to
// constructors; nothing here is kept in globals.
package configs
