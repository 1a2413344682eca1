package perf

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crem-project/crem/units"
)

// maxStamps bounds the post and completion times a QP (or the server's direction) keeps for
// Peak: a run of --duration may be long; the peak is then that of its first maxStamps messages.
const maxStamps = 1 << 18

// peakSamples bounds the starts and ends Peak tries: past it they are evenly spaced.
const peakSamples = 2048

// stamps records when messages were posted and completed, relative to a run's start.
type stamps struct {
	posted, completed []time.Duration
}

func (s *stamps) post(d time.Duration) {
	if len(s.posted) < maxStamps {
		s.posted = append(s.posted, d)
	}
}

func (s *stamps) complete(d time.Duration) {
	if len(s.completed) < maxStamps {
		s.completed = append(s.completed, d)
	}
}

// Peak is perftest's BW peak of messages of size octets: the best rate of any run of
// consecutive messages i..j, (j-i+1) x size over the time from the post of i to the
// completion of j. posted and completed are in order (the messages of several QPs merged and
// sorted). With more than peakSamples messages the starts and ends tried are peakSamples
// evenly spaced ones (the exact figure is perftest's O(n^2) search).
func Peak(posted, completed []time.Duration, size int) float64 {
	n := min(len(posted), len(completed))
	if n == 0 || size <= 0 {
		return 0
	}
	idx := func(k, m int) int { return k * (n - 1) / max(m-1, 1) }
	m := min(n, peakSamples)
	best := math.Inf(1)
	for a := range m {
		i := idx(a, m)
		for b := a; b < m; b++ {
			j := idx(b, m)
			t := float64(completed[j]-posted[i]) / float64(j-i+1)
			if t > 0 && t < best {
				best = t
			}
		}
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return float64(size) * 8 / best // octets per nanosecond x 8 = Gbit/s
}

// mergedPeak is Peak over several QPs' stamps, merged in time.
func mergedPeak(all []*stamps, size int) float64 {
	var p, c []time.Duration
	for _, s := range all {
		p = append(p, s.posted...)
		c = append(c, s.completed...)
	}
	slices.Sort(p)
	slices.Sort(c)
	return Peak(p, c, size)
}

// latencyOf summarises samples (nanoseconds) in microseconds; half halves them (the one-way
// latency of a ping-pong). Percentiles are nearest-rank: the smallest sample at or above
// the share asked.
func latencyOf(samples []time.Duration, half bool) *Latency {
	l := &Latency{Method: "round_trip", Samples: len(samples)}
	if half {
		l.Method = "half_round_trip"
	}
	if len(samples) == 0 {
		return l
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	div := 1e3
	if half {
		div = 2e3
	}
	us := func(d time.Duration) float64 { return float64(d) / div }
	rank := func(q float64) float64 {
		k := int(math.Ceil(q*float64(len(s)))) - 1
		return us(s[min(max(k, 0), len(s)-1)])
	}
	var sum, sq float64
	for _, d := range s {
		sum += us(d)
	}
	l.MeanUs = sum / float64(len(s))
	for _, d := range s {
		sq += (us(d) - l.MeanUs) * (us(d) - l.MeanUs)
	}
	l.StdevUs = math.Sqrt(sq / float64(len(s)))
	l.MinUs, l.MaxUs = us(s[0]), us(s[len(s)-1])
	l.MedianUs, l.P99Us, l.P999Us = rank(0.5), rank(0.99), rank(0.999)
	return l
}

// kernelDrops is the kernel's count of datagrams dropped on the UDP sockets bound to port
// (Linux: the drops column of /proc/net/udp and udp6, the counter SO_RXQ_OVFL reports);
// ok is false where there is none.
func kernelDrops(port uint16) (n int64, ok bool) {
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // the header
		for sc.Scan() {
			cols := strings.Fields(sc.Text())
			if len(cols) < 13 {
				continue
			}
			i := strings.LastIndexByte(cols[1], ':')
			p, err := strconv.ParseUint(cols[1][i+1:], 16, 16)
			if err != nil || uint16(p) != port {
				continue
			}
			d, err := strconv.ParseInt(cols[len(cols)-1], 10, 64)
			if err != nil {
				continue
			}
			n, ok = n+d, true
		}
		fh.Close()
	}
	return n, ok
}

// rmemMax is net.core.rmem_max, 0 where unknown.
func rmemMax() int64 {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// splitLoss splits the packets lost between the queue pairs (lost: sent into the sockets and
// never received, both ways) into those the kernels dropped on the data sockets (local: this
// host's count; server: the server's, when remote) and those lost on the path (R30).
func (r *Result) splitLoss(local, server int64, remote bool, lost int64) {
	k := local
	if remote {
		s := server
		r.ServerSocketDroppedPackets = &s
		k += server
	}
	path := max(lost-k, 0)
	pathData := max(r.SocketLostDataPackets-k, 0)
	r.SocketDroppedPackets, r.PathLostPackets, r.PathLostDataPackets = &k, &path, &pathData
}

// socketWarning fills the loss figures of r and, past SocketLossWarnFraction of the data
// packets handed to the sockets, its warning: where the packets were lost (the kernel's
// drops on the sockets, or the path) and what to do about it. local says whether both ends
// ran on this host (loopback).
func (r *Result) socketWarning(local bool) {
	r.SocketLossFraction = 0
	if r.SocketDataPackets > 0 {
		r.SocketLossFraction = float64(max(r.SocketLostDataPackets, 0)) / float64(r.SocketDataPackets)
	}
	r.Warning = ""
	over := func(n int64) bool {
		return n > 2 && r.SocketDataPackets > 0 && float64(n)/float64(r.SocketDataPackets) > SocketLossWarnFraction
	}
	pct := func(n int64) float64 { return 100 * float64(n) / float64(max(r.SocketDataPackets, 1)) }
	rate := units.FormatRate(r.Rate)
	if r.Bidirectional {
		rate += " each way"
	}
	lost := max(r.SocketLostDataPackets, 0)
	if r.SocketDroppedPackets == nil || r.PathLostDataPackets == nil {
		// No kernel count for one of the sockets: the loss cannot be placed.
		if !over(lost) {
			return
		}
		unknown := "the kernel's count of socket drops is unknown"
		if !local {
			unknown += " (this host's, or the server's: it does not report it)"
		}
		r.Warning = fmt.Sprintf("%d of %d data packets (%.1f%%) were lost between the queue pairs, in the sockets or on the path "+
			"(a proxy, a rate limiter or the network): %s; --rate %s is more than this path carries: lower it",
			lost, r.SocketDataPackets, pct(lost), unknown, rate)
		return
	}
	k := *r.SocketDroppedPackets
	var w []string
	if sd := min(k, lost); over(sd) {
		where := "this host's sockets"
		if !local {
			var srv int64
			if r.ServerSocketDroppedPackets != nil {
				srv = *r.ServerSocketDroppedPackets
			}
			where = fmt.Sprintf("the sockets (this host's %d, the server's %d)", k-srv, srv)
		}
		w = append(w, fmt.Sprintf("%d of %d data packets (%.1f%%) were dropped by %s: --rate %s is more than this path carries; "+
			"the retransmissions below are the kernel's drops, not a transport fault; lower --rate, or %s",
			sd, r.SocketDataPackets, pct(sd), where, rate, r.bufferAdvice(local)))
	}
	if pd := *r.PathLostDataPackets; over(pd) {
		w = append(w, fmt.Sprintf("%d of %d data packets (%.1f%%) were lost on the path between the sockets, not in them "+
			"(the kernels dropped %d packets): a proxy, a rate limiter or the network dropped them; "+
			"--rate %s above the path's bottleneck causes this: lower it to the path's rate",
			pd, r.SocketDataPackets, pct(pd), k, rate))
	}
	r.Warning = strings.Join(w, "; ")
}

// bufferAdvice says how to give the sockets more buffer, with what they have now.
func (r *Result) bufferAdvice(local bool) string {
	have := fmt.Sprintf("this host's socket has %d", r.SocketReceiveBuffer)
	if !local && r.ServerSocketReceiveBuffer > 0 {
		have += fmt.Sprintf(", the server's %d", r.ServerSocketReceiveBuffer)
	}
	asked := max(r.socketAsked, 8<<20)
	if r.SocketBufferForced || r.RmemMax >= int64(asked) {
		// The kernel did not cap what was asked: ask for more.
		return fmt.Sprintf("ask for larger socket buffers: --socket-buffer %s (%s)", units.FormatSize(int64(2*asked)), have)
	}
	where := ""
	if !local {
		where = " on the host that dropped them"
	}
	return fmt.Sprintf("raise the socket buffers%s: sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d (now %d here; %s)",
		where, asked, asked, r.RmemMax, have)
}

// dirSeed is the seed of the data of the server's direction of QP seed's QP.
func dirSeed(seed uint64) uint64 { return mix(seed, 0xb1d1) }
