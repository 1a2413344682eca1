package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// stopSignal is the context of a command that SIGINT and SIGTERM end: the context is cancelled
// by the first of them, and the command reports the partial result it has, marked interrupted,
// and exits with status 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell
// reports a process the signal killed.
type stopSignal struct {
	mu  sync.Mutex
	sig os.Signal
}

// signalContext returns a context cancelled by SIGINT or SIGTERM and what tells which; stop
// releases the signals.
func signalContext() (ctx context.Context, which *stopSignal, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	which = &stopSignal{}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			which.mu.Lock()
			which.sig = s
			which.mu.Unlock()
			cancel()
		case <-done:
		}
	}()
	return ctx, which, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// received is the signal that cancelled the context, nil if none did.
func (w *stopSignal) received() os.Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sig
}

// name is the signal's name (SIGINT, SIGTERM), "" if none came.
func (w *stopSignal) name() string {
	switch w.received() {
	case nil:
		return ""
	case syscall.SIGTERM:
		return "SIGTERM"
	default:
		return "SIGINT"
	}
}

// exitCode is 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM; 0 if none came.
func (w *stopSignal) exitCode() int {
	switch w.received() {
	case nil:
		return 0
	case syscall.SIGTERM:
		return 128 + int(syscall.SIGTERM)
	default:
		return 128 + int(syscall.SIGINT)
	}
}

// serviceSignals delivers SIGINT and SIGTERM (stop) and SIGHUP (reload the configuration) to a
// service that runs until stopped (crem gateway), so that none of them kills it unannounced;
// release hands them back to their defaults.
func serviceSignals() (sigs <-chan os.Signal, release func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}

// signalName is SIGINT, SIGTERM or SIGHUP.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case os.Interrupt:
		return "SIGINT"
	}
	return s.String()
}
