package kdrop

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Driver's counters to Prometheus, read at each scrape.
type Collector struct {
	d       *Driver
	devices []string          // by engine port
	reasons map[uint32]string // reason names by number
	attach  string

	drops, psns, unnamed, cut, sent, sendErr, limited, truncated, flowsOver *prometheus.Desc
	ringLost, notRoCE, notLinear, matched, gso, info                        *prometheus.Desc
	queueDelay, queueErr                                                    *prometheus.Desc
}

// NewCollector returns the collector of d; devices[i] names engine port i, reasons the drop
// reasons by number, attach where the program runs.
func NewCollector(d *Driver, devices []string, reasons map[uint32]string, attach string) *Collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("crem_reporter_"+name, help, labels, nil)
	}
	return &Collector{d: d, devices: devices, reasons: reasons, attach: attach,
		drops:      desc("drops_total", "Datagrams of protected flows that this node dropped and the kernel program passed on, by the kernel's drop reason and the device (a GSO packet counts each datagram it carried).", "reason", "device"),
		psns:       desc("psns_named_total", "Dropped datagrams whose PSN the program read and gave to the reporter (they appear in reports' dropped-PSN lists unless a list was cut)."),
		unnamed:    desc("drops_unnamed_total", "Dropped datagrams given to the reporter by count only, PSN unknown: GSO segments the program could not read and drops the full ring buffer refused; they count in Lost Count, and the report is marked Truncated."),
		cut:        desc("psns_cut_total", "Dropped datagrams counted in a report's Lost Count but absent from its PSN list (lists cut at 255 PSNs or to fit the path MTU, and unnamed drops)."),
		sent:       desc("reports_sent_total", "PATH_REPORT messages the reporter produced and handed to the socket (send errors are counted apart)."),
		sendErr:    desc("report_send_errors_total", "PATH_REPORT messages the socket refused."),
		limited:    desc("reports_rate_limited_total", "Times a report was held back by a rate limit, per flow or per port; it keeps gathering drops and goes out later.", "limit"),
		truncated:  desc("reports_truncated_total", "PATH_REPORT messages sent with the Truncated flag."),
		flowsOver:  desc("drops_not_reported_total", "Drops not reported because the reporter already had max_flows reports pending."),
		ringLost:   desc("ring_events_lost_total", "Events the kernel program could not write because the ring buffer was full; their datagrams are counted per flow in the kernel and reported by count (drops_unnamed_total)."),
		notRoCE:    desc("drops_not_roce_total", "Drops on a configured device for a configured reason that were not UDP to a configured port (not reported)."),
		notLinear:  desc("drops_unreadable_total", "Drops of UDP datagrams to a configured port whose RoCEv2 header the program could not read (without the packet's dynptr: it lay outside the linear buffer); not reported, there is no flow to name."),
		gso:        desc("drops_gso_packets_total", "Dropped packets that carried several datagrams (GSO); drops_total counts each datagram."),
		matched:    desc("drops_matched_total", "Drops the kernel program matched: a configured device and reason, any protocol."),
		queueDelay: desc("queue_delay_seconds", "The queueing delay of the device's root queue discipline as last estimated (octets queued over the highest drain rate measured while it stayed busy); the reports' Queue Delay Change is its change. Absent until a drain rate is measured.", "device"),
		queueErr:   desc("queue_read_errors_total", "Readings of the devices' queue disciplines (rtnetlink) that failed."),
		info:       desc("program_info", "The kernel program is loaded and attached; the label says where and how it reads packets (tp_btf+dynptr: the whole packet; tp_btf or tracepoint: the linear buffer only).", "attach"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.drops, c.psns, c.unnamed, c.cut, c.sent, c.sendErr, c.limited, c.truncated,
		c.flowsOver, c.ringLost, c.notRoCE, c.notLinear, c.matched, c.gso, c.info, c.queueDelay, c.queueErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for k, v := range s.Drops {
		reason, ok := c.reasons[k.Reason]
		if !ok {
			reason = strconv.FormatUint(uint64(k.Reason), 10)
		}
		dev := strconv.Itoa(k.Port)
		if k.Port >= 0 && k.Port < len(c.devices) {
			dev = c.devices[k.Port]
		}
		counter(c.drops, v, reason, dev)
	}
	counter(c.psns, s.PSNs)
	counter(c.unnamed, s.Unnamed)
	counter(c.cut, s.Engine.PSNsCut)
	counter(c.sent, s.Engine.Reports)
	counter(c.sendErr, s.SendErrors)
	counter(c.limited, s.Engine.DeferredFlow, "flow")
	counter(c.limited, s.Engine.DeferredPort, "port")
	counter(c.truncated, s.Engine.Truncated)
	counter(c.flowsOver, s.Engine.FlowsOverflow)
	counter(c.ringLost, s.Kernel.EventsLost)
	counter(c.notRoCE, s.Kernel.NotRoCE)
	counter(c.notLinear, s.Kernel.NotLinear)
	counter(c.matched, s.Kernel.Matched)
	counter(c.gso, s.Kernel.GSO)
	counter(c.queueErr, s.QueueReadErrors)
	for port, delay := range s.QueueDelay {
		dev := strconv.Itoa(port)
		if port >= 0 && port < len(c.devices) {
			dev = c.devices[port]
		}
		ch <- prometheus.MustNewConstMetric(c.queueDelay, prometheus.GaugeValue, delay.Seconds(), dev)
	}
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, c.attach)
}
