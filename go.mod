module github.com/crem-project/crem

go 1.26

require (
	golang.org/x/sys v0.45.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/gopacket/gopacket v1.7.7 // indirect
	github.com/klauspost/cpuid/v2 v2.3.0 // indirect
	github.com/klauspost/reedsolomon v1.14.2 // indirect
)
