//go:build linux

package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/wire"
)

// lockedBuffer is a log sink safe for the gateway's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CREM messages for a Flow ID the gateway does not know (a peer still sending for a session a
// restart lost) are dropped and counted one by one, and the log says so at most once a minute,
// with how many were dropped since its last line.
func TestUnknownFlowDropsLoggedOnceAMinute(t *testing.T) {
	var log lockedBuffer
	g := newTestGateway(t, Options{Seed: 1, Logger: slog.New(slog.NewTextHandler(&log, nil))}, nil)
	m := wire.LossReport{FlowID: 0x5eed, IntervalUS: 20000, Expected: 10, Received: 10}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int) {
		for range n {
			p := &pkt{buf: append([]byte(nil), b...), kind: kindCREM}
			p.n = len(b)
			if sh := g.shardFor(p); sh != nil {
				t.Fatal("a message for an unknown flow found a shard")
			}
		}
	}
	said := func() int { return strings.Count(log.String(), "flows this gateway does not know") }
	send(500)
	if n := g.c.cremUnknownFlw.Load(); n != 500 || said() != 1 {
		t.Fatalf("%d counted, %d log lines for 500 messages, want 500 and 1:\n%s", n, said(), log.String())
	}
	// A minute later the next one is said again, with the count since the last line.
	g.start = g.start.Add(-unknownFlowsEvery - time.Second)
	send(3)
	if said() != 2 || !strings.Contains(log.String(), "dropped=500 total=501") {
		t.Fatalf("after a minute: %d log lines, want 2 (the second at the next message: 500 dropped since the first line):\n%s", said(), log.String())
	}
}
