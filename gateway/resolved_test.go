package gateway

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

const relayMinimal = `crem_address = "127.0.0.1:50000"
peer = "127.0.0.1:50001"
[relay]
listen = "127.0.0.1:7000"
target = "127.0.0.1:4791"
wan_listen = "127.0.0.1:7001"
peer_data = "127.0.0.2:7101"
`

const tunFull = `crem_address = "198.18.10.1:61234"
domain_protection = "boundary"
peer = "198.18.20.1:61234"
mode = "tun"
metrics_address = "127.0.0.1:9100"
log_level = "warn"
shards = 3
pcap = "/tmp/x.pcap"
reporters = ["192.0.2.7", "192.0.2.8"]
[tun]
name = "cremtest9"
local_prefixes = ["198.18.1.0/24"]
mark = 0x51
verify = "logical"
[[protect]]
src = "198.18.1.0/24"
dst = "198.18.2.7"
src_port = 4791
qp = 17
ordered = false
reverse_qp = 18
[policy]
k = 16
m = 2
adapt = false
epsilon = 1e-6
rho = 0.02
repair_fraction = 1
max_open_blocks = 128
max_k = 32
max_m = 8
rdma_mtu = 1024
initial_rtt = "25ms"
hello_hold_off = "5s"
idle_timeout = "1m"
reorder = "2ms"
burst_gap = "100us"
`

func resolveText(t *testing.T, text string) Resolved {
	t.Helper()
	c, err := ParseConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestResolveDefaults: a configuration that gives only what is required resolves with every
// default filled in, as docs/md lists them.
func TestResolveDefaults(t *testing.T) {
	r := resolveText(t, relayMinimal)
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "src_port") {
		t.Errorf("warnings %q: want one, of the missing src_port", r.Warnings)
	}
	if w := resolveText(t, relayMinimal+"[[protect]]\nsrc_port = 4791\n").Warnings; len(w) != 0 {
		t.Errorf("with a src_port: warnings %q", w)
	}
	want := Resolved{CREMAddress: "127.0.0.1:50000", Peer: "127.0.0.1:50001", Mode: "relay", LogLevel: "info",
		Shards: runtime.GOMAXPROCS(0), ShardsPerCore: true, Reporters: []string{}, ProtectAll: true,
		Relay: &ResolvedRelay{Listen: "127.0.0.1:7000", Target: "127.0.0.1:4791", WANListen: "127.0.0.1:7001",
			PeerData: "127.0.0.2:7101", LocalEndpoint: "127.0.0.1", RemoteEndpoint: "127.0.0.2", Offload: true},
		Protect: []ResolvedRule{{Ordered: true}},
		Policy: ResolvedPolicy{K: 32, M: 4, Adapt: true, Epsilon: 1e-4, Rho: 0.01, RepairFraction: 0.5,
			MaxOpenBlocks: 64, MaxK: 64, MaxM: 16, MTU: 4096, InitialRTT: "10ms", HelloHoldOff: "1s", Idle: "30s",
			BurstGap: "50us", Rule: "draft", RepairCompetes: true}, Warnings: r.Warnings}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("resolved\n%+v\nwant\n%+v", r, want)
	}
	var b bytes.Buffer
	if err := r.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{`k                 = 32`, `epsilon           = 0.0001`, `initial_rtt       = "10ms"`,
		`local_endpoint    = "127.0.0.1"`, `reverse_qp        = 0`, `# learned`, `# none in the file: every RoCEv2 flow`,
		`burst_gap         = "50us"`, `# max(1ms, SRTT/8), per flow`, "# warning: no protect rule gives a src_port"} {
		if !strings.Contains(b.String(), l) {
			t.Errorf("TOML lacks %q:\n%s", l, b.String())
		}
	}
}

// TestResolveTOMLRoundTrip: the printed configuration, read back as a configuration file,
// resolves to the same values.
func TestResolveTOMLRoundTrip(t *testing.T) {
	cases := map[string]string{"relay defaults": relayMinimal}
	if runtime.GOOS == "linux" {
		cases["tun, every field"] = tunFull
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			r := resolveText(t, text)
			var b bytes.Buffer
			r.WriteTOML(&b)
			again := resolveText(t, b.String())
			// What only tells how the file said it: shards and rules now written out.
			if len(again.Warnings) != len(r.Warnings) {
				t.Errorf("warnings %q, read back %q", r.Warnings, again.Warnings)
			}
			again.ShardsPerCore, again.ProtectAll, again.Warnings = r.ShardsPerCore, r.ProtectAll, r.Warnings
			if !reflect.DeepEqual(r, again) {
				t.Fatalf("read back:\n%+v\nwant\n%+v\nfrom\n%s", again, r, b.String())
			}
		})
	}
}

// tomlKeys lists every TOML key of a configuration struct, nested tables as table.key.
func tomlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		k := strings.Split(f.Tag.Get("toml"), ",")[0]
		if k == "-" || !f.IsExported() {
			continue // not configuration (Faults: tests only; where keys were written)
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		// Tables; not the structs that are values (addresses, prefixes: TextUnmarshaler).
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
			keys = append(keys, tomlKeys(ft, prefix+k+".")...)
			continue
		}
		keys = append(keys, prefix+k)
	}
	return keys
}

