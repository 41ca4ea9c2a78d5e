package main

// genExp writes experimental variants for measurements (not part of the build: the output
// goes to files with the build tag exp; see kernels/exp_test.go).
func genExp() {}
