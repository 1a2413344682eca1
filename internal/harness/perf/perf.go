// Package perf is the engine of `crem perf`, a perftest-style measurement of the rc queue
// pair over real UDP sockets: a server that accepts connections on a setup port and checks
// what it receives byte for byte, a client that runs RDMA WRITE, SEND or READ iterations
// against it, and a loopback mode that runs both in one process on 127.0.0.1 with an
// in-process impairment (loss, delay) on each direction.
package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// Options describes a run. Zero values take the defaults of `crem perf`.
type Options struct {
	Op      string // write, send or read
	Size    int    // message octets
	Iters   int
	MTU     int
	Mode    rc.Mode
	SRNoNAK bool
	Rate    int64          // preset rate, bit/s: the total, each of QPs queue pairs paces at Rate/QPs
	Loss    netem.LossSpec // in-process impairment, each direction independently
	Delay   time.Duration  // one way
	Seed    uint64
	Pcap    io.Writer
	Port    int    // RoCE data port; 0 picks one
	Server  string // setup address of the server (client mode)
	// RTT states the round trip of the path (`crem perf --rtt`): the QPs take it as their
	// first RTT sample (rc.Config.RTT; in a bidirectional run plus the other direction's
	// queue, see rtt). Zero: each QP measures it on its setup exchange (the request sent to
	// the accept received) and starts from that plus 2 x Delay as a provisional estimate, no
	// sample, so that its timers stay at least the local ACK timeout until its first ACK
	// (protocol notes R33, R35).
	RTT time.Duration
	// AckTimeoutCode is IBTA's local ACK timeout code of both ends' QPs, 4.096 us x 2^code
	// (perftest's -u; default 14, 67.1 ms): no timer runs shorter before an RTT sample.
	AckTimeoutCode int
	Timeout        time.Duration // the whole run; default 10 minutes
	// RetryCount is the client QP's timeouts without progress before it gives up (rc.Config;
	// default 7, as IBTA's retry_cnt and RULINGS T7).
	RetryCount int
	// ServerLog receives the loopback server's log lines (default: discarded).
	ServerLog io.Writer
	// QPs is the number of queue pairs between the client and the server (perftest's -q;
	// default 1). Each runs Iters messages with its own initial PSN (InitialPSN), data and
	// impairment, and is verified on its own.
	QPs int

	// AllSizes runs every size from MinSize (2 octets) to MaxSize (default 8 MiB), powers of two,
	// one after the other (perftest's -a); the Result's Rows has one Result per size.
	AllSizes bool
	MaxSize  int
	// Duration, when positive, runs each QP for this long instead of Iters messages
	// (perftest's -D): no message is posted after it, those in flight complete.
	Duration time.Duration
	// Bidirectional makes the server run the same operation towards the client at the same
	// time (perftest's -b): WRITEs into the client's memory, SENDs to its receive buffers, or
	// READs of its memory, each checked as the client's are.
	Bidirectional bool
	// Latency runs one message at a time (perftest's ib_*_lat): WRITE and SEND ping-pong (the
	// server answers each message with one of its own, the client posts the next when the
	// answer lands) and READ one after the other; Result.Latency has the figures.
	Latency bool
	// SocketBuffer is the kernel buffer asked for each direction of the data socket of
	// Loopback (udp.Options; default 8 MiB).
	SocketBuffer int
	// Via, when valid, is where the client's RoCEv2 datagrams go instead of the server's data
	// address: a relay-mode gateway's relay.listen (protocol notes R36). The logical header
	// (the addresses and ports the ICRC is sealed under) stays the two endpoints'. The setup
	// exchange then does not take the data path, so no RTT is taken from it: without RTT the
	// QPs start with their RTT unknown (rc.Config.RTT 0).
	Via netip.AddrPort
	// ReorderWindow is the QPs' T5 reorder window (rc.Config; default T_thresh): through a CREM
	// gateway pair, long enough to cover a restoration (a block's span and the repair's flight,
	// R36), so that the sender does not race CREM. The server's QPs take the client's.
	ReorderWindow time.Duration
	// Bind is the client's own address (its setup and data sockets); zero: the address the
	// kernel picks toward Server, and a data socket on every address.
	Bind netip.Addr

	rateDefault bool // Rate was 0: the default was taken
	loopback    bool // both ends in this process (Loopback)
	// unseenDelay is a one-way delay each end adds to its direction that the client's RTT
	// does not count, as a path's the client knows nothing of (tests of R35).
	unseenDelay time.Duration
}

