package udpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/roce"
)

// dropLog writes one JSON object per dropped datagram. Both directions write to it; each
// builds its line in its own buffer and takes the lock only to copy it out.
type dropLog struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func newDropLog(w io.Writer) *dropLog { return &dropLog{w: bufio.NewWriterSize(w, 64<<10)} }

// write appends the line for a dropped datagram to line[:0], writes it and returns the buffer
// for reuse. Nothing here allocates.
func (l *dropLog) write(line []byte, start time.Time, now time.Duration, dir string, pk *pkt,
	v netem.Verdict) []byte {
	b := append(line[:0], `{"time":"`...)
	b = start.Add(now).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","t":`...)
	b = strconv.AppendFloat(b, now.Seconds(), 'f', 9, 64)
	b = append(b, `,"dir":"`...)
	b = append(b, dir...)
	b = append(b, `","index":`...)
	b = strconv.AppendUint(b, pk.idx, 10)
	b = append(b, `,"reason":"`...)
	b = append(b, v.String()...)
	b = append(b, `","len":`...)
	b = strconv.AppendInt(b, int64(len(pk.data)), 10)
	b = append(b, `,"client":"`...)
	b = pk.cl.addr.AppendTo(b)
	b = append(b, '"')
	if pk.hasTOS {
		b = append(b, `,"tos":`...)
		b = strconv.AppendUint(b, uint64(pk.tos), 10)
	}
	if h, ok := RoCE(pk.data); ok {
		b = append(b, `,"opcode":"`...)
		b = appendOpcode(b, h.OpCode)
		b = append(b, `","qp":`...)
		b = strconv.AppendUint(b, uint64(h.DestQP), 10)
		b = append(b, `,"psn":`...)
		b = strconv.AppendUint(b, uint64(h.PSN), 10)
	}
	b = append(b, "}\n"...)
	l.mu.Lock()
	if l.err == nil {
		_, l.err = l.w.Write(b)
	}
	l.mu.Unlock()
	return b
}

func (l *dropLog) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.w.Flush()
	}
	if l.err != nil {
		return fmt.Errorf("drop log: %w", l.err)
	}
	return nil
}

// RoCE reports whether a datagram is a RoCEv2 packet and returns its BTH. A proxy sees no
// destination port 4791, so any datagram is tried: it is named RoCEv2 only when its BTH has
// transport header version 0 and a known opcode and the whole packet (extension headers, pad,
// ICRC field) parses cleanly. The ICRC itself is not checked: it covers IP and UDP headers the
// proxy does not see.
func RoCE(b []byte) (roce.BTH, bool) {
	if len(b) < roce.BTHLen+roce.ICRCLen {
		return roce.BTH{}, false
	}
	// Cheap checks first, so that other traffic does not pay for a parse error.
	h, _, err := roce.ParseBTH(b)
	if err != nil || h.TVer != 0 || !h.OpCode.Info().Known {
		return roce.BTH{}, false
	}
	if _, err := roce.ParsePacket(b); err != nil {
		return roce.BTH{}, false
	}
	return h, true
}

// appendOpcode appends op's name as roce.Opcode.String spells it, without allocating.
func appendOpcode(b []byte, op roce.Opcode) []byte {
	info := op.Info()
	if info.Transport != roce.TransportRC && op != roce.OpCNP {
		b = append(b, info.Transport.String()...)
		b = append(b, '_')
	}
	return append(b, info.Name...)
}

// pcapLog records forwarded and dropped datagrams as Ethernet frames. The frames carry the
// addresses the proxy stands between (client and forward address), the TOS as forwarded,
// and, so that drops can be told apart, distinct MAC addresses and TTL (see the package
// documentation).
type pcapLog struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	w   *capture.Writer
	err error
}

// Frame markers: the source MAC names the direction, the destination MAC what became of the
// datagram.
var (
	macForward  = [6]byte{0x02, 'c', 'r', 'e', 'm', 0x01}
	macReverse  = [6]byte{0x02, 'c', 'r', 'e', 'm', 0x02}
	macSent     = [6]byte{0x02, 'c', 'r', 'e', 'm', 0x00}
	macLost     = [6]byte{0x02, 'c', 'r', 'e', 'm', 0xd1}
	macOverflow = [6]byte{0x02, 'c', 'r', 'e', 'm', 0xd2}
	macMerged   = [6]byte{0x02, 'c', 'r', 'e', 'm', 0xd3}
)

// fate is what became of a recorded datagram.
type fate uint8

const (
	fateSent     fate = iota // forwarded
	fateLost                 // dropped by the loss model
	fateOverflow             // dropped: the queue was full
	fateMerged               // a PATH_REPORT merged into one of the path reporter's own
)

func fateOf(v netem.Verdict) fate {
	switch v {
	case netem.Queued:
		return fateSent
	case netem.DroppedLoss:
		return fateLost
	}
	return fateOverflow
}

func newPcapLog(w io.Writer) (*pcapLog, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw, err := capture.NewWriter(bw)
	if err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	return &pcapLog{bw: bw, w: cw}, nil
}

func (l *pcapLog) write(t time.Time, ends [2]netip.AddrPort, pk *pkt, f fate) {
	h := capture.FrameHeader{Src: ends[0], Dst: ends[1], TOS: pk.tos, ID: uint16(pk.idx)}
	if ends[1] == pk.cl.addr {
		h.SrcMAC = macReverse
	} else {
		h.SrcMAC = macForward
	}
	switch f {
	case fateSent:
		h.DstMAC = macSent
	case fateLost:
		h.DstMAC, h.TTL = macLost, 1
	case fateMerged:
		h.DstMAC, h.TTL = macMerged, 1
	default:
		h.DstMAC, h.TTL = macOverflow, 1
	}
	if h.Src.Addr().Is4() != h.Dst.Addr().Is4() {
		// A client on IPv6 and a forward address on IPv4 (or the reverse): record both ends as
		// IPv6, mapping the IPv4 one.
		h.Src = netip.AddrPortFrom(netip.AddrFrom16(h.Src.Addr().As16()), h.Src.Port())
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16(h.Dst.Addr().As16()), h.Dst.Port())
	}
	l.mu.Lock()
	if l.err == nil {
		l.err = l.w.WriteUDP(t, h, pk.data)
	}
	l.mu.Unlock()
}

func (l *pcapLog) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.bw.Flush()
	}
	if l.err != nil {
		return fmt.Errorf("pcap: %w", l.err)
	}
	return nil
}
