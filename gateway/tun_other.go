//go:build !linux

package gateway

import "errors"

// tunPath is the transparent data path; it exists on Linux only.
type tunPath struct{}

func openTun(r *resolved) (*tunPath, error) {
	return nil, &ConfigError{errors.New("mode tun needs Linux")}
}

func (t *tunPath) close()              {}
func (t *tunPath) send(b []byte) error { return errors.New("no tun") }
func (g *Gateway) tunLoop()            {}
