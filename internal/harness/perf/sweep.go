package perf

import (
	"context"
	"errors"
	"fmt"

	"github.com/crem-project/crem/rc/udp"
)

// Sizes are the sizes of an AllSizes run: the powers of two from MinSize to max.
func Sizes(max int) []int {
	var s []int
	for n := MinSize; n <= max; n *= 2 {
		s = append(s, n)
	}
	return s
}

// runSizes runs every size of Sizes(opts.MaxSize) in turn, each a run of its own against the
// same server (new sessions), and stops at the first that fails. The total sums the rows.
func runSizes(ctx context.Context, opts Options, host *udp.Host) (Result, error) {
	tot := Result{Op: opts.Op, Mode: opts.Mode.String(), MTU: opts.MTU, Rate: opts.Rate, Loss: opts.Loss.String(),
		DelayMs: float64(opts.Delay) / 1e6, QPs: opts.QPs, DurationSeconds: opts.Duration.Seconds(),
		Bidirectional: opts.Bidirectional, AllSizes: true, Verified: true, PerQP: []QPResult{}, RateDefault: opts.rateDefault}
	tot.timers(&opts)
	var kernel int64
	haveKernel := true
	var split lossSplit
	sizes := Sizes(opts.MaxSize)
	for i, size := range sizes {
		if errors.Is(ctx.Err(), context.Canceled) {
			tot.Verified, tot.Interrupted, tot.SizesNotRun = false, true, sizes[i:]
			split.into(&tot)
			tot.finishTotals(kernel, haveKernel, opts)
			return tot, ErrInterrupted
		}
		o := opts
		o.AllSizes, o.Size = false, size
		r, err := runOne(ctx, o, host)
		tot.Rows = append(tot.Rows, r)
		tot.Size = size
		tot.Iterations += r.Iterations
		tot.Completed += r.Completed
		tot.Bytes += r.Bytes
		tot.Seconds += r.Seconds
		tot.Verified = tot.Verified && r.Verified
		tot.DataPackets += r.DataPackets
		tot.RetransmittedPackets += r.RetransmittedPackets
		tot.TimeoutRetransmissions += r.TimeoutRetransmissions
		tot.AckPackets += r.AckPackets
		tot.NakPackets += r.NakPackets
		tot.DroppedPackets += r.DroppedPackets
		tot.DroppedDataPackets += r.DroppedDataPackets
		tot.SocketLostDataPackets += r.SocketLostDataPackets
		tot.SocketDataPackets += r.SocketDataPackets
		tot.SocketPackets += r.SocketPackets
		split.add(r)
		tot.SocketReceiveBuffer, tot.SocketBufferForced = r.SocketReceiveBuffer, r.SocketBufferForced
		tot.ServerSocketReceiveBuffer = max(tot.ServerSocketReceiveBuffer, r.ServerSocketReceiveBuffer)
		tot.RmemMax, tot.socketAsked, tot.RateDefault = r.RmemMax, r.socketAsked, r.RateDefault
		tot.PeakGbps = max(tot.PeakGbps, r.PeakGbps)
		tot.RTTMs = max(tot.RTTMs, r.RTTMs)
		if r.KernelSocketDrops != nil {
			kernel += *r.KernelSocketDrops
		} else {
			haveKernel = false
		}
		if errors.Is(err, ErrInterrupted) {
			tot.Verified, tot.Interrupted, tot.Cancelled, tot.SizesNotRun = false, true, r.Cancelled, sizes[i+1:]
			split.into(&tot)
			tot.finishTotals(kernel, haveKernel, opts)
			return tot, ErrInterrupted
		}
		if err != nil {
			tot.Verified = false
			tot.Error = fmt.Sprintf("size %d: %v", size, err)
			split.into(&tot)
			tot.finishTotals(kernel, haveKernel, opts)
			return tot, fmt.Errorf("perf: size %d: %w", size, err)
		}
	}
	split.into(&tot)
	tot.finishTotals(kernel, haveKernel, opts)
	return tot, nil
}

func (t *Result) finishTotals(kernel int64, haveKernel bool, opts Options) {
	if t.Seconds > 0 {
		t.Gbps = float64(t.Bytes) * 8 / t.Seconds / 1e9
		t.MsgRateMpps = float64(t.Iterations) / t.Seconds / 1e6
	}
	t.AverageGbps = t.Gbps
	if haveKernel && len(t.Rows) > 0 {
		t.KernelSocketDrops = &kernel
	}
	t.socketWarning(opts.loopback)
	if !t.Verified {
		t.noBandwidth()
	}
}

// lossSplit sums the rows' split of the loss (R30): each figure only when every row has it.
type lossSplit struct {
	n                              int
	sock, server, path, pathData   int64
	haveSock, haveServer, havePath int
}

func (l *lossSplit) add(r Result) {
	l.n++
	if r.SocketDroppedPackets != nil {
		l.sock += *r.SocketDroppedPackets
		l.haveSock++
	}
	if r.ServerSocketDroppedPackets != nil {
		l.server += *r.ServerSocketDroppedPackets
		l.haveServer++
	}
	if r.PathLostPackets != nil && r.PathLostDataPackets != nil {
		l.path += *r.PathLostPackets
		l.pathData += *r.PathLostDataPackets
		l.havePath++
	}
}

func (l *lossSplit) into(t *Result) {
	if l.n == 0 {
		return
	}
	if l.haveSock == l.n {
		t.SocketDroppedPackets = &l.sock
	}
	if l.haveServer == l.n {
		t.ServerSocketDroppedPackets = &l.server
	}
	if l.havePath == l.n {
		t.PathLostPackets, t.PathLostDataPackets = &l.path, &l.pathData
	}
}
