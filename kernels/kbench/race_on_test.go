//go:build race

package kbench

// raceEnabled: the race detector allocates where plain builds do not.
const raceEnabled = true
