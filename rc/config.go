package rc

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// Mode is a QP's reliability mode, agreed at connection setup.
type Mode uint8

// The reliability modes.
const (
	ModeGBN    Mode = iota // go-back-N, as RoCE NICs
	ModeSR                 // selective repeat (IRN style)
	ModeTCAETH             // the T/C AETH extension
)

func (m Mode) String() string {
	switch m {
	case ModeGBN:
		return "gbn"
	case ModeSR:
		return "sr"
	case ModeTCAETH:
		return "tcaeth"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode reads "gbn", "sr" or "tcaeth".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "gbn":
		return ModeGBN, nil
	case "sr":
		return ModeSR, nil
	case "tcaeth":
		return ModeTCAETH, nil
	}
	return 0, fmt.Errorf("rc: mode %q: want gbn, sr or tcaeth", s)
}

// Config describes one QP and its connection. Zero durations and counts take the defaults
// named on each field.
type Config struct {
	QPN       uint32  // this QP's number, 24 bits, not 0 or 1
	RemoteQPN uint32  // the peer's QP number
	SendPSN   psn.PSN // first PSN of this QP's requests
	RecvPSN   psn.PSN // first PSN expected of the peer's requests
	MTU       int     // RDMA MTU: 256, 512, 1024, 2048 or 4096
	Mode      Mode
	// SRNoNAK turns off the sr responder's NAKs, leaving recovery to the per-packet timers
	// ("SR RTO"); the ACKs still report the runs received, which the timers then skip.
	SRNoNAK bool

	// Rate is the preset rate in bits per second at which this QP paces what it sends; 0 sends
	// without pacing. PeerRate is the rate the peer advertised at setup, from which the tcaeth
	// receiver derives C_thresh (T6); 0 means Rate.
	Rate, PeerRate int64
	// Burst lets the pacer catch up this much lost time at once, for drivers whose timers are
	// coarse; 0 in virtual time.
	Burst time.Duration

	// RTT is the initial round-trip estimate (default 10 ms, as RULINGS C4). An RTT given here
	// is a stated one: the driver knows the path (a simulator, the lab), and the QP takes it
	// as its first RTT sample, so that its timers are adaptive from the start. With RTT zero,
	// or RTTProvisional, the QP has no sample until its first ACK: until then no timer it runs
	// is shorter than LocalAckTimeout (protocol notes R33).
	RTT time.Duration
	// RTTProvisional marks RTT as an estimate taken off the data path (as the round trip of a
	// setup exchange): it seeds the smoothed RTT but is no sample, as with RTT zero.
	RTTProvisional bool
	// LocalAckTimeout is IBTA's local ACK timeout (LocalAckTimeoutOf converts its 5-bit code):
	// before the QP has an RTT sample, every timer it runs (gbn's RTO, sr's per-packet RTO and
	// probe, tcaeth's T7 fallback, the READ and atomic retry) is at least this long. Default
	// LocalAckTimeoutOf(DefaultLocalAckTimeoutCode), 67.1 ms; negative turns the floor off.
	LocalAckTimeout time.Duration
	// MinTimeout is the least any timer of the QP runs, after its first RTT sample too: for
	// drivers on a general-purpose host's sockets, whose scheduling stalls of milliseconds are
	// no part of the path's round trip and would otherwise fire T7's SRTT + 3 T_thresh (under a
	// millisecond on a short path) without a loss (protocol notes R37). Default MinRTO, 1 ms:
	// the QP's timers as T7 and R16 have them.
	MinTimeout time.Duration
	// TThresh is the tcaeth batch time threshold (T6); default max(100 us, RTT/64).
	TThresh time.Duration
	// ReorderWindow is the RACK reorder window of the tcaeth loss decision (T5), and how long
	// sr and tcaeth wait on evidence of a lost READ response before re-issuing the READ
	// (protocol notes R22); default TThresh (R7).
	ReorderWindow time.Duration
	// ReorderTail, when positive, keeps ReorderWindow for the SEND and WRITE packets sent within
	// ReorderTail of their message's last packet (at the preset Rate), and gives the others the
	// default window, TThresh: under a CSF that repairs only a message's critical tail, the
	// earlier packets have no repair to wait for, and their recovery by the RDMA sender ends
	// while the message is still being sent (T5; protocol notes R38). 0: ReorderWindow for all.
	ReorderTail time.Duration
	// RTO is the gbn and sr retransmission timeout, and the READ and atomic retry timeout;
	// default 3 x the smoothed RTT, at least MinRTO.
	RTO time.Duration
	// AckTimeout is the tcaeth fallback timeout (T7); default SRTT + 3 TThresh.
	AckTimeout time.Duration
	// RetryCount bounds consecutive timeouts without progress (default 7); RNRRetry bounds RNR
	// retries (default 7, which as in IBTA means without limit). Each timeout without progress
	// doubles the next one, up to MaxBackoff times the timeout, and progress resets it, so that
	// RetryCount bounds the time without progress, not timer ticks (protocol notes R34).
	RetryCount, RNRRetry int
	// RNRTimer is the IBTA timer code this responder puts in its RNR NAKs (default 14, 1.28 ms).
	RNRTimer uint8
	// AckEvery is the gbn and sr responder's ACK coalescing count (default 16).
	AckEvery int
	// DupAckInterval is the least time between two ACKs the responder sends at once for
	// duplicate packets: a duplicate arriving sooner after the last such ACK is counted
	// (Stats.DuplicateAcksHeld) and not acknowledged (T6, R3; protocol notes R23). Default
	// T_thresh; negative acknowledges every duplicate at once.
	DupAckInterval time.Duration
	// SendBuffer bounds the unacknowledged packets the requester keeps (default 16384): the
	// window of gbn and sr, the send buffer of tcaeth (T8).
	SendBuffer int
	// RecvWindow is how far ahead of the expected PSN the sr and tcaeth responder accepts
	// packets (default 16384); MaxBuffered bounds the octets it holds until it can place them
	// (default 64 MiB).
	RecvWindow, MaxBuffered int
	// SkipICRC is for drivers whose packets never leave the process (a simulator): the QP
	// neither seals the ICRC of what it sends (its four octets stay zero) nor verifies the ICRC
	// of what it receives. Packets of such a QP fail every ICRC check elsewhere, so it must never
	// face a socket, a capture or a CREM receiver that checks restored packets (RULINGS C12).
	SkipICRC bool
	// SkipICRCCheck keeps sealing what the QP sends but verifies no ICRC of what it receives:
	// for a simulator whose requester must seal (a CREM receiver checks restored packets, C12)
	// while its peer, with SkipICRC, seals nothing.
	SkipICRCCheck bool
	// ReuseBuffers lets the QP reuse the buffers of the packets it hands to Drain's out: each is
	// valid only until out returns, and a driver that keeps one must copy it. Steady traffic then
	// allocates nothing per packet. Without it every packet is a fresh buffer that out owns.
	ReuseBuffers bool
	// NotifyWrites makes the responder report each RDMA WRITE message placed in order as a
	// completion of kind KindWritePlaced (not an IBTA completion; for tools that check data).
	NotifyWrites bool

	// The flow's logical header (RULINGS C12): the configured endpoint addresses and each
	// side's UDP source port. Packets this QP sends are sealed under Local -> Remote with
	// LocalPort as source port and destination port 4791; received ones are checked under
	// Remote -> Local with RemotePort.
	LocalAddr, RemoteAddr netip.Addr
	LocalPort, RemotePort uint16
	PKey                  uint16 // default 0xffff
}

