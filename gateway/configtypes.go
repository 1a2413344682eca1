package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/crem-project/crem/units"
)

// The typed values of a configuration: each reads the file's text (UnmarshalText) and writes
// it back (MarshalText, String) as the file says it.

// Mode is the gateway's data path.
type Mode uint8

const (
	ModeRelay Mode = iota // UDP sockets in front of the endpoints (the default)
	ModeTun               // a TUN device and policy routing (Linux)
)

func (m Mode) String() string {
	switch m {
	case ModeRelay:
		return "relay"
	case ModeTun:
		return "tun"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *Mode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "relay":
		*m = ModeRelay
	case "tun":
		*m = ModeTun
	default:
		return errors.New("want relay or tun")
	}
	return nil
}

// Protection is how the domain keeps outsiders from the CREM port (draft, Security
// Considerations).
type Protection uint8

const (
	ProtectionNone     Protection = iota // only for a loopback crem_address
	ProtectionIPsec                      // CREM and the flows cross the untrusted part in IPsec
	ProtectionBoundary                   // the domain's edge drops CREM from outside
)

func (p Protection) String() string {
	switch p {
	case ProtectionNone:
		return ""
	case ProtectionIPsec:
		return "ipsec"
	case ProtectionBoundary:
		return "boundary"
	}
	return fmt.Sprintf("protection(%d)", uint8(p))
}

func (p Protection) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *Protection) UnmarshalText(b []byte) error {
	switch string(b) {
	case "":
		*p = ProtectionNone
	case "ipsec":
		*p = ProtectionIPsec
	case "boundary":
		*p = ProtectionBoundary
	default:
		return errors.New("want ipsec or boundary")
	}
	return nil
}

// Verify is how the CRF of TUN mode checks restored packets (C12).
type Verify uint8

const (
	VerifyTemplate Verify = iota // under the flow's header template (the default)
	VerifyLogical                // under the logical header
)

func (v Verify) String() string {
	switch v {
	case VerifyTemplate:
		return "template"
	case VerifyLogical:
		return "logical"
	}
	return fmt.Sprintf("verify(%d)", uint8(v))
}

func (v Verify) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

func (v *Verify) UnmarshalText(b []byte) error {
	switch string(b) {
	case "template":
		*v = VerifyTemplate
	case "logical":
		*v = VerifyLogical
	default:
		return errors.New("want template or logical")
	}
	return nil
}

// TunWrite is where TUN mode sends packets on.
type TunWrite uint8

const (
	WriteRaw    TunWrite = iota // the raw socket with the mark (the default)
	WriteDevice                 // back into the TUN device
)

func (w TunWrite) String() string {
	switch w {
	case WriteRaw:
		return "raw"
	case WriteDevice:
		return "device"
	}
	return fmt.Sprintf("write(%d)", uint8(w))
}

func (w TunWrite) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

func (w *TunWrite) UnmarshalText(b []byte) error {
	switch string(b) {
	case "raw":
		*w = WriteRaw
	case "device":
		*w = WriteDevice
	default:
		return errors.New("want raw or device")
	}
	return nil
}

// Datapath is how TUN-style (routed) mode takes the protected traffic off the path.
type Datapath uint8

const (
	DatapathTun  Datapath = iota // policy routing into a TUN device (the default)
	DatapathXDP                  // an XDP program and AF_XDP sockets on the LAN and WAN interfaces
	DatapathAuto                 // xdp where it loads and binds, else tun
)

func (d Datapath) String() string {
	switch d {
	case DatapathTun:
		return "tun"
	case DatapathXDP:
		return "xdp"
	case DatapathAuto:
		return "auto"
	}
	return fmt.Sprintf("datapath(%d)", uint8(d))
}

func (d Datapath) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Datapath) UnmarshalText(b []byte) error {
	switch string(b) {
	case "tun":
		*d = DatapathTun
	case "xdp":
		*d = DatapathXDP
	case "auto":
		*d = DatapathAuto
	default:
		return errors.New("want tun, xdp or auto")
	}
	return nil
}

// XDPAttach is how the XDP program attaches to an interface.
type XDPAttach uint8

