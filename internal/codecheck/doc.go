// Package codecheck holds checks over the module's own source that keep it one a reader can
// carry on: no function of the product beyond a cyclomatic complexity a reader holds in their
// head (Complexity, TestProductComplexity), and no planted fault named outside the engines'
// hook files (TestNoFaultNamedInProduct). The checks are tests, so `go test ./...` runs them.
package codecheck
