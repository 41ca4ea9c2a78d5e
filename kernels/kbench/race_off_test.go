//go:build !race

package kbench

const raceEnabled = false
