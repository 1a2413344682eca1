//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package kdrop

import (
	"time"

	"github.com/crem-project/crem/psn"
)

// Source is not available here: Open returns ErrNotSupported.
type Source struct{}

// Open returns ErrNotSupported: the program is built for little-endian Linux.
func Open(Config) (*Source, error) { return nil, ErrNotSupported }

func (s *Source) Attach() string                { return "" }
func (s *Source) SetDeadline(time.Time)         {}
func (s *Source) Next([]psn.PSN) (Event, error) { return Event{}, ErrNotSupported }
func (s *Source) Lost() ([]Lost, error)         { return nil, ErrNotSupported }
func (s *Source) Counters() (Counters, error)   { return Counters{}, ErrNotSupported }
func (s *Source) Close() error                  { return nil }

// Reasons returns ErrNotSupported.
func Reasons() (map[string]uint32, error) { return nil, ErrNotSupported }

// InNetns runs fn here when path is empty; network namespaces are Linux's.
func InNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	return ErrNotSupported
}

// NetnsCookie returns ErrNotSupported.
func NetnsCookie() (uint64, error) { return 0, ErrNotSupported }

// QueueReader is not available here: OpenQueueReader returns ErrNotSupported.
type QueueReader struct{}

// OpenQueueReader returns ErrNotSupported.
func OpenQueueReader() (*QueueReader, error) { return nil, ErrNotSupported }

func (r *QueueReader) Read([]int) (map[int]QueueStats, error) { return nil, ErrNotSupported }
func (r *QueueReader) Close() error                           { return nil }