// MinRTO is the smallest retransmission timeout the QP uses.
const MinRTO = time.Millisecond

// MaxBackoff bounds the factor by which consecutive timeouts without progress lengthen a
// timer: 2^n after n of them, at most 64 (protocol notes R34).
const MaxBackoff = 64

// maxBackoffShift is log2(MaxBackoff).
const maxBackoffShift = 6

// DefaultLocalAckTimeoutCode is the IBTA local ACK timeout code the QP uses when
// Config.LocalAckTimeout is zero: 14, 4.096 us x 2^14 = 67.1 ms, perftest's default (-u).
const DefaultLocalAckTimeoutCode = 14

// LocalAckTimeoutOf returns the local ACK timeout of an IBTA timeout code: 4.096 us x 2^code
// for code 1 to 31. Code 0, which IBTA reads as an infinite timeout, and codes beyond 5 bits
// are errors: the QP always runs its timers.
func LocalAckTimeoutOf(code int) (time.Duration, error) {
	if code < 1 || code > 31 {
		return 0, fmt.Errorf("rc: local ACK timeout code %d: want 1 to 31 (4.096 us x 2^code)", code)
	}
	return 4096 * time.Nanosecond << code, nil
}

func (c *Config) setDefaults() {
	if c.RTT <= 0 {
		c.RTT = 10 * time.Millisecond
	}
	if c.MinTimeout <= 0 {
		c.MinTimeout = MinRTO
	}
	if c.LocalAckTimeout == 0 {
		c.LocalAckTimeout, _ = LocalAckTimeoutOf(DefaultLocalAckTimeoutCode)
	}
	if c.TThresh <= 0 {
		c.TThresh = max(100*time.Microsecond, c.RTT/64)
	}
	if c.DupAckInterval == 0 {
		c.DupAckInterval = c.TThresh
	}
	if c.ReorderWindow <= 0 {
		c.ReorderWindow = c.TThresh
	}
	if c.RetryCount <= 0 {
		c.RetryCount = 7
	}
	if c.RNRRetry <= 0 {
		c.RNRRetry = 7
	}
	if c.RNRTimer == 0 {
		c.RNRTimer = 14
	}
	if c.AckEvery <= 0 {
		c.AckEvery = 16
	}
	if c.SendBuffer <= 0 {
		c.SendBuffer = 16384
	}
	if c.RecvWindow <= 0 {
		c.RecvWindow = 16384
	}
	if c.MaxBuffered <= 0 {
		c.MaxBuffered = 64 << 20
	}
	if c.PeerRate <= 0 {
		c.PeerRate = c.Rate
	}
	if c.PKey == 0 {
		c.PKey = 0xffff
	}
	if c.Mode == ModeGBN {
		c.RecvWindow = 1 // in order only
	}
}

