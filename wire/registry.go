package wire

import (
	"fmt"
	"net/netip"
)

// PrivateUse is the first value of the upper quarter of an 8-bit registry space. The draft
// reserves that quarter for private use: this package parses such values and the engines must
// never act on them (RULINGS C1).
const PrivateUse = 192

// registryString names a value of an 8-bit registry: its assigned name, or what kind of
// unassigned value it is.
func registryString(names []string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	if v >= PrivateUse {
		return fmt.Sprintf("private use (%d)", v)
	}
	return fmt.Sprintf("unassigned (%d)", v)
}

// Scheme identifies an FEC scheme (draft section 13, RULINGS C1).
type Scheme uint8

// The FEC schemes of RULINGS C1.
const (
	SchemeSourceCopy Scheme = 0 // Repair Index i is source symbol i
	SchemeCauchy     Scheme = 1 // Cauchy Reed-Solomon over GF(2^8), REQUIRED
	SchemeXOR        Scheme = 2 // one XOR parity symbol, Repair Index 0
)

var schemeNames = []string{"Source Copy", "Cauchy Reed-Solomon", "XOR parity"}

func (s Scheme) String() string { return registryString(schemeNames, uint8(s)) }

// Private reports whether s lies in the private-use quarter.
func (s Scheme) Private() bool { return s >= PrivateUse }

// SchemeSet is HELLO's Supported Schemes: bit s, counted from the least significant bit, is set
// when scheme s is supported. Only schemes 0..15 fit.
type SchemeSet uint16

// Has reports whether s is in the set.
func (ss SchemeSet) Has(s Scheme) bool { return s < 16 && ss&(1<<s) != 0 }

// With returns the set with s added; schemes above 15 cannot be advertised and are ignored.
func (ss SchemeSet) With(s Scheme) SchemeSet {
	if s >= 16 {
		return ss
	}
	return ss | 1<<s
}

// FlowKind identifies the kind of protected flow (RULINGS C1).
type FlowKind uint8

// FlowKindRoCEv2 is the one flow kind the draft defines.
const FlowKindRoCEv2 FlowKind = 1

var flowKindNames = []string{1: "RoCEv2"}

func (k FlowKind) String() string { return registryString(flowKindNames, uint8(k)) }

// Private reports whether k lies in the private-use quarter.
func (k FlowKind) Private() bool { return k >= PrivateUse }

// AF is the address family octet of HELLO, HELLO_ACK and PATH_REPORT: 4 or 6.
type AF uint8

// The two address families.
const (
	AF4 AF = 4
	AF6 AF = 6
)

// Valid reports whether af is 4 or 6.
func (af AF) Valid() bool { return af == AF4 || af == AF6 }

// AddrLen returns the octets an address of the family occupies (0 for an invalid family).
func (af AF) AddrLen() int {
	switch af {
	case AF4:
		return 4
	case AF6:
		return 16
	}
	return 0
}

func (af AF) String() string {
	switch af {
	case AF4:
		return "IPv4"
	case AF6:
		return "IPv6"
	}
	return fmt.Sprintf("AF(%d)", uint8(af))
}

// afOf returns the family of a valid address without a zone: AF4 for a 4-octet address, AF6 for
// a 16-octet one (an IPv4-mapped IPv6 address stays IPv6), 0 otherwise.
func afOf(a netip.Addr) AF {
	switch {
	case !a.IsValid() || a.Zone() != "":
		return 0
	case a.Is4():
		return AF4
	default:
		return AF6
	}
}

// Status is PARAM_ACK's Status.
type Status uint8

// PARAM_ACK statuses of the draft.
const (
	StatusAccepted           Status = 0
	StatusUnsupportedScheme  Status = 1
	StatusLimitsExceeded     Status = 2
	StatusResourcesExhausted Status = 3
)

var statusNames = []string{"accepted", "unsupported scheme", "limits exceeded", "resources exhausted"}

func (s Status) String() string { return registryString(statusNames, uint8(s)) }

// Private reports whether s lies in the private-use quarter.
func (s Status) Private() bool { return s >= PrivateUse }

// Reason is CLOSE's Reason (RULINGS C2).
type Reason uint8

// CLOSE reasons of RULINGS C2.
const (
	ReasonNormal             Reason = 0 // normal end
	ReasonIdle               Reason = 1 // idle timeout
	ReasonParamUnanswered    Reason = 2 // PARAM_UPDATE unanswered after eight attempts
	ReasonResourcesExhausted Reason = 3
	ReasonCircuitBreaker     Reason = 4 // circuit breaker held for more than one minute
	ReasonProtocolError      Reason = 5
)

var reasonNames = []string{
	"normal end", "idle timeout", "PARAM_UPDATE unanswered", "resources exhausted",
	"circuit breaker", "protocol error",
}

func (r Reason) String() string { return registryString(reasonNames, uint8(r)) }

// Private reports whether r lies in the private-use quarter.
func (r Reason) Private() bool { return r >= PrivateUse }

// Cause is a PATH_REPORT hop entry's Cause (RULINGS C1, C10).
type Cause uint8

// Hop-entry causes of RULINGS C1.
const (
	CauseUnknown    Cause = 0
	CauseCongestion Cause = 1 // queue overflow or AQM drop
	CauseCorruption Cause = 2 // bad frame check
	CauseOther      Cause = 3
)

var causeNames = []string{"unknown", "congestion", "corruption", "other"}

func (c Cause) String() string { return registryString(causeNames, uint8(c)) }

// Private reports whether c lies in the private-use quarter.
func (c Cause) Private() bool { return c >= PrivateUse }

// Method is PATH_REPORT's measurement method.
type Method uint8

// PATH_REPORT methods of the draft.
const (
	MethodAltMark          Method = 1 // Alternate Marking, RFC 9341
	MethodClusteredAltMark Method = 2 // Clustered Alternate Marking, RFC 9342
	MethodNodeDrops        Method = 3 // node-local drop accounting
)

var methodNames = []string{1: "Alternate Marking", 2: "Clustered Alternate Marking", 3: "node-local drop accounting"}

func (m Method) String() string { return registryString(methodNames, uint8(m)) }

// Private reports whether m lies in the private-use quarter.
func (m Method) Private() bool { return m >= PrivateUse }
