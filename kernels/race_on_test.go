//go:build race

package kernels

// raceEnabled: under the race detector the exhaustive kernel comparisons run on fewer
// shapes (the detector slows the reference's loops tenfold).
const raceEnabled = true