// MinSize and DefaultMaxSize bound the sizes of Options.AllSizes.
const (
	MinSize        = 2
	DefaultMaxSize = 8 << 20
)

// DefaultRate is the preset rate of a client of a remote server when none is given, and
// DefaultLoopbackRate that of Loopback, whose one process carries both ends' packets through
// one socket and one read loop: the rate a 2-core host's loopback carries without socket drops
// with room to spare, beside other work (R30).
const (
	DefaultRate         = 1e9
	DefaultLoopbackRate = 200e6
)

// DefaultRateFor is the preset rate a run takes when none is given: DefaultLoopbackRate for
// Loopback, shared by the two directions of a bidirectional one (its one socket and read loop
// carry both), DefaultRate against a server.
func DefaultRateFor(loopback, bidirectional bool) int64 {
	if !loopback {
		return DefaultRate
	}
	if bidirectional {
		return DefaultLoopbackRate / 2
	}
	return DefaultLoopbackRate
}

// SocketLossWarnFraction is the share of the data packets handed to the sockets that, lost in
// them, makes Result.Warning.
const SocketLossWarnFraction = 0.01

// MaxQPs bounds Options.QPs.
const MaxQPs = 256

// Result is what `crem perf --json` prints.
type Result struct {
	Op                     string  `json:"operation"`
	Mode                   string  `json:"mode"`
	Size                   int     `json:"size"`
	Iterations             int     `json:"iterations"`
	Bytes                  int64   `json:"bytes"`
	Seconds                float64 `json:"seconds"`
	Gbps                   float64 `json:"gbit_per_second"`
	Verified               bool    `json:"verified"`
	Completed              int     `json:"completed"`
	DataPackets            uint64  `json:"data_packets"`
	RetransmittedPackets   uint64  `json:"retransmitted_packets"`
	TimeoutRetransmissions uint64  `json:"timeout_retransmissions"`
	AckPackets             uint64  `json:"ack_packets"`
	NakPackets             uint64  `json:"nak_packets"`
	DroppedPackets         uint64  `json:"dropped_packets"`
	DroppedDataPackets     uint64  `json:"dropped_data_packets"`
	// Timeouts counts the timer expiries that retransmitted (rc.Stats.Timeouts), both ends'.
	Timeouts uint64 `json:"timeouts"`
	// FirstRetransmissionMs is the time from the client's first data packet to its first
	// retransmission, in milliseconds, as the client's host stamped them (the times of its
	// pcap); absent when there was none. For --all-sizes, each row's.
	FirstRetransmissionMs *float64 `json:"first_retransmission_ms,omitempty"`
	// Via is Options.Via, where the client's datagrams went (absent: to the server).
	Via string `json:"via,omitempty"`
	// SocketLostDataPackets are data packets that passed the impairment but never reached
	// the peer's QP: lost in the sockets (a receiver that cannot keep up), on the path between
	// the sockets (a proxy, a rate limiter, the network), or in flight at the end. The kernel's
	// count splits it (SocketDroppedPackets, PathLostDataPackets; R30).
	SocketLostDataPackets int64   `json:"socket_lost_data_packets"`
	MTU                   int     `json:"mtu"`
	Rate                  int64   `json:"rate_bps"`
	Loss                  string  `json:"loss"`
	DelayMs               float64 `json:"delay_ms"`
	Error                 string  `json:"error,omitempty"`
	// Interrupted says that the run was cancelled (SIGINT, SIGTERM) before it ended: Verified
	// is false and Error empty (nothing failed), Completed counts the iterations done and
	// checked, Cancelled those in flight at the cancel (neither lost nor corrupted), and an
	// AllSizes run lists in SizesNotRun the sizes it did not start. A run that did not verify,
	// failed or interrupted, reports no bandwidth: its gbit_per_second and the bandwidth and
	// message-rate figures are 0.
	Interrupted bool  `json:"interrupted,omitempty"`
	Cancelled   int   `json:"cancelled,omitempty"`
	SizesNotRun []int `json:"sizes_not_run,omitempty"`
	// QPs and PerQP describe the queue pairs (--qps); the figures above sum them, Iterations
	// and Completed included, and Seconds runs until the last one finished.
	QPs   int        `json:"qps"`
	PerQP []QPResult `json:"per_qp"`

	// The perftest figures: BW peak is the best rate of any run of consecutive messages (see
	// Peak), BW average is the run's (the same as gbit_per_second, and for bidirectional runs the
	// sum of the directions'), the message rate in millions per second.
	PeakGbps    float64 `json:"bw_peak_gbit_per_second"`
	AverageGbps float64 `json:"bw_average_gbit_per_second"`
	MsgRateMpps float64 `json:"msg_rate_mpps"`
	// DurationSeconds is --duration's (0: a number of iterations).
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	// SocketDataPackets are the data packets the impairment passed to the sockets, both ways;
	// SocketLossFraction is the share of them socket_lost_data_packets is. KernelSocketDrops is
	// what the kernel counted as dropped on this process's data socket during the run (Linux's
	// /proc/net/udp drops, the counter SO_RXQ_OVFL reports), absent where unknown.
	SocketDataPackets  int64   `json:"socket_data_packets"`
	SocketLossFraction float64 `json:"socket_loss_fraction"`
	KernelSocketDrops  *int64  `json:"kernel_socket_drops,omitempty"`
	// The split of the loss between the queue pairs (R30). SocketPackets are the packets (data
	// and ACKs) the impairment passed to the sockets, both ways. SocketDroppedPackets is what
	// the kernels counted as dropped on the data sockets during the run (SO_RXQ_OVFL, data and
	// ACKs), both ends: in loopback the one socket they share, against a server this host's
	// plus the server's (ServerSocketDroppedPackets; the most any of its sessions saw).
	// PathLostPackets are the packets sent into the sockets and never received less those
	// drops: lost on the path between the sockets (a proxy, a rate limiter, the network) or in
	// flight at the end; PathLostDataPackets the data packets among them, at least
	// (socket_lost_data_packets less every packet the kernels dropped). All three are absent
	// where a kernel count is unknown (not Linux, or a server that does not report it).
	SocketPackets              int64  `json:"socket_packets"`
	SocketDroppedPackets       *int64 `json:"socket_dropped_packets,omitempty"`
	ServerSocketDroppedPackets *int64 `json:"server_socket_dropped_packets,omitempty"`
	PathLostPackets            *int64 `json:"path_lost_packets,omitempty"`
	PathLostDataPackets        *int64 `json:"path_lost_data_packets,omitempty"`
	// SocketReceiveBuffer is the receive buffer the kernel granted this host's data socket (as
	// its getsockopt reports it: Linux doubles what it accepted), SocketBufferForced whether
	// it was asked past net.core.rmem_max (SO_RCVBUFFORCE, with CAP_NET_ADMIN);
	// ServerSocketReceiveBuffer the server's; RmemMax is net.core.rmem_max (Linux).
	SocketReceiveBuffer       int   `json:"socket_receive_buffer,omitempty"`
	SocketBufferForced        bool  `json:"socket_buffer_forced,omitempty"`
	ServerSocketReceiveBuffer int   `json:"server_socket_receive_buffer,omitempty"`
	RmemMax                   int64 `json:"rmem_max,omitempty"`
	// RateDefault says that --rate was not given: Rate is the default (DefaultLoopbackRate
	// or DefaultRate).
	RateDefault bool `json:"rate_default,omitempty"`
	socketAsked int  // the socket buffer asked for (udp.Buffers.Asked)
	// Warning names where more than SocketLossWarnFraction of the data packets were lost
	// between the queue pairs: in the sockets (the kernel counted them: lower --rate or raise
	// the socket buffers) or on the path (a proxy, a rate limiter or the network dropped
	// them: --rate is above the path's bottleneck).
	Warning string `json:"warning,omitempty"`
	// Rows has one Result per size of an AllSizes run; the figures above sum them (size is the
	// largest, seconds the sum, per_qp is in each row).
	AllSizes bool     `json:"all_sizes,omitempty"`
	Rows     []Result `json:"rows,omitempty"`
	// Bidirectional runs: Directions has the client's direction, then the server's; the
	// figures above sum both (bytes, iterations, gbit_per_second, the bandwidths).
	Bidirectional bool        `json:"bidirectional,omitempty"`
	Directions    []Direction `json:"directions,omitempty"`
	// Latency is the latency mode's figures.
	Latency *Latency `json:"latency,omitempty"`

	// The timers' start (protocol notes R35): the client QPs' initial RTT in milliseconds (the
	// largest of the QPs'), whether it was stated (--rtt) or measured on the setup exchange
	// (plus 2 x delay), and the local ACK timeout, as IBTA's code and in milliseconds.
	RTTMs             float64 `json:"rtt_ms"`
	RTTSource         string  `json:"rtt_source"`
	AckTimeoutCode    int     `json:"ack_timeout_code"`
	LocalAckTimeoutMs float64 `json:"local_ack_timeout_ms"`
	// MinTimeoutMs is the least any timer of the QPs runs, after their first RTT sample too
	// (HostMinTimeout, R37).
	MinTimeoutMs float64 `json:"min_timeout_ms"`
}

