package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
)

// TestCREMTCAETHBeatsGBN runs the lab's defaults (20 ms RTT, 1 percent loss, 500 Mbit/s, four QPs,
// 16 messages of 4 MiB) for gbn and crem+tcaeth: every byte of both is verified, and crem+tcaeth
// beats gbn on what makes it complete sooner, counted rather than timed so that a shared
// machine's load cannot decide: RDMA retransmits less than a tenth of what gbn does (measured:
// 29 against 12,281; gbn sends its window again for every loss, CREM restores most losses and
// T/C AETH asks for the rest alone), and the path carries fewer octets per message octet
// (1.18 against 1.76). Completion times are logged: on an idle machine crem+tcaeth's mean and
// max are shorter too (1.15 s and 1.78 s against 1.70 s and 2.86 s, measured under a load of 7).
func TestCREMTCAETHBeatsGBN(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab's defaults (about 8 s)")
	}
	loss, _ := netem.ParseLossSpec("0.01")
	res, err := Lab(context.Background(), Options{Loss: loss, Seed: 1, Runs: []string{"gbn", "crem+tcaeth"}, Timeout: 50 * time.Second,
		RetryCount: stallRetries})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("runs: %+v", res.Runs)
	}
	g, c := res.Runs[0], res.Runs[1]
	t.Logf("gbn %+v", g)
	t.Logf("crem+tcaeth %+v", c)
	if !g.Verified || !c.Verified {
		t.Fatalf("not verified: gbn %q, crem+tcaeth %q", g.Error, c.Error)
	}
	if c.Restored == 0 || g.Lost == 0 || c.Lost == 0 {
		t.Fatalf("want losses and restorations: %+v %+v", g, c)
	}
	t.Logf("completion mean and max: crem+tcaeth %.3f s %.3f s, gbn %.3f s %.3f s", c.MeanS, c.MaxS, g.MeanS, g.MaxS)
	if testenv.Race {
		// Slowed several times over, CREM's restorations come after the reorder window and
		// the QPs' timers: T/C AETH retransmits what CREM restores too late.
		t.Skip("the race detector slows the engines past the reorder window")
	}
	if 10*c.RDMARetx >= g.RDMARetx {
		t.Errorf("crem+tcaeth retransmitted %d RDMA packets (%d lost, %d restored), gbn %d: want less than a tenth",
			c.RDMARetx, c.Lost, c.Restored, g.RDMARetx)
	}
	if c.Overhead >= g.Overhead {
		t.Errorf("crem+tcaeth carried %.3f octets per message octet, gbn %.3f", c.Overhead, g.Overhead)
	}
}

