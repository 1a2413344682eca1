// Package doccheck holds the tests that keep the project's documents honest: every test that
// docs/conformance.md names must exist in the package it names.
package doccheck
