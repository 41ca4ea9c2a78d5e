package main

func genGemvAVX2() {}
