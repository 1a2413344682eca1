package gateway

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// fixedKeys are what a running gateway cannot change (docs/gateway.md, Reloading): its
// sockets, its device, its shards, the peer of every flow's session, and the limits and
// initial RTT its CRFs were built with. A key names itself and every key under it.
var fixedKeys = []string{"crem_address", "peer", "mode", "relay", "tun", "metrics_address", "shards", "pcap",
	"policy.max_open_blocks", "policy.max_k", "policy.max_m", "policy.rdma_mtu", "policy.initial_rtt"}

// Reload runs the gateway under c from now on, without dropping a flow: the protect rules,
// the policy, the reporters, the log level and the domain protection may change. The flows
// that have a CSF keep it, with the settings it was built with, until it ends; the rules and
// the policy apply to the flows that start after, to those no rule covered before, and to the
// HELLOs that arrive after. A configuration that does not validate, or that changes what a
// running gateway cannot (fixedKeys, or the protect rules that name both qp and reverse_qp,
// which place flows on shards), is refused whole: a *ConfigError naming what, and the gateway
// runs on as it was. It returns the keys that changed.
func (g *Gateway) Reload(c Config) ([]string, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	// Sockets handed to New stand for their addresses, as they did at the start.
	for _, h := range []struct {
		s    *sock
		addr *netip.AddrPort
	}{{g.handed[kindCREM], &c.CREMAddress}, {g.handed[kindLocal], &c.Relay.Listen}, {g.handed[kindWAN], &c.Relay.WANListen}} {
		if h.s != nil {
			*h.addr = h.s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
		}
	}
	r, err := c.validate()
	if err != nil {
		return nil, err
	}
	before, after := flatten(g.live.cfg), flatten(r.cfg)
	var changed, fixed []string
	for _, k := range slices.Sorted(maps.Keys(union(before, after))) {
		if before[k] == after[k] {
			continue
		}
		changed = append(changed, k)
		for _, f := range fixedKeys {
			if k == f || strings.HasPrefix(k, f+".") || strings.HasPrefix(k, f+"[") {
				fixed = append(fixed, k)
				break
			}
		}
	}
	if len(fixed) == 0 && !reflect.DeepEqual(newQPShards(g.live, len(g.shards)), newQPShards(r, len(g.shards))) {
		fixed = append(fixed, "protect (the rules with both qp and reverse_qp)")
	}
	if len(fixed) > 0 {
		k := fixed[0]
		where, raw, _ := c.src.at(k)
		return nil, &ConfigError{Where: where, Key: k, Value: raw,
			Err: fmt.Errorf("cannot change while the gateway runs (%s): restart it for that; nothing was changed", strings.Join(fixed, ", "))}
	}
	for _, sh := range g.shards {
		sh.mu.Lock()
		sh.n.reconfigure(r)
		sh.mu.Unlock()
	}
	g.live = r
	return changed, nil
}

// reconfigure runs the node under r from now on (Gateway.Reload): the CSFs it has keep their
// settings; the flows it refused are looked at again under the new rules.
func (n *Node) reconfigure(r *resolved) {
	n.cfg = r
	n.warnedNoPort = make([]bool, len(r.rules))
	for k, s := range n.senders {
		if s == nil {
			delete(n.senders, k)
		}
	}
}

func union(a, b map[string]string) map[string]string {
	u := maps.Clone(a)
	maps.Copy(u, b)
	return u
}

// flatten lists a configuration's values by TOML key ("policy.m", "protect[1].src"), pointers
// followed: what two configurations differ in.
func flatten(c Config) map[string]string {
	out := map[string]string{}
	var walk func(v reflect.Value, key string)
	walk = func(v reflect.Value, key string) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				out[key] = "<nil>"
				return
			}
			walk(v.Elem(), key)
			return
		case reflect.Struct:
			if _, ok := v.Interface().(fmt.Stringer); ok {
				break
			}
			t := v.Type()
			for i := range t.NumField() {
				tag := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]
				if tag == "" || tag == "-" || !t.Field(i).IsExported() {
					continue
				}
				k := tag
				if key != "" {
					k = key + "." + tag
				}
				walk(v.Field(i), k)
			}
			return
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem() != reflect.TypeFor[Prefix]() {
				out[key] = fmt.Sprint(v.Len())
				for i := range v.Len() {
					walk(v.Index(i), fmt.Sprintf("%s[%d]", key, i))
				}
				return
			}
		}
		out[key] = fmt.Sprint(v.Interface())
	}
	walk(reflect.ValueOf(c), "")
	return out
}
