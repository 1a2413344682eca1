package kdrop

// The program is compiled once and the object committed: building crem needs no clang.
// Regenerate with clang, llvm-strip and libbpf's headers (Debian: clang llvm libbpf-dev):
//
//	go generate ./reporter/kdrop
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type event -type lost_key kdrop kdrop.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror
