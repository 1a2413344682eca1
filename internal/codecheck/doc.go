// Package codecheck holds checks over the module's own source that keep it one a reader can
// carry on: no function of the product beyond a cyclomatic complexity a reader holds in their
// head (Complexity, TestProductComplexity), no planted fault named outside the engines' hook
// files (TestNoFaultNamedInProduct), and no cgo in the module: code that links C, such as the
// ISA-L benchmark in bench/isal, is a nested module of its own (TestCgoOnlyInNestedModules). The
// checks are tests, so `go test ./...` runs them.
package codecheck
