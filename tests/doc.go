// Package tests holds bitgo's cross-process tests: real `bitd serve` processes with Go
// clients in other processes, faults (clients and daemons killed mid-call, SIGTERM
// drains) and load. They are behind the build tag "integration":
//
//	go test -tags integration ./tests/...                          # make test-integration
//	BITD_SOAK=60s go test -tags integration -run Load ./tests/      # the soak of make bench
//
// BITD_BIN names the bitd binary to test (the Makefile sets it); without it the tests
// build one.
package tests
