// Package conform is a black-box conformance runner for CREM implementations, in the manner of
// h2spec for HTTP/2: it plays one side of the protocol over real UDP sockets against another
// implementation's CREM sender function (CSF) or CREM receiver function (CRF), runs scenarios
// each tied to one requirement of the draft or one ruling, and reports PASS, FAIL (what was
// expected, what came, the packets in hex) or SKIP (an OPTIONAL part the target does not do, or
// a long scenario not asked for).
//
// Against a CSF the runner plays the CRF: it answers HELLO and PARAM_UPDATE, sends the RDMA
// sender's source packets into the target, checks every REPAIR it gets by recomputing the
// symbols itself (package fec, over the source packets it sent), asks for coded
// retransmissions, sends loss and path reports. Against a CRF it plays the CSF: it opens flows
// with HELLO and PARAM_UPDATE, injects source packets the way the target's mode needs them,
// sends REPAIRs it computed, answers REPAIR_REQUESTs, and checks the packets the target
// delivers byte for byte.
//
// The scenario registry is built by Scenarios; Run runs a selection with a Config and returns a
// Report, which writes itself as a table, JSON or JUnit XML. docs/conform.md tells how to point
// the runner at an implementation.
package conform