// ValidMTU reports whether m is an RDMA MTU.
func ValidMTU(m int) bool {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.QPN < 2 || c.QPN > psn.Mask {
		bad("QPN %#x outside 2..2^24-1", c.QPN)
	}
	if c.RemoteQPN < 2 || c.RemoteQPN > psn.Mask {
		bad("remote QPN %#x outside 2..2^24-1", c.RemoteQPN)
	}
	if c.SendPSN > psn.Mask || c.RecvPSN > psn.Mask {
		bad("starting PSNs %#x/%#x exceed 24 bits", c.SendPSN, c.RecvPSN)
	}
	if !ValidMTU(c.MTU) {
		bad("MTU %d is not 256, 512, 1024, 2048 or 4096", c.MTU)
	}
	if c.Mode > ModeTCAETH {
		bad("unknown mode %d", c.Mode)
	}
	if c.Rate < 0 {
		bad("rate %d is negative", c.Rate)
	}
	if c.Mode == ModeTCAETH && c.PeerRate <= 0 {
		bad("tcaeth needs the preset rate (T6: C_thresh follows it)")
	}
	if c.SendBuffer >= psn.Modulus/4 || c.RecvWindow >= psn.Modulus/4 {
		bad("send buffer %d or receive window %d too large for 24-bit PSNs", c.SendBuffer, c.RecvWindow)
	}
	if !c.LocalAddr.IsValid() || !c.RemoteAddr.IsValid() || c.LocalAddr.Unmap().Is4() != c.RemoteAddr.Unmap().Is4() {
		bad("endpoint addresses %v and %v are not both IPv4 or both IPv6", c.LocalAddr, c.RemoteAddr)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rc: config: %w", err)
	}
	return nil
}

// CThresh returns C_thresh = max(1, ceil(R x T_thresh)) for a peer rate of rate bit/s and
// packets of mtu payload octets (T6). Packets are counted with their headers and ICRC.
func CThresh(rate int64, mtu int, tthresh time.Duration) int {
	if rate <= 0 {
		return 1
	}
	bits := float64(wireLen(mtu+roce.BTHLen+roce.ICRCLen)) * 8
	pps := float64(rate) / bits
	n := pps * tthresh.Seconds()
	c := int(n)
	if float64(c) < n {
		c++
	}
	return max(1, c)
}

// wireLen is what the pacer counts for a UDP payload of n octets: with the IPv4 and UDP
// headers.
func wireLen(n int) int { return n + 28 }
