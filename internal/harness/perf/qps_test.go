package perf

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
	"github.com/crem-project/crem/roce"
)

// wrapSeed returns the first seed from 1 for which one of the first qps QPs' initial PSNs lies
// within psns of the wrap, so that its run crosses from 0xffffff to 0, and that QP.
func wrapSeed(t *testing.T, qps, psns int) (uint64, int) {
	for seed := uint64(1); seed < 1<<22; seed++ {
		for q := range qps {
			if p := InitialPSN(seed, q); uint32(p) > psn.Mask-uint32(psns) {
				return seed, q
			}
		}
	}
	t.Fatal("no seed puts a QP's initial PSN just below the wrap")
	return 0, 0
}

// checkQPs checks a run of several QPs: each verified every message on its own, with its own
// QPNs and its own initial PSN (InitialPSN of the seed: reproducible), its PSNs advanced by
// exactly its messages' (the one of wrapQ across the wrap), and the totals are the sums.
func checkQPs(t *testing.T, res Result, o Options, wrapQ int) {
	t.Helper()
	if !res.Verified || res.QPs != o.QPs || len(res.PerQP) != o.QPs {
		t.Fatalf("%d QPs: verified %v, qps %d, %d per QP: %+v", o.QPs, res.Verified, res.QPs, len(res.PerQP), res)
	}
	per := int(roce.OpReadRequest.PSNs(uint32(o.Size), uint32(o.MTU)))
	if o.Op != "read" {
		per = (o.Size + o.MTU - 1) / o.MTU
	}
	psns, qpns, rqpns := map[uint32]bool{}, map[uint32]bool{}, map[uint32]bool{}
	var sum Result
	for i, q := range res.PerQP {
		if q.QP != i || !q.Verified || q.Completed != o.Iters || q.Iterations != o.Iters || q.Error != "" ||
			q.Bytes != int64(o.Size)*int64(o.Iters) {
			t.Errorf("QP %d: %+v", i, q)
		}
		if q.InitialPSN != uint32(InitialPSN(o.Seed, i)) {
			t.Errorf("QP %d: initial PSN %#x, the seed gives %#x", i, q.InitialPSN, uint32(InitialPSN(o.Seed, i)))
		}
		if got := psn.Of(q.InitialPSN).Forward(psn.Of(q.NextPSN)); got != uint32(per*o.Iters) {
			t.Errorf("QP %d: PSNs %#x..%#x, %d taken, want %d", i, q.InitialPSN, q.NextPSN, got, per*o.Iters)
		}
		if q.Wrapped != (i == wrapQ) {
			t.Errorf("QP %d: wrapped %v (PSNs %#x..%#x), want %v", i, q.Wrapped, q.InitialPSN, q.NextPSN, i == wrapQ)
		}
		psns[q.InitialPSN], qpns[q.LocalQPN], rqpns[q.RemoteQPN] = true, true, true
		sum.Completed += q.Completed
		sum.Bytes += q.Bytes
		sum.DataPackets += q.DataPackets
		sum.RetransmittedPackets += q.RetransmittedPackets
		sum.AckPackets += q.AckPackets
		sum.DroppedPackets += q.DroppedPackets
		sum.DroppedDataPackets += q.DroppedDataPackets
		sum.Seconds = max(sum.Seconds, q.Seconds)
	}
	if len(psns) != o.QPs || len(qpns) != o.QPs || len(rqpns) != o.QPs {
		t.Errorf("initial PSNs %v, QPNs %v and %v: not one each per QP", psns, qpns, rqpns)
	}
	if sum.Completed != res.Completed || res.Iterations != o.Iters*o.QPs || sum.Bytes != res.Bytes ||
		sum.DataPackets != res.DataPackets || sum.RetransmittedPackets != res.RetransmittedPackets ||
		sum.AckPackets != res.AckPackets || sum.DroppedPackets != res.DroppedPackets ||
		sum.DroppedDataPackets != res.DroppedDataPackets || sum.Seconds > res.Seconds {
		t.Errorf("totals %+v are not the sums of the QPs %+v", res, sum)
	}
	if o.Loss.MeanLoss() > 0 && res.DroppedDataPackets == 0 {
		t.Errorf("no data packet lost at loss %v", o.Loss)
	}
}

// perftest's -q: several queue pairs between one client and one server over loopback sockets,
// WRITE, SEND and READ with 2 percent loss each way, each QP with its own random initial PSN
// (one of them, for the seed the test picks, just below the wrap), its own data and its own
// impairment, every byte verified on every QP (protocol notes R25).
func TestLoopbackQPs(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.02")
	for _, op := range []string{"write", "send", "read"} {
		o := Options{Op: op, Size: 64 << 10, Iters: 6, MTU: 1024, Mode: rc.ModeTCAETH, Rate: 1e9, Loss: loss,
			Delay: 2 * time.Millisecond, QPs: 4, Timeout: time.Minute, RetryCount: stallRetries}
		var wrapQ int
		o.Seed, wrapQ = wrapSeed(t, o.QPs, o.Iters*o.Size/o.MTU)
		res, err := Loopback(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v (%+v)", op, err, res)
		}
		checkQPs(t, res, o, wrapQ)
		t.Logf("%s, seed %d: %.3f s, data %d, retx %d, dropped %d; QP %d from %#x to %#x", op, o.Seed, res.Seconds,
			res.DataPackets, res.RetransmittedPackets, res.DroppedPackets, wrapQ, res.PerQP[wrapQ].InitialPSN, res.PerQP[wrapQ].NextPSN)
	}
	// Another mode, and the data of each QP is its own: QP 0 keeps the run's seed.
	if qpSeed(9, 0) != 9 || qpSeed(9, 1) == qpSeed(9, 2) || qpSeed(9, 1) == 9 {
		t.Fatalf("QP seeds %d %d %d", qpSeed(9, 0), qpSeed(9, 1), qpSeed(9, 2))
	}
	o := Options{Op: "write", Size: 32 << 10, Iters: 4, MTU: 1024, Mode: rc.ModeGBN, Rate: 1e9, Loss: loss,
		Delay: time.Millisecond, QPs: 3, Seed: 9, Timeout: time.Minute, RetryCount: stallRetries}
	res, err := Loopback(context.Background(), o)
	if err != nil {
		t.Fatalf("gbn: %v", err)
	}
	checkQPs(t, res, o, -1)
}

// The same against a server on its own sockets (crem perf serve and a client elsewhere): each
// QP is a session of its own at the server, which checks its data.
func TestClientServerQPs(t *testing.T) {
	srvHost, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srvHost.Close()
	setup, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); Serve(ctx, setup, srvHost, discard{}) }()
	defer func() { stop(); <-served }()
	cliHost, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cliHost.Close()
	loss, _ := netem.ParseLossSpec("0.01")
	o := Options{Op: "write", Size: 48 << 10, Iters: 5, MTU: 1024, Mode: rc.ModeSR, Rate: 1e9, Loss: loss,
		Delay: time.Millisecond, QPs: 5, Server: setup.LocalAddr().String(), Timeout: time.Minute, RetryCount: stallRetries}
	var wrapQ int
	o.Seed, wrapQ = wrapSeed(t, o.QPs, o.Iters*o.Size/o.MTU)
	res, err := Run(context.Background(), o, cliHost)
	if err != nil {
		t.Fatalf("%v (%+v)", err, res)
	}
	checkQPs(t, res, o, wrapQ)
	bad := Options{Op: "write", QPs: MaxQPs + 1}
	if err := bad.defaults(); err == nil {
		t.Fatal("more than MaxQPs queue pairs accepted")
	}
}
