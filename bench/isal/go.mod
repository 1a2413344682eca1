module github.com/crem-project/crem/bench/isal

go 1.26.0

require github.com/crem-project/crem v0.0.0

require (
	github.com/klauspost/cpuid/v2 v2.3.0 // indirect
	github.com/klauspost/reedsolomon v1.14.2 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/crem-project/crem => ../..
