// Package deploy holds what an operator deploys `crem gateway` with: a Grafana dashboard of the
// gateway's metrics (grafana/), systemd units (systemd/), the policy routing of TUN mode as a
// script and its unit, and tun-lab.sh, the TUN example end to end in network namespaces (tun/),
// and example configurations of a gateway pair in relay and TUN mode (examples/). It has no
// code; its tests check that the dashboard names only metrics a running gateway exports, that
// the units pass systemd-analyze verify, that every example configuration passes
// --check-config, that the routing script sets up what the user guide says to check, and that
// tun-lab.sh restores packets through the example TUN pair, each one passing its ICRC check.
package deploy
