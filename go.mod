module bitgo

go 1.26.0

require (
	github.com/klauspost/cpuid/v2 v2.4.2
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/sys v0.49.0
)

require github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
