//go:build !linux

package main

// dropStartPages: only Linux's madvise is used (the agent runs on Linux
// nodes); elsewhere nothing is dropped.
func dropStartPages() (int, error) { return 0, nil }
