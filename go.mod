module bitgo

go 1.26.0

require golang.org/x/sys v0.49.0

require github.com/klauspost/cpuid/v2 v2.4.2