const (
	XDPAttachAuto    XDPAttach = iota // the driver's XDP, else generic (the default)
	XDPAttachDriver                   // the driver's XDP only
	XDPAttachGeneric                  // generic (SKB) XDP: any device
)

func (a XDPAttach) String() string {
	switch a {
	case XDPAttachAuto:
		return "auto"
	case XDPAttachDriver:
		return "driver"
	case XDPAttachGeneric:
		return "generic"
	}
	return fmt.Sprintf("attach(%d)", uint8(a))
}

func (a XDPAttach) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

func (a *XDPAttach) UnmarshalText(b []byte) error {
	switch string(b) {
	case "auto":
		*a = XDPAttachAuto
	case "driver":
		*a = XDPAttachDriver
	case "generic":
		*a = XDPAttachGeneric
	default:
		return errors.New("want auto, driver or generic")
	}
	return nil
}

// LogLevel is the least level logged.
type LogLevel uint8

const (
	LogInfo LogLevel = iota // the default
	LogDebug
	LogWarn
	LogError
)

func (l LogLevel) String() string {
	switch l {
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	}
	return fmt.Sprintf("log_level(%d)", uint8(l))
}

// Slog is the level as log/slog has it.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LogDebug:
		return slog.LevelDebug
	case LogWarn:
		return slog.LevelWarn
	case LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (l LogLevel) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *LogLevel) UnmarshalText(b []byte) error {
	switch string(b) {
	case "info":
		*l = LogInfo
	case "debug":
		*l = LogDebug
	case "warn":
		*l = LogWarn
	case "error":
		*l = LogError
	default:
		return errors.New("want debug, info, warn or error")
	}
	return nil
}

// Prefix is an address prefix; the file may give a lone address, a prefix of its full length.
// The zero value matches any address.
type Prefix struct{ netip.Prefix }

// HostPrefix is the prefix of one address.
func HostPrefix(a netip.Addr) Prefix {
	a = a.Unmap()
	return Prefix{netip.PrefixFrom(a, a.BitLen())}
}

// ParsePrefix reads "10.1.0.0/16" or "10.1.2.3"; the bits beyond the prefix are cleared.
func ParsePrefix(s string) (Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Prefix{}, err
		}
		return Prefix{netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), p.Addr().Unmap().BitLen())).Masked()}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return Prefix{}, err
	}
	return HostPrefix(a), nil
}

// MustParsePrefix is ParsePrefix for values known to be good; it panics on a bad one.
func MustParsePrefix(s string) Prefix {
	p, err := ParsePrefix(s)
	if err != nil {
		panic(err)
	}
	return p
}

func (p Prefix) String() string {
	if !p.IsValid() {
		return ""
	}
	return p.Prefix.String()
}

func (p Prefix) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *Prefix) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = Prefix{}
		return nil
	}
	q, err := ParsePrefix(string(b))
	if err != nil {
		return errors.New("want an address or prefix in quotes, such as \"10.1.0.0/16\"")
	}
	*p = q
	return nil
}

// Duration is a duration the file writes as Go does ("10ms", "1m30s"); never negative.
type Duration time.Duration

// Dur is a duration as a Config's optional field takes it.
func Dur(d time.Duration) *Duration { v := Duration(d); return &v }

func (d Duration) String() string { return durString(time.Duration(d)) }

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v < 0 {
		return errors.New(`want a duration such as "10ms"`)
	}
	*d = Duration(v)
	return nil
}

// durString writes a duration as ParseDuration reads it back, in ASCII ("50us", not "50µs").
func durString(d time.Duration) string { return strings.ReplaceAll(d.String(), "µ", "u") }

// Rate is a rate in bits per second, written as "125Mbit" (package units); 0 is none.
type Rate int64

func (r Rate) String() string {
	if r == 0 {
		return ""
	}
	return units.FormatRate(int64(r))
}

func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *Rate) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = 0
		return nil
	}
	v, err := units.ParseRate(string(b))
	if err != nil || v <= 0 {
		return errors.New(`want a rate such as "125Mbit"`)
	}
	*r = Rate(v)
	return nil
}

// Opt is v as an optional field of a Config takes it, nil for the zero value: the default.
// For callers whose own zero means "the gateway's default"; a Config built to say m = 0
// sets M to new(0).
func Opt[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
