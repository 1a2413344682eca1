//go:build !linux

package sim

const pageSize = 4096

// mapAliased falls back to an ordinary allocation where memfd is not available.
func mapAliased(n, period int) ([]byte, func() error, error) {
	return make([]byte, n), nil, nil
}
