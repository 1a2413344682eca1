package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"time"
)

// LinkType is the link-layer header type of a capture (tcpdump.org LINKTYPE_ values).
type LinkType uint32

// The link types DecodeUDP understands.
const (
	LinkEthernet  LinkType = 1
	LinkRaw       LinkType = 101 // raw IPv4 or IPv6
	LinkRawDLT12  LinkType = 12  // raw IP as some systems' DLT_RAW wrote it
	LinkRawDLT14  LinkType = 14  // raw IP as OpenBSD's DLT_RAW wrote it
	LinkLinuxSLL  LinkType = 113 // Linux cooked capture v1
	LinkIPv4      LinkType = 228
	LinkIPv6      LinkType = 229
	LinkLinuxSLL2 LinkType = 276 // Linux cooked capture v2
)

// Format is a capture file format.
type Format uint8

// The formats Reader reads.
const (
	FormatPcap Format = iota + 1
	FormatPcapNG
)

func (f Format) String() string {
	switch f {
	case FormatPcap:
		return "pcap"
	case FormatPcapNG:
		return "pcapng"
	}
	return "unknown"
}

// Frame is one captured frame.
type Frame struct {
	Number   int // 1-based position in the file, as tshark's frame.number
	Time     time.Time
	LinkType LinkType
	Data     []byte // the captured octets; valid until the next call to Next
	OrigLen  int    // the frame's length on the wire; above len(Data) when the capture cut it
}

// Truncated reports whether the capture holds less of the frame than was on the wire.
func (f Frame) Truncated() bool { return f.OrigLen > len(f.Data) }

// ErrFormat is wrapped by every error about a file that is not a well-formed capture.
var ErrFormat = errors.New("not a well-formed capture file")

// maxRecord bounds one record, so a corrupt length cannot make the reader allocate gigabytes.
const maxRecord = 16 << 20

// ifaceInfo is what a pcapng interface description says about its packets.
type ifaceInfo struct {
	link     LinkType
	snaplen  uint32
	units    uint64 // timestamp units per second
	tsOffset int64  // seconds added to every timestamp
}

// Reader reads frames from a pcap or pcapng stream. It is not safe for concurrent use.
type Reader struct {
	r      *bufio.Reader
	format Format
	order  binary.ByteOrder
	n      int    // frames returned so far
	buf    []byte // reused for every record
	hdr    [28]byte

	// pcap
	link    LinkType
	snaplen uint32
	units   uint64

	// pcapng
	ifaces []ifaceInfo
}

// NewReader reads the file header of a pcap or pcapng stream and returns a reader of its
// frames.
func NewReader(r io.Reader) (*Reader, error) {
	cr := &Reader{r: bufio.NewReaderSize(r, 32<<10)}
	magic, err := cr.r.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("capture: reading the file header: %w", noEOF(err))
	}
	switch m := binary.LittleEndian.Uint32(magic); m {
	case 0xa1b2c3d4, 0xa1b23c4d, 0xd4c3b2a1, 0x4d3cb2a1:
		return cr, cr.readPcapHeader()
	case 0x0a0d0d0a:
		cr.format = FormatPcapNG
		return cr, cr.readSection()
	default:
		return nil, fmt.Errorf("capture: magic number %#08x is neither pcap nor pcapng: %w", m, ErrFormat)
	}
}

// Format returns the format of the file.
func (r *Reader) Format() Format { return r.format }

// LinkType returns the link type of a pcap file, or of the first interface of a pcapng file
// (0 if it has none yet).
func (r *Reader) LinkType() LinkType {
	if r.format == FormatPcap {
		return r.link
	}
	if len(r.ifaces) > 0 {
		return r.ifaces[0].link
	}
	return 0
}

// noEOF turns an end of file inside a structure into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) readPcapHeader() error {
	h := r.hdr[:24]
	if _, err := io.ReadFull(r.r, h); err != nil {
		return fmt.Errorf("capture: reading the pcap header: %w", noEOF(err))
	}
	r.format = FormatPcap
	r.order = binary.ByteOrder(binary.LittleEndian)
	m := binary.LittleEndian.Uint32(h)
	if m == 0xd4c3b2a1 || m == 0x4d3cb2a1 {
		r.order = binary.BigEndian
		m = bits.ReverseBytes32(m)
	}
	r.units = 1e6
	if m == 0xa1b23c4d {
		r.units = 1e9
	}
	if major := r.order.Uint16(h[4:]); major != 2 {
		return fmt.Errorf("capture: pcap version %d: %w", major, ErrFormat)
	}
	r.snaplen = r.order.Uint32(h[16:])
	// The upper bits carry FCS information; the link type is the low 16.
	r.link = LinkType(r.order.Uint32(h[20:]) & 0xffff)
	return nil
}

