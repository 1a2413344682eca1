//go:build !linux

package xdp

import "time"

// MaxPorts bounds the ports one program matches.
const MaxPorts = 16

// MaxQueues bounds the receive queues a program redirects.
const MaxQueues = 64

// ErrFrameTooLong is Transmit's answer to a packet longer than a UMEM frame.
var ErrFrameTooLong = ErrNeedsLinux

// Program is the XDP program; on this system it cannot be loaded.
type Program struct{}

// LoadProgram returns ErrNeedsLinux.
func LoadProgram(ports ...uint16) (*Program, error) { return nil, ErrNeedsLinux }

// Attach returns ErrNeedsLinux.
func (p *Program) Attach(ifindex int, mode AttachMode) error { return ErrNeedsLinux }

// AttachMode is "".
func (p *Program) AttachMode() string { return "" }

// Frags is false.
func (p *Program) Frags() bool { return false }

// Register returns ErrNeedsLinux.
func (p *Program) Register(queue int, s *Socket) error { return ErrNeedsLinux }

// Unregister returns ErrNeedsLinux.
func (p *Program) Unregister(queue int) error { return ErrNeedsLinux }

// Counters returns ErrNeedsLinux.
func (p *Program) Counters() (ProgramCounters, error) { return ProgramCounters{}, ErrNeedsLinux }

// Detach does nothing.
func (p *Program) Detach() error { return nil }

// Close does nothing.
func (p *Program) Close() error { return nil }

// Socket is an AF_XDP socket; on this system it cannot be created.
type Socket struct{}

// NewSocket returns ErrNeedsLinux.
func NewSocket(cfg SocketConfig) (*Socket, error) { return nil, ErrNeedsLinux }

// FD is -1.
func (s *Socket) FD() int { return -1 }

// BindMode is "".
func (s *Socket) BindMode() string { return "" }

// NeedWakeup is false.
func (s *Socket) NeedWakeup() bool { return false }

// FrameSize is 0.
func (s *Socket) FrameSize() int { return 0 }

// MultiBuffer is false.
func (s *Socket) MultiBuffer() bool { return false }

// Receive returns 0.
func (s *Socket) Receive(frames []Frame) int { return 0 }

// Release does nothing.
func (s *Socket) Release(frames []Frame) {}

// ReleaseAddr does nothing.
func (s *Socket) ReleaseAddr(addr uint64) {}

// Transmit returns ErrNeedsLinux.
func (s *Socket) Transmit(pkts [][]byte) (int, error) { return 0, ErrNeedsLinux }

// TransmitJoined returns ErrNeedsLinux.
func (s *Socket) TransmitJoined(heads, bodies [][]byte) (int, error) { return 0, ErrNeedsLinux }

// Flush returns ErrNeedsLinux.
func (s *Socket) Flush() error { return ErrNeedsLinux }

// Reclaim returns 0.
func (s *Socket) Reclaim() int { return 0 }

// TxPending returns 0.
func (s *Socket) TxPending() int { return 0 }

// Wait returns ErrNeedsLinux.
func (s *Socket) Wait(timeout time.Duration) (bool, error) { return false, ErrNeedsLinux }

// Stats returns ErrNeedsLinux.
func (s *Socket) Stats() (Stats, error) { return Stats{}, ErrNeedsLinux }

// Close does nothing.
func (s *Socket) Close() error { return nil }
