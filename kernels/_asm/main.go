package main

import . "github.com/mmcloughlin/avo/build"

func main() { Generate() }
