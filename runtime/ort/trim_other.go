//go:build !linux

package ort

func trimHeap() {}
