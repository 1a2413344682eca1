//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ethtool ioctl's commands and string set used to turn an interface's features on (what
// `ethtool -K DEV FEATURE on` does), for the optional GRO of TestNetnsForwarding.
const (
	ethtoolGStrings  = 0x1b
	ethtoolGSSetInfo = 0x37
	ethtoolSFeatures = 0x3b
	ethSSFeatures    = 4
	ethGStringLen    = 32
)

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

func ethtool(fd int, dev string, buf []byte) error {
	var ifr ifreqData
	copy(ifr.name[:], dev)
	ifr.data = uintptr(unsafe.Pointer(&buf[0]))
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}

// setFeatures turns the named features (ethtool's names, e.g. rx-gro) of dev on.
func setFeatures(dev string, names ...string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ne := binary.NativeEndian
	info := make([]byte, 16+4)
	ne.PutUint32(info[0:], ethtoolGSSetInfo)
	ne.PutUint64(info[8:], 1<<ethSSFeatures)
	if err := ethtool(fd, dev, info); err != nil {
		return fmt.Errorf("%s: ETHTOOL_GSSET_INFO: %w", dev, err)
	}
	n := int(ne.Uint32(info[16:]))
	strs := make([]byte, 12+n*ethGStringLen)
	ne.PutUint32(strs[0:], ethtoolGStrings)
	ne.PutUint32(strs[4:], ethSSFeatures)
	ne.PutUint32(strs[8:], uint32(n))
	if err := ethtool(fd, dev, strs); err != nil {
		return fmt.Errorf("%s: ETHTOOL_GSTRINGS: %w", dev, err)
	}
	blocks := (n + 31) / 32
	set := make([]byte, 8+blocks*8)
	ne.PutUint32(set[0:], ethtoolSFeatures)
	ne.PutUint32(set[4:], uint32(blocks))
	for _, want := range names {
		found := false
		off := strings.HasPrefix(want, "-") // -name turns the feature off
		want = strings.TrimPrefix(want, "-")
		for i := range n {
			s := strings.TrimRight(string(strs[12+i*ethGStringLen:12+(i+1)*ethGStringLen]), "\x00")
			if s == want {
				b := set[8+(i/32)*8:]
				ne.PutUint32(b[0:], ne.Uint32(b[0:])|1<<(i%32)) // valid
				if !off {
					ne.PutUint32(b[4:], ne.Uint32(b[4:])|1<<(i%32)) // requested
				}
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%s: no feature %q", dev, want)
		}
	}
	if err := ethtool(fd, dev, set); err != nil {
		return fmt.Errorf("%s: ETHTOOL_SFEATURES: %w", dev, err)
	}
	return nil
}
