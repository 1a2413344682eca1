package pcapstats

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/netem"
)

// labCapture runs the lab's crem+tcaeth configuration with loss and returns its result and the
// capture of its path.
func labCapture(t *testing.T, seed uint64) (lab.Run, int, []byte) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the lab on loopback")
	}
	loss, err := netem.ParseLossSpec("0.05")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	res, err := lab.Lab(context.Background(), lab.Options{RTT: 2 * time.Millisecond, Loss: loss, Rate: 100e6, Messages: 2,
		Size: 512 << 10, QPs: 2, Seed: seed, Runs: []string{"crem+tcaeth"}, Pcap: &buf, Timeout: 30 * time.Second, RetryCount: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 1 || !res.Runs[0].Verified {
		t.Fatalf("the lab did not verify: %+v", res.Runs)
	}
	return res.Runs[0], res.CREMPort, buf.Bytes()
}

// The lab's capture of its path, summarised, agrees with the lab's own figures where they mean
// the same thing (protocol notes G10):
//   - the datagrams the path dropped are exactly the frames marked dropped, in total and, for
//     RoCEv2, per destination QP (the path records a drop and counts it under one lock);
//   - the data PSNs of a QP lost every time they were sent are the lab's restored_only, give or
//     take the RDMA retransmissions still in flight when the path stopped recording (a copy that
//     crossed after that is in the lab's tally, not in the capture);
//   - RoCEv2 retransmissions (PSNs seen again) are at most the QPs' rdma_retx, and coded
//     retransmissions at most the CSFs' coded_retx: the capture stops when the run's figures are
//     taken, and what crossed after is not in it (in practice both are equal, or one short);
//   - REPAIR_REQUESTs in the capture are at least those the CSFs received: each crossed the path
//     before the gateways stopped, which is before the path stopped recording;
//   - every flow has its HELLO, so no block is unmapped, and the restored estimate lies between
//     the packets that arrived only because they were restored and the CRFs' restorations
//     (plus the slack of RDMA retransmissions in flight at the end). In practice it equals them.
func TestLabCaptureAgreesWithLabSection6(t *testing.T) {
	run, port, pcap := labCapture(t, 5)
	s, err := Read(bytes.NewReader(pcap), Options{CREMPort: port, DropsMarked: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab: lost %d restored %d coded_retx %d rdma_retx %d requests %d; per QP %+v", run.Lost, run.Restored,
		run.CodedRetx, run.RDMARetx, run.RepairRequests, run.PerQP)
	t.Logf("capture: frames %+v crem %+v repair %+v requests %+v restored %+v roce %+v", s.Frames, s.CREM.Messages,
		s.CREM.Repair, s.CREM.RepairRequests, s.CREM.Restored, s.RoCE.QPCounts)
	if s.Frames.Dropped != run.Lost {
		t.Errorf("%d frames marked dropped, the lab lost %d", s.Frames.Dropped, run.Lost)
	}
	if s.Frames.OtherUDP != 0 || s.CREM.Messages.Malformed != 0 || s.RoCE.Malformed != 0 || s.RoCE.ICRCBad != 0 {
		t.Errorf("unrecognised or malformed traffic: %+v, %+v, %+v", s.Frames, s.CREM.Messages, s.RoCE.QPCounts)
	}
	qps := map[uint32]QPCounts{}
	for _, q := range s.RoCE.QPs {
		qps[q.DestQP] = q.QPCounts
	}
	var restoredOnly uint64
	for _, q := range run.PerQP {
		a, b := qps[q.RequesterQPN], qps[q.ResponderQPN]
		if a.Dropped+b.Dropped != q.Lost {
			t.Errorf("QP %d: %d + %d RoCEv2 frames marked dropped, the lab lost %d", q.QP, a.Dropped, b.Dropped, q.Lost)
		}
		missing := a.MissingPSNs + b.MissingPSNs
		if missing < q.RestoredOnly || missing > q.RestoredOnly+q.RDMARetx {
			t.Errorf("QP %d: %d data PSNs missing, the lab has %d restored only and %d RDMA retransmissions", q.QP, missing,
				q.RestoredOnly, q.RDMARetx)
		}
		restoredOnly += q.RestoredOnly
	}
	if s.CREM.Repair.CodedRetx > run.CodedRetx {
		t.Errorf("%d coded retransmissions in the capture, the CSFs sent %d", s.CREM.Repair.CodedRetx, run.CodedRetx)
	}
	if s.CREM.RepairRequests.Total < run.RepairRequests {
		t.Errorf("%d REPAIR_REQUESTs in the capture, the CSFs received %d", s.CREM.RepairRequests.Total, run.RepairRequests)
	}
	if s.CREM.Restored.Unmapped != 0 || s.CREM.Restored.Blocks == 0 || len(s.CREM.Flows) == 0 {
		t.Errorf("restored estimate %+v over %d flows", s.CREM.Restored, len(s.CREM.Flows))
	}
	if e := s.CREM.Restored.Packets; e < restoredOnly || e > run.Restored+run.RDMARetx {
		t.Errorf("restored estimate %d: below the %d packets that arrived only restored, or above the CRFs' %d restored and %d RDMA retransmissions",
			e, restoredOnly, run.Restored, run.RDMARetx)
	}
	if s.RoCE.Retransmissions > run.RDMARetx {
		t.Errorf("%d retransmissions in the capture, the QPs made %d", s.RoCE.Retransmissions, run.RDMARetx)
	}
	if s.RoCE.Packets == 0 || s.RoCE.ExtendedACKs == 0 {
		t.Errorf("roce %+v", s.RoCE.QPCounts)
	}
}