// TestCREMRestoresReads runs the lab's defaults for READ, tcaeth and crem+tcaeth: with the
// reorder window covering CREM's restoration delay (T5, protocol notes R22), a READ response
// CREM restores arrives before the requester re-issues its READ, so crem+tcaeth retransmits a
// quarter or less of what tcaeth does (before R22 about as much: 333 against 348; measured since,
// 28 against 347). Counted, not timed: completion times, logged, depend on the machine's load.
// The count depends on it too, where CREM's restorations, slowed by a busy machine, come after
// the window: the pair runs up to three times and one run within the bound passes (without R22
// none is: the ratio is then about 1). A run whose QPs met more RDMA timeouts than messages says
// nothing either way (a READ's timer fires for a lost tail, at most once a message on this path;
// measured: none in either run when the machine keeps up, 47 to 91 for 16 messages under a load
// of 10 on two cores, completion four times slower); if every run is such, the test skips.
func TestCREMRestoresReads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab's defaults for READ (about 3 s)")
	}
	loss, _ := netem.ParseLossSpec("0.01")
	var failed []string
	for attempt := range 3 {
		res, err := Lab(context.Background(), Options{Loss: loss, Seed: 1, Op: "read", Runs: []string{"tcaeth", "crem+tcaeth"},
			Timeout: 50 * time.Second, RetryCount: stallRetries})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Runs) != 2 {
			t.Fatalf("runs: %+v", res.Runs)
		}
		p, c := res.Runs[0], res.Runs[1]
		if !p.Verified || !c.Verified {
			t.Fatalf("not verified: tcaeth %q, crem+tcaeth %q", p.Error, c.Error)
		}
		if c.Restored == 0 || p.Lost == 0 {
			t.Fatalf("want losses and restorations: %+v %+v", p, c)
		}
		if testenv.Race {
			// The reorder window is sized for CREM's restoration delay at full speed; slowed
			// several times over, restorations come after it and READs are re-issued.
			t.Skip("the race detector slows the engines past the reorder window")
		}
		t.Logf("run %d: RDMA retransmissions crem+tcaeth %d (%d lost, %d restored), tcaeth %d; timeouts %d and %d; completion mean and max %.3f s %.3f s, tcaeth %.3f s %.3f s",
			attempt, c.RDMARetx, c.Lost, c.Restored, p.RDMARetx, c.RDMATimeouts, p.RDMATimeouts, c.MeanS, c.MaxS, p.MeanS, p.MaxS)
		switch {
		case p.RDMATimeouts > uint64(p.Messages) || c.RDMATimeouts > uint64(c.Messages):
			continue // the machine starved the lab's timers: this run says nothing
		case 4*c.RDMARetx <= p.RDMARetx:
			return
		}
		failed = append(failed, fmt.Sprintf("crem+tcaeth %d against tcaeth %d", c.RDMARetx, p.RDMARetx))
	}
	if len(failed) == 0 {
		t.Skip("every run met more RDMA timeouts than messages: the machine is too busy to judge R22")
	}
	t.Fatalf("no run within a quarter of tcaeth's RDMA retransmissions: %s", strings.Join(failed, "; "))
}

// stallRetries is the retry count of the tests' QPs on paths of a few milliseconds: seven
// timeouts in a row (3 SRTT each) are a stall of some 0.1 s there, which a busy machine meets,
// and what these tests judge is not RDMA's patience.
const stallRetries = 100

// TestOperations runs every configuration briefly for SEND and READ.
func TestOperations(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.01")
	for _, op := range []string{"send", "read"} {
		res, err := Lab(context.Background(), Options{RTT: 4 * time.Millisecond, Loss: loss, Rate: 200e6, Messages: 3,
			Size: 256 << 10, Op: op, Seed: 2, Timeout: 30 * time.Second, RetryCount: stallRetries})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Runs {
			if !r.Verified {
				t.Errorf("%s %s: %s", op, r.Name, r.Error)
			}
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	for _, o := range []Options{{Op: "cas"}, {MTU: 1000}, {Runs: []string{"crem+sr"}}, {Rate: 10}} {
		if _, err := Lab(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestPcap: --pcap captures the impaired path of every run in one classic pcap file of
// Ethernet frames, the datagrams the path dropped marked with TTL 1.
func TestPcap(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.05")
	var buf bytes.Buffer
	res, err := Lab(context.Background(), Options{RTT: 2 * time.Millisecond, Loss: loss, Rate: 100e6, Messages: 1, Size: 128 << 10,
		Seed: 4, Runs: []string{"tcaeth", "crem+tcaeth"}, Pcap: &buf, Timeout: 20 * time.Second, RetryCount: stallRetries})
	if err != nil || !res.Verified() {
		t.Fatalf("%v %+v", err, res)
	}
	r, err := capture.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != capture.LinkEthernet {
		t.Fatalf("link type %v", r.LinkType())
	}
	var frames, dropped int
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		d, err := capture.DecodeUDP(f.LinkType, f.Data)
		if err != nil {
			t.Fatalf("frame %d: %v", f.Number, err)
		}
		if d.IPHeader[8] == 1 {
			dropped++
		}
	}
	var lost uint64
	for _, x := range res.Runs {
		lost += x.Lost
	}
	if frames == 0 || uint64(dropped) != lost {
		t.Fatalf("%d frames, %d marked dropped, the runs lost %d", frames, dropped, lost)
	}
}
