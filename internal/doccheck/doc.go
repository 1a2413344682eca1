// Package doccheck holds the tests that keep the project's documents honest: every test that
// docs/conformance.md and docs/decisions.md name must exist in the package they name, and every
// label of a ruling or protocol note that code or documents cite must be defined in
// docs/decisions.md or docs/protocol-notes.md.
package doccheck
