package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/crem-project/crem/internal/harness/sim"
)

// memoryMeter samples the process's proportional set size (Pss) and keeps the peak. Pss, not
// Rss, because the simulator's synthetic regions map one small buffer many times over (protocol
// notes S5): Rss counts every mapping of a shared page, Pss the page once.
type memoryMeter struct {
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

// startMemoryMeter samples every interval until Stop; it returns nil where the system does not
// report Pss (anything but Linux).
func startMemoryMeter(interval time.Duration) *memoryMeter {
	if _, err := readPss(); err != nil {
		return nil
	}
	m := &memoryMeter{stop: make(chan struct{}), done: make(chan struct{})}
	m.sample()
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *memoryMeter) sample() {
	if v, err := readPss(); err == nil {
		m.mu.Lock()
		m.peak = max(m.peak, v)
		m.mu.Unlock()
	}
}

// Stop ends the sampling and returns the peak in octets.
func (m *memoryMeter) Stop() int64 {
	close(m.stop)
	<-m.done
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// readPss returns the process's proportional set size in octets.
func readPss() (int64, error) {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	return parsePss(b)
}

// parsePss reads the "Pss:" line of smaps_rollup (in kB).
func parsePss(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "Pss:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("memory: Pss %q: %w", f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("memory: no Pss line in smaps_rollup")
}

// trialCount is the number of trials behind a sweep's results.
func trialCount(res []sim.Result) int {
	n := 0
	for _, r := range res {
		n += r.Trials
	}
	return n
}