// TestResolveShowsEveryField: every field of Config is printed, in TOML and in JSON
// (a field added to Config and not to Resolved fails here).
func TestResolveShowsEveryField(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the tun fields resolve on Linux only")
	}
	relay, tun := resolveText(t, relayMinimal), resolveText(t, tunFull)
	var text bytes.Buffer
	relay.WriteTOML(&text)
	tun.WriteTOML(&text)
	var js []map[string]any
	for _, r := range []Resolved{relay, tun} {
		b, _ := json.Marshal(r)
		var m map[string]any
		json.Unmarshal(b, &m)
		js = append(js, m)
	}
	for _, key := range tomlKeys(reflect.TypeFor[Config](), "") {
		parts := strings.Split(key, ".")
		leaf := parts[len(parts)-1]
		if !strings.Contains(text.String(), "\n"+leaf+" ") && !strings.HasPrefix(text.String(), leaf+" ") {
			t.Errorf("TOML lacks %s", key)
		}
		found := false
		for _, m := range js {
			var v any = m
			for _, p := range parts {
				switch x := v.(type) {
				case map[string]any:
					v = x[p]
				case []any:
					if len(x) > 0 {
						v = x[0].(map[string]any)[p]
					} else {
						v = nil
					}
				}
			}
			found = found || v != nil
		}
		if !found {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// TestResolveRefusesWhatEnginesRefuse: values the configuration's own checks let through but
// that every flow's CSF would refuse at run time are configuration errors naming the field.
func TestResolveRefusesWhatEnginesRefuse(t *testing.T) {
	for field, line := range map[string]string{
		"policy.initial_rtt":     `initial_rtt = "0s"`,
		"policy.idle_timeout":    `idle_timeout = "0s"`,
		"policy.hello_hold_off":  `hello_hold_off = "0ms"`,
		"policy.repair_fraction": `repair_fraction = 20.0`,
		"policy.epsilon":         `epsilon = nan`,
		"policy.rho":             `rho = nan`,
	} {
		c, err := ParseConfig([]byte(relayMinimal + "[policy]\n" + line + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Resolve()
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want a configuration error naming %s", line, err, field)
		}
	}
	// What only the engines check, found by building them: a start would fail (exit 1).
	c, _ := ParseConfig([]byte(relayMinimal + "[policy]\nmax_m = 255\n"))
	if _, err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "Max m 255") {
		t.Errorf("max_m 255: %v", err)
	}
	c, _ = ParseConfig([]byte(strings.Replace(tunFull, `"cremtest9"`, `"crem-gateway-tun-a"`, 1)))
	if _, err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "tun.name") {
		t.Errorf("a TUN name of 18 characters: %v", err)
	}
	// resolve's own refusals come through as they are.
	c, _ = ParseConfig([]byte(strings.Replace(relayMinimal, `"127.0.0.1:50000"`, `"127.0.0.1:0"`, 1)))
	if _, err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "crem_address") {
		t.Errorf("CREM port 0: %v", err)
	}
}

// TestResolveProbesTheSenders: a value only the CSF refuses, past the checks of resolve and of
// validate, is found by building the CSF of each protect rule (buildEngines), named by rule.
func TestResolveProbesTheSenders(t *testing.T) {
	c, err := ParseConfig([]byte(relayMinimal + "[[protect]]\nsrc_port = 4791\n[[protect]]\nsrc = \"127.0.0.9\"\nsrc_port = 4791\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.buildEngines(&c); err != nil {
		t.Fatalf("a valid configuration: %v", err)
	}
	r.holdOff = 0 // what validate refuses first, here to reach the CSF (the CRF takes no hold-off)
	err = r.buildEngines(&c)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "protect[0]") || !strings.Contains(err.Error(), "WithHoldOff") {
		t.Fatalf("got %v, want a configuration error naming protect[0] and the CSF's refusal", err)
	}
}

// TestResolveOpensNothing: resolving binds no socket (an address in use resolves) and makes
// no TUN device.
func TestResolveOpensNothing(t *testing.T) {
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := resolveText(t, strings.Replace(relayMinimal, "127.0.0.1:50000", busy.LocalAddr().String(), 1))
	if r.CREMAddress != busy.LocalAddr().String() {
		t.Fatalf("crem_address %s", r.CREMAddress)
	}
	if runtime.GOOS != "linux" {
		c, _ := ParseConfig([]byte(tunFull))
		if _, err := c.Resolve(); err == nil || !strings.Contains(err.Error(), "Linux") {
			t.Fatalf("tun mode off Linux: %v", err)
		}
		return
	}
	resolveText(t, tunFull)
	if _, err := os.Stat("/sys/class/net/cremtest9"); err == nil {
		t.Fatal("resolving made the TUN device")
	}
}