// HostMinTimeout is the least any timer of crem perf's QPs runs (rc.Config.MinTimeout), on
// either end: a host's scheduler stalls its read loop for milliseconds now and then (a busy
// core, a garbage collection), and on loopback T7's SRTT + 3 T_thresh is a fraction of a
// millisecond, so the QP's own timers resent what was only late: 10 to 14 percent of the packets
// of a lossless run beside two busy loops, and now and then a retry exceeded with nothing lost.
// 10 ms is far below any WAN's round trip, where the adaptive timers are longer anyway (R37).
const HostMinTimeout = 10 * time.Millisecond

// The values of Result.RTTSource.
const (
	RTTMeasured = "measured"
	RTTStated   = "stated"
	// RTTUnknown: through a relay (Via) the setup exchange does not take the data path, so the
	// QPs start with no estimate and learn the round trip from their first ACK (R36).
	RTTUnknown = "unknown"
)

// Direction is one direction of a bidirectional run.
type Direction struct {
	From        string  `json:"from"` // client or server: who posted the messages
	Iterations  int     `json:"iterations"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Gbps        float64 `json:"gbit_per_second"`
	PeakGbps    float64 `json:"bw_peak_gbit_per_second"`
	MsgRateMpps float64 `json:"msg_rate_mpps"`
	Verified    bool    `json:"verified"`
}

// Latency is what the latency mode measured, in microseconds: of half the round trip for
// WRITE and SEND (ping-pong), of the whole READ (its request and response), as perftest's
// ib_write_lat, ib_send_lat and ib_read_lat report.
type Latency struct {
	Method   string  `json:"method"` // half_round_trip or round_trip
	Samples  int     `json:"samples"`
	MinUs    float64 `json:"min_us"`
	MedianUs float64 `json:"median_us"`
	P99Us    float64 `json:"p99_us"`
	P999Us   float64 `json:"p99_9_us"`
	MeanUs   float64 `json:"mean_us"`
	MaxUs    float64 `json:"max_us"`
	StdevUs  float64 `json:"stdev_us"`
}

// QPResult is one queue pair's part of a run: both its QPs' counters, as Result's.
type QPResult struct {
	QP         int    `json:"qp"`
	LocalQPN   uint32 `json:"local_qpn"`
	RemoteQPN  uint32 `json:"remote_qpn"`
	InitialPSN uint32 `json:"initial_psn"` // the client's first PSN
	// NextPSN is the PSN after the last one the client's requests took; Wrapped says that the
	// run crossed from 0xffffff to 0.
	NextPSN                uint32  `json:"next_psn"`
	Wrapped                bool    `json:"wrapped"`
	Iterations             int     `json:"iterations"`
	Completed              int     `json:"completed"`
	Bytes                  int64   `json:"bytes"`
	Seconds                float64 `json:"seconds"`
	Gbps                   float64 `json:"gbit_per_second"`
	Verified               bool    `json:"verified"`
	DataPackets            uint64  `json:"data_packets"`
	RetransmittedPackets   uint64  `json:"retransmitted_packets"`
	TimeoutRetransmissions uint64  `json:"timeout_retransmissions"`
	AckPackets             uint64  `json:"ack_packets"`
	NakPackets             uint64  `json:"nak_packets"`
	DroppedPackets         uint64  `json:"dropped_packets"`
	DroppedDataPackets     uint64  `json:"dropped_data_packets"`
	SocketLostDataPackets  int64   `json:"socket_lost_data_packets"`
	Timeouts               uint64  `json:"timeouts"`
	Error                  string  `json:"error,omitempty"`
}

func (o *Options) defaults() error {
	switch o.Op {
	case "write", "send", "read":
	default:
		return fmt.Errorf("perf: operation %q: want write, send or read", o.Op)
	}
	if o.Size <= 0 {
		o.Size = 64 << 10
		if o.Latency {
			o.Size = 2 // perftest's latency default
		}
	}
	if o.Iters <= 0 {
		o.Iters = 1000
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.AllSizes && (o.MaxSize < MinSize || o.MaxSize > 1<<30) {
		return fmt.Errorf("perf: largest size %d: want %d to 1 GiB", o.MaxSize, MinSize)
	}
	if o.Duration < 0 {
		return fmt.Errorf("perf: duration %v: want a positive one", o.Duration)
	}
	if o.Latency && o.Bidirectional {
		return fmt.Errorf("perf: the latency mode is bidirectional already (ping-pong)")
	}
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if !rc.ValidMTU(o.MTU) {
		return fmt.Errorf("perf: MTU %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	if o.Rate <= 0 {
		o.Rate, o.rateDefault = DefaultRateFor(o.loopback, o.Bidirectional), true
	}
	if o.RTT < 0 {
		o.RTT = 0 // rtt's default
	}
	if o.AckTimeoutCode == 0 {
		o.AckTimeoutCode = rc.DefaultLocalAckTimeoutCode
	}
	if _, err := rc.LocalAckTimeoutOf(o.AckTimeoutCode); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if o.ReorderWindow < 0 || o.ReorderWindow > time.Second {
		return fmt.Errorf("perf: reorder window %v: want 0 (the default) to 1s", o.ReorderWindow)
	}
	if o.RetryCount < 0 {
		return fmt.Errorf("perf: retry count %d: want 0 (the default, 7) or more", o.RetryCount)
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Size > 1<<30 {
		return fmt.Errorf("perf: size %d exceeds 1 GiB", o.Size)
	}
	if o.QPs == 0 {
		o.QPs = 1
	}
	if o.QPs < 1 || o.QPs > MaxQPs {
		return fmt.Errorf("perf: %d queue pairs: want 1 to %d", o.QPs, MaxQPs)
	}
	return nil
}

// rtt is the initial RTT estimate of a run: Options.RTT, or 2 x Delay + 1 ms, and in a
// bidirectional run also the time a QP's paced queue takes to send the slots of the other
// direction, which its ACKs wait behind (R28): without it, the first messages' timers fire
// before their ACKs can come.
func (o *Options) rtt() time.Duration {
	return o.rttFrom(time.Millisecond)
}

// rttFrom is rtt with base in place of the 1 ms: the round trip of the setup exchange.
func (o *Options) rttFrom(base time.Duration) time.Duration {
	if o.RTT > 0 {
		return o.RTT
	}
	if o.Via.IsValid() {
		return 0 // the data path is not the setup's: unknown (R36)
	}
	d := 2*o.Delay + base
	if o.Bidirectional {
		bits := float64(slots(o.Size, o.Iters, o.QPs)) * float64(o.Size) * 8
		d += time.Duration(bits / float64(qpRate(o.Rate, o.QPs)) * float64(time.Second))
	}
	return d
}

// timers fills in the Result's local ACK timeout and where its RTT comes from (R35).
func (r *Result) timers(o *Options) {
	r.RTTSource = RTTMeasured
	switch {
	case o.RTT > 0:
		r.RTTSource = RTTStated
	case o.Via.IsValid():
		r.RTTSource = RTTUnknown
	}
	r.AckTimeoutCode = o.AckTimeoutCode
	if d, err := rc.LocalAckTimeoutOf(o.AckTimeoutCode); err == nil {
		r.LocalAckTimeoutMs = float64(d) / 1e6
	}
	r.MinTimeoutMs = float64(HostMinTimeout) / 1e6
}

// slots is how many messages a QP has in flight at once, each with its own memory: at most 64,
// and 64 MiB shared by the QPs.
func slots(size, iters, qps int) int {
	return max(1, min(iters, (64<<20)/max(1, qps)/size, 64))
}

// qpRate is the preset rate of each of qps QPs: they share the path, so that the total is the
// rate asked for (R25).
func qpRate(rate int64, qps int) int64 { return max(1, rate/int64(max(1, qps))) }

// mix derives a stream's value from a seed.
func mix(seed, stream uint64) uint64 {
	x := seed ^ stream*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// InitialPSN is the first PSN of the client's QP q for a seed: drawn over the whole 24-bit space,
// so that runs meet every part of it, the wrap from 0xffffff to 0 included, and the same seed
// gives the same PSNs (protocol notes R25).
func InitialPSN(seed uint64, q int) psn.PSN {
	return psn.Of(uint32(mix(seed, 0x5053_4e00+uint64(q)) >> 40))
}

// serverPSN is the first PSN of the server's QP q (its requests: none in perf).
func serverPSN(seed uint64, q int) psn.PSN {
	return psn.Of(uint32(mix(seed, 0x5053_4e80+uint64(q)) >> 40))
}

// qpSeed is the seed of QP q's data and impairment: the run's own for the first QP, so that a
// run of one QP moves the same data and meets the same losses as before there were several.
func qpSeed(seed uint64, q int) uint64 {
	if q == 0 {
		return seed
	}
	return mix(seed, uint64(q))
}

// pattern fills b with the message of iteration i: random octets from the seed.
func pattern(b []byte, seed uint64, i int) {
	r := rand.NewPCG(seed, uint64(i)+0x9e3779b97f4a7c15)
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			b[k+j] = byte(v >> (8 * j))
		}
	}
}

// matches reports whether b holds the message of iteration i.
func matches(b []byte, seed uint64, i int) bool {
	r := rand.NewPCG(seed, uint64(i)+0x9e3779b97f4a7c15)
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			if b[k+j] != byte(v>>(8*j)) {
				return false
			}
		}
	}
	return true
}

// The application data of the setup exchange (protocol notes R9).
type request struct {
	Op      string `json:"op"`
	Size    int    `json:"size"`
	Iters   int    `json:"iters"`
	Seed    uint64 `json:"seed"`
	Loss    string `json:"loss"`
	DelayNs int64  `json:"delay_ns"`
	// QPs is how many QPs the client runs and QP which one this is (R25; absent: one).
	QPs int `json:"qps,omitempty"`
	QP  int `json:"qp,omitempty"`
	// DurationNs: the client runs for this long (R28); Iters then only sizes the slots, and
	// the client's DONE says how many messages it sent.
	DurationNs int64 `json:"duration_ns,omitempty"`
	// Bidir: the server runs the operation towards the client too, from the client's GO
	// (R28); Lat: it answers each WRITE or SEND with one of its own (ping-pong).
	Bidir bool `json:"bidir,omitempty"`
	Lat   bool `json:"lat,omitempty"`
	// RetryCount is the client's, for the server's own requests (R28; absent: the default).
	RetryCount int `json:"retry_count,omitempty"`
	// AckTimeoutCode is the client's local ACK timeout code, for the server's QP too (R35;
	// absent: the default, 14).
	AckTimeoutCode int `json:"ack_timeout_code,omitempty"`
	// ReorderWindowNs is the client's reorder window, for the server's QPs too (R36; absent:
	// the default).
	ReorderWindowNs int64 `json:"reorder_window_ns,omitempty"`
}

// doneMsg is the App of the client's DONE messages (absent: the final DONE of a run of Iters
// messages). Go asks the server to start its direction; Messages is how many the client sent.
// RKey, Addr and Slots (with Go) are the client's memory for the server's direction.
type doneMsg struct {
	Go       bool   `json:"go,omitempty"`
	RKey     uint32 `json:"rkey,omitempty"`
	Addr     uint64 `json:"addr,omitempty"`
	Slots    int    `json:"slots,omitempty"`
	Messages int    `json:"messages,omitempty"`
	Final    bool   `json:"final,omitempty"`
}

type accept struct {
	RKey  uint32 `json:"rkey"`
	Addr  uint64 `json:"addr"`
	Slots int    `json:"slots"`
	// HoldNs is how long the server took from the request to its accept (its QP, its memory):
	// the client takes it off the round trip it measured (R35; absent: 0).
	HoldNs int64 `json:"hold_ns,omitempty"`
}

type serverResult struct {
	Verified    bool   `json:"verified"`
	Messages    int    `json:"messages"`
	Bad         int    `json:"bad"`
	Data        uint64 `json:"data"`
	Retx        uint64 `json:"retx"`
	Timeout     uint64 `json:"timeout"`
	Timeouts    uint64 `json:"timeouts,omitempty"` // timer expiries (absent from older servers: 0)
	Acks        uint64 `json:"acks"`
	Naks        uint64 `json:"naks"`
	Dropped     uint64 `json:"dropped"`
	DataDropped uint64 `json:"data_dropped"`
	DataSent    uint64 `json:"data_sent"`
	DataRecv    uint64 `json:"data_received"`
	// Sent and Recv count every packet (data and ACKs) the server's QP sent (before its
	// impairment) and received; SocketDrops is what the kernel counted as dropped on the
	// server's data socket during the session (SO_RXQ_OVFL; absent where unknown, and from
	// servers that predate it), SocketBuffer its receive buffer as granted (R30).
	Sent         uint64  `json:"sent,omitempty"`
	Recv         uint64  `json:"received,omitempty"`
	SocketDrops  *uint64 `json:"socket_drops,omitempty"`
	SocketBuffer int     `json:"socket_receive_buffer,omitempty"`
	// Started answers a GO; Busy a DONE that came while the server's direction still runs
	// (the client asks again); Final the one result.
	Started bool `json:"started,omitempty"`
	Busy    bool `json:"busy,omitempty"`
	Final   bool `json:"final,omitempty"`
	// The server's direction (bidirectional runs): messages completed, READ data that did not
	// match, its seconds and best rate, its error.
	RevCompleted int     `json:"rev_completed,omitempty"`
	RevBad       int     `json:"rev_bad,omitempty"`
	RevSeconds   float64 `json:"rev_seconds,omitempty"`
	RevPeakGbps  float64 `json:"rev_peak_gbps,omitempty"`
	RevErr       string  `json:"rev_error,omitempty"`
}

func impairment(loss netem.LossSpec, delay time.Duration, seed uint64) *netem.Config {
	if loss.MeanLoss() == 0 && loss.String() == "none" && delay == 0 {
		return nil
	}
	return &netem.Config{Loss: loss.New(seed), Delay: delay, Seed: seed}
}

func countsInto(s *serverResult, st rc.Stats, c udp.Counts) {
	s.Data, s.Retx, s.Timeout, s.Timeouts = st.DataPackets, st.RetransmittedPackets, st.TimeoutRetransmissions, st.Timeouts
	s.Acks, s.Naks = st.AckPackets, st.NAKPackets
	s.Dropped, s.DataDropped = c.Dropped, c.DataDropped
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are marshalled
	}
	return b
}
