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
	Port    int           // RoCE data port; 0 picks one
	Server  string        // setup address of the server (client mode)
	RTT     time.Duration // initial RTT estimate; default 2 x Delay + 1 ms
	Timeout time.Duration // the whole run; default 10 minutes
	// RetryCount is the client QP's timeouts without progress before it gives up (rc.Config;
	// default 7, as IBTA's retry_cnt and RULINGS T7).
	RetryCount int
	// ServerLog receives the loopback server's log lines (default: discarded).
	ServerLog io.Writer
	// QPs is the number of queue pairs between the client and the server (perftest's -q;
	// default 1). Each runs Iters messages with its own initial PSN (InitialPSN), data and
	// impairment, and is verified on its own.
	QPs int
}

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
	// SocketLostDataPackets are data packets that passed the impairment but never reached
	// the peer's QP: lost in the sockets (a receiver that cannot keep up), or in flight at the
	// end.
	SocketLostDataPackets int64   `json:"socket_lost_data_packets"`
	MTU                   int     `json:"mtu"`
	Rate                  int64   `json:"rate_bps"`
	Loss                  string  `json:"loss"`
	DelayMs               float64 `json:"delay_ms"`
	Error                 string  `json:"error,omitempty"`
	// QPs and PerQP describe the queue pairs (--qps); the figures above sum them, Iterations
	// and Completed included, and Seconds runs until the last one finished.
	QPs   int        `json:"qps"`
	PerQP []QPResult `json:"per_qp"`
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
	}
	if o.Iters <= 0 {
		o.Iters = 1000
	}
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if !rc.ValidMTU(o.MTU) {
		return fmt.Errorf("perf: MTU %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	if o.Rate <= 0 {
		o.Rate = 1e9
	}
	if o.RTT <= 0 {
		o.RTT = 2*o.Delay + time.Millisecond
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
}

type accept struct {
	RKey  uint32 `json:"rkey"`
	Addr  uint64 `json:"addr"`
	Slots int    `json:"slots"`
}

type serverResult struct {
	Verified    bool   `json:"verified"`
	Messages    int    `json:"messages"`
	Bad         int    `json:"bad"`
	Data        uint64 `json:"data"`
	Retx        uint64 `json:"retx"`
	Timeout     uint64 `json:"timeout"`
	Acks        uint64 `json:"acks"`
	Naks        uint64 `json:"naks"`
	Dropped     uint64 `json:"dropped"`
	DataDropped uint64 `json:"data_dropped"`
	DataSent    uint64 `json:"data_sent"`
	DataRecv    uint64 `json:"data_received"`
}

func impairment(loss netem.LossSpec, delay time.Duration, seed uint64) *netem.Config {
	if loss.MeanLoss() == 0 && loss.String() == "none" && delay == 0 {
		return nil
	}
	return &netem.Config{Loss: loss.New(seed), Delay: delay, Seed: seed}
}

func countsInto(s *serverResult, st rc.Stats, c udp.Counts) {
	s.Data, s.Retx, s.Timeout = st.DataPackets, st.RetransmittedPackets, st.TimeoutRetransmissions
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
