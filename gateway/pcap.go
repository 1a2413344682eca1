package gateway

import (
	"bufio"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/capture"
)

// pcapRec records every datagram the gateway receives and sends as Ethernet/IP/UDP frames
// between the two socket addresses. Its writer is shared by the readers and the shards.
type pcapRec struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	w   *capture.Writer
	err error
}

func newPcapRec(w io.Writer) (*pcapRec, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw, err := capture.NewWriter(bw)
	if err != nil {
		return nil, err
	}
	return &pcapRec{bw: bw, w: cw}, nil
}

func (r *pcapRec) record(from, to netip.AddrPort, payload []byte) {
	if from.Addr().Is4() != to.Addr().Is4() {
		from = netip.AddrPortFrom(netip.AddrFrom16(from.Addr().As16()), from.Port())
		to = netip.AddrPortFrom(netip.AddrFrom16(to.Addr().As16()), to.Port())
	}
	r.mu.Lock()
	if r.err == nil {
		r.err = r.w.WriteUDP(time.Now(), capture.FrameHeader{
			SrcMAC: [6]byte{0x02, 0x63, 0x72, 0x65, 0x6d, 0x11}, DstMAC: [6]byte{0x02, 0x63, 0x72, 0x65, 0x6d, 0x12},
			Src: from, Dst: to}, payload)
	}
	r.mu.Unlock()
}

func (r *pcapRec) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	return r.bw.Flush()
}

// recordIP records a whole IPv4 packet (tun mode) in an Ethernet frame.
func (r *pcapRec) recordIP(ip []byte) {
	frame := make([]byte, 14+len(ip))
	copy(frame, []byte{0x02, 0x63, 0x72, 0x65, 0x6d, 0x12, 0x02, 0x63, 0x72, 0x65, 0x6d, 0x11, 0x08, 0x00})
	copy(frame[14:], ip)
	r.mu.Lock()
	if r.err == nil {
		r.err = r.w.WriteFrame(time.Now(), frame)
	}
	r.mu.Unlock()
}