// Next returns the next frame, or io.EOF after the last one. A file that ends inside a record
// yields an error wrapping io.ErrUnexpectedEOF.
func (r *Reader) Next() (Frame, error) {
	if r.format == FormatPcap {
		return r.nextPcap()
	}
	return r.nextPcapNG()
}

func (r *Reader) nextPcap() (Frame, error) {
	h := r.hdr[:16]
	if _, err := io.ReadFull(r.r, h); err != nil {
		if err == io.EOF {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("capture: frame %d: record header: %w", r.n+1, noEOF(err))
	}
	sec, frac := r.order.Uint32(h), r.order.Uint32(h[4:])
	caplen, origlen := r.order.Uint32(h[8:]), r.order.Uint32(h[12:])
	if caplen > maxRecord {
		return Frame{}, fmt.Errorf("capture: frame %d: captured length %d exceeds %d: %w", r.n+1, caplen, maxRecord, ErrFormat)
	}
	data, err := r.read(int(caplen))
	if err != nil {
		return Frame{}, fmt.Errorf("capture: frame %d: %d octets of data: %w", r.n+1, caplen, noEOF(err))
	}
	r.n++
	return Frame{
		Number:   r.n,
		Time:     stamp(uint64(sec), uint64(frac), r.units),
		LinkType: r.link,
		Data:     data,
		OrigLen:  int(max(origlen, caplen)),
	}, nil
}

// read returns the next n octets in the reused buffer. It grows the buffer a megabyte at a
// time, so a corrupt length in a short file costs no more memory than the file.
func (r *Reader) read(n int) ([]byte, error) {
	b := r.buf[:0]
	for len(b) < n {
		chunk := min(n-len(b), 1<<20)
		b = slices.Grow(b, chunk)
		m, err := io.ReadFull(r.r, b[len(b):len(b)+chunk])
		b = b[:len(b)+m]
		if err != nil {
			r.buf = b
			return b, err
		}
	}
	r.buf = b
	return b, nil
}

// stamp converts seconds and a fraction in units per second into a time.
func stamp(sec, frac, units uint64) time.Time {
	if frac >= units {
		sec += frac / units
		frac %= units
	}
	hi, lo := bits.Mul64(frac, 1e9)
	ns, _ := bits.Div64(hi, lo, units) // hi < units as frac < units
	return time.Unix(int64(sec), int64(ns)).UTC()
}

// pcapng block types.
const (
	blockSHB = 0x0a0d0d0a
	blockIDB = 1
	blockPB  = 2 // obsolete Packet Block
	blockSPB = 3
	blockEPB = 6
)

// readBlock reads one pcapng block and returns its type and body (without the type, the lengths
// and any trailing padding is left in).
func (r *Reader) readBlock() (uint32, []byte, error) {
	h := r.hdr[:8]
	if _, err := io.ReadFull(r.r, h); err != nil {
		return 0, nil, err
	}
	if binary.LittleEndian.Uint32(h) == blockSHB {
		// A new section may switch the byte order: peek at its byte-order magic.
		bom, err := r.r.Peek(4)
		if err != nil {
			return 0, nil, noEOF(err)
		}
		switch binary.LittleEndian.Uint32(bom) {
		case 0x1a2b3c4d:
			r.order = binary.LittleEndian
		case 0x4d3c2b1a:
			r.order = binary.BigEndian
		default:
			return 0, nil, fmt.Errorf("capture: pcapng byte-order magic %x: %w", bom, ErrFormat)
		}
	}
	typ, total := r.order.Uint32(h), r.order.Uint32(h[4:])
	if total < 12 || total%4 != 0 || total > maxRecord {
		return 0, nil, fmt.Errorf("capture: pcapng block type %#x has length %d: %w", typ, total, ErrFormat)
	}
	b, err := r.read(int(total) - 8)
	if err != nil {
		return 0, nil, noEOF(err)
	}
	if r.order.Uint32(b[len(b)-4:]) != total {
		return 0, nil, fmt.Errorf("capture: pcapng block type %#x: trailing length differs from %d: %w", typ, total, ErrFormat)
	}
	return typ, b[:len(b)-4], nil
}

func (r *Reader) readSection() error {
	typ, body, err := r.readBlock()
	if err != nil {
		return fmt.Errorf("capture: reading the pcapng section header: %w", noEOF(err))
	}
	return r.section(typ, body)
}

func (r *Reader) section(typ uint32, body []byte) error {
	if typ != blockSHB || len(body) < 16 {
		return fmt.Errorf("capture: pcapng section header block is malformed: %w", ErrFormat)
	}
	if major := r.order.Uint16(body[4:]); major != 1 {
		return fmt.Errorf("capture: pcapng version %d: %w", major, ErrFormat)
	}
	r.ifaces = r.ifaces[:0]
	return nil
}

func (r *Reader) nextPcapNG() (Frame, error) {
	for {
		typ, body, err := r.readBlock()
		if err != nil {
			if err == io.EOF {
				return Frame{}, io.EOF
			}
			return Frame{}, fmt.Errorf("capture: after frame %d: %w", r.n, noEOF(err))
		}
		var (
			iface                 uint32
			tsHigh, tsLow         uint32
			caplen, origlen       uint32
			data                  []byte
			haveTime, havePayload bool
		)
		switch typ {
		case blockSHB:
			if err := r.section(typ, body); err != nil {
				return Frame{}, err
			}
			continue
		case blockIDB:
			if err := r.addIface(body); err != nil {
				return Frame{}, err
			}
			continue
		case blockEPB:
			if len(body) < 20 {
				return Frame{}, fmt.Errorf("capture: frame %d: enhanced packet block of %d octets: %w", r.n+1, len(body), ErrFormat)
			}
			iface, tsHigh, tsLow = r.order.Uint32(body), r.order.Uint32(body[4:]), r.order.Uint32(body[8:])
			caplen, origlen = r.order.Uint32(body[12:]), r.order.Uint32(body[16:])
			data, haveTime, havePayload = body[20:], true, true
		case blockPB:
			if len(body) < 20 {
				return Frame{}, fmt.Errorf("capture: frame %d: packet block of %d octets: %w", r.n+1, len(body), ErrFormat)
			}
			iface, tsHigh, tsLow = uint32(r.order.Uint16(body)), r.order.Uint32(body[4:]), r.order.Uint32(body[8:])
			caplen, origlen = r.order.Uint32(body[12:]), r.order.Uint32(body[16:])
			data, haveTime, havePayload = body[20:], true, true
		case blockSPB:
			if len(body) < 4 {
				return Frame{}, fmt.Errorf("capture: frame %d: simple packet block of %d octets: %w", r.n+1, len(body), ErrFormat)
			}
			origlen, data, havePayload = r.order.Uint32(body), body[4:], true
			caplen = origlen
			if len(r.ifaces) > 0 && r.ifaces[0].snaplen != 0 {
				caplen = min(caplen, r.ifaces[0].snaplen)
			}
		default:
			continue // statistics, name resolution, custom blocks: nothing for us
		}
		if !havePayload {
			continue
		}
		if int(iface) >= len(r.ifaces) {
			return Frame{}, fmt.Errorf("capture: frame %d: interface %d not described: %w", r.n+1, iface, ErrFormat)
		}
		if uint64(caplen) > uint64(len(data)) {
			return Frame{}, fmt.Errorf("capture: frame %d: captured length %d exceeds its block: %w", r.n+1, caplen, ErrFormat)
		}
		ifc := r.ifaces[iface]
		r.n++
		f := Frame{Number: r.n, LinkType: ifc.link, Data: data[:caplen], OrigLen: int(max(origlen, caplen))}
		if haveTime {
			ts := uint64(tsHigh)<<32 | uint64(tsLow)
			f.Time = stamp(ts/ifc.units, ts%ifc.units, ifc.units).Add(time.Duration(ifc.tsOffset) * time.Second)
		}
		return f, nil
	}
}

func (r *Reader) addIface(body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("capture: pcapng interface description of %d octets: %w", len(body), ErrFormat)
	}
	ifc := ifaceInfo{link: LinkType(r.order.Uint16(body)), snaplen: r.order.Uint32(body[4:]), units: 1e6}
	opts := body[8:]
	for len(opts) >= 4 {
		code, n := r.order.Uint16(opts), int(r.order.Uint16(opts[2:]))
		if code == 0 || 4+n > len(opts) {
			break // opt_endofopt, or an option that overruns: stop reading options
		}
		v := opts[4 : 4+n]
		switch {
		case code == 9 && n >= 1: // if_tsresol
			ifc.units = tsUnits(v[0])
		case code == 14 && n >= 8: // if_tsoffset
			ifc.tsOffset = int64(r.order.Uint64(v))
		}
		opts = opts[4+(n+3)&^3:]
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

// tsUnits turns an if_tsresol value into units per second: 10^-v, or 2^-v with the top bit set.
func tsUnits(v byte) uint64 {
	if v&0x80 != 0 {
		return 1 << min(v&0x7f, 63)
	}
	u := uint64(1)
	for range min(v, 19) {
		u *= 10
	}
	return u
}
