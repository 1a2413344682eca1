//go:build ignore

/* The kernel half of the drop source: runs where the kernel frees a packet it dropped
 * (skb:kfree_skb) and passes on, through a ring buffer, the drops of RoCEv2 datagrams on the
 * configured devices for the configured reasons. It only reads: the packet, the device and the
 * reason. Every map is bounded. */

#include "kdrop.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#define MAX_PSNS 64
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_UDP 17

/* A kfunc: the skb as a dynptr, readable whole (page fragments too). */
extern int bpf_dynptr_from_skb(struct __sk_buff *skb, __u64 flags, struct bpf_dynptr *ptr__uninit) __ksym;

/* A device of the router: its namespace (the netns cookie) and index. */
struct dev_key {
	__u64 netns;
	__u32 ifindex;
	__u32 pad;
};

/* A drop passed on. PSNs holds the PSNs of the first npsn segments; segs is how many the
 * packet carried (more than one for a GSO packet), so segs - npsn were dropped unnamed. */
struct event {
	__u32 port;
	__u32 ifindex;
	__u32 reason;
	__u32 dqp;
	__u16 segs;
	__u8 family;
	__u8 npsn;
	__u8 src[16];
	__u8 dst[16];
	__u32 psns[MAX_PSNS];
};

/* A flow whose drops found the ring buffer full, and the count. */
struct lost_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 dqp;
	__u32 port;
	__u32 reason;
	__u8 family;
	__u8 pad[3];
};

enum stat {
	STAT_MATCHED,   /* drops on a device and for a reason configured */
	STAT_EVENTS,    /* events written to the ring buffer */
	STAT_LOST,      /* events the full ring buffer refused (their segments counted in lost) */
	STAT_NOT_ROCE,  /* matched drops that were not UDP to a configured port */
	STAT_SEGS_LOST, /* segments of refused events */
	STAT_NOT_LINEAR, /* datagrams whose BTH was out of reach (not named, not passed on) */
	STAT_GSO,        /* matched packets that carried several datagrams (GSO) */
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct dev_key);
	__type(value, __u32);
} devices SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} ports SEC(".maps");

/* reasons[r] is non-zero for a reason to pass on. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} reasons SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct lost_key);
	__type(value, __u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Keeps struct event in the BTF for bpf2go's -type. */
const struct event *unused_event __attribute__((unused));

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += n;
}

/* Reads len octets at off from the network header: through the skb's dynptr where the kernel
 * gives one to tracing programs (any part of the packet, page fragments included), else from
 * the linear part of the buffer only. */
struct reader {
	struct bpf_dynptr dp;
	unsigned char *nh;
	unsigned char *linear_end;
	__u32 nhoff; /* the network header's offset from skb->data */
	bool dyn;
};

static __always_inline int rd(struct reader *r, void *dst, __u32 len, __u32 off)
{
	if (r->dyn)
		return bpf_dynptr_read(dst, len, &r->dp, r->nhoff + off, 0);
	if (r->nh + off + len > r->linear_end)
		return -1;
	return bpf_probe_read_kernel(dst, len, r->nh + off);
}

static __always_inline int handle(struct sk_buff *skb, __u32 reason, const bool dyn)
{
	__u32 r = reason;
	__u8 *want = bpf_map_lookup_elem(&reasons, &r);
	if (!want || !*want)
		return 0;

	struct net_device *dev = BPF_CORE_READ(skb, dev);
	if (!dev)
		return 0;
	struct dev_key dk = {};
	dk.ifindex = BPF_CORE_READ(dev, ifindex);
	dk.netns = BPF_CORE_READ(dev, nd_net.net, net_cookie);
	__u32 *port = bpf_map_lookup_elem(&devices, &dk);
	if (!port)
		return 0;
	count(STAT_MATCHED, 1);

	struct reader rdr = {};
	unsigned char *head = BPF_CORE_READ(skb, head);
	unsigned char *data = BPF_CORE_READ(skb, data);
	rdr.nh = head + BPF_CORE_READ(skb, network_header);
	/* Before the stack has set the network header (a drop at the input backlog), data is at
	 * the network header already: the header offset is not set yet, below data. */
	if (rdr.nh < data)
		rdr.nh = data;
	rdr.linear_end = data + (BPF_CORE_READ(skb, len) - BPF_CORE_READ(skb, data_len));
	if (dyn && rdr.nh - data < 0x10000 &&
	    bpf_dynptr_from_skb((struct __sk_buff *)skb, 0, &rdr.dp) == 0) {
		rdr.nhoff = rdr.nh - data;
		rdr.dyn = true;
	}
	__u16 proto = bpf_ntohs(BPF_CORE_READ(skb, protocol));

	struct lost_key k = {};
	__u32 l4;
	if (proto == ETH_P_IP) {
		__u8 vihl, p;
		__u16 frag;
		if (rd(&rdr, &vihl, 1, 0) || rd(&rdr, &p, 1, 9) || rd(&rdr, &frag, 2, 6))
			goto not_roce;
		if (vihl >> 4 != 4)
			goto not_roce;
		if (p != IPPROTO_UDP || (bpf_ntohs(frag) & 0x1fff) != 0)
			goto not_roce;
		l4 = (vihl & 0x0f) * 4;
		k.family = 4;
		if (rd(&rdr, k.src, 4, 12) || rd(&rdr, k.dst, 4, 16))
			goto not_roce;
	} else if (proto == ETH_P_IPV6) {
		__u8 ver, next;
		if (rd(&rdr, &ver, 1, 0) || ver >> 4 != 6 || rd(&rdr, &next, 1, 6) || next != IPPROTO_UDP)
			goto not_roce;
		l4 = 40;
		k.family = 6;
		if (rd(&rdr, k.src, 16, 8) || rd(&rdr, k.dst, 16, 24))
			goto not_roce;
	} else {
		goto not_roce;
	}
	if (l4 < 20 || l4 > 60)
		goto not_roce;
	__u16 dport;
	if (rd(&rdr, &dport, 2, l4 + 2))
		goto not_roce;
	__u8 *ok = bpf_map_lookup_elem(&ports, &dport);
	if (!ok)
		goto not_roce;
	__u32 bth = l4 + 8;
	/* Without a dynptr only the linear part of the buffer is at an address the program can
	 * compute; a BTH in the page fragments cannot be read, so such a drop is counted, never
	 * guessed at. */
	__u32 dqp;
	if (rd(&rdr, &dqp, 4, bth + 4)) {
		count(STAT_NOT_LINEAR, 1);
		return 0;
	}
	k.dqp = bpf_ntohl(dqp) & 0xffffff;
	k.port = *port;
	k.reason = reason;

	/* A GSO packet carries gso_segs datagrams, one BTH every gso_size octets of UDP payload;
	 * those within reach are read, the rest counted. */
	__u16 segs = 1, gso_size = 0;
	struct skb_shared_info *shinfo = (void *)(head + BPF_CORE_READ(skb, end));
	__u16 gs = BPF_CORE_READ(shinfo, gso_size);
	if (gs) {
		segs = BPF_CORE_READ(shinfo, gso_segs);
		gso_size = gs;
		if (segs == 0)
			segs = 1;
		count(STAT_GSO, 1);
	}

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_LOST, 1);
		count(STAT_SEGS_LOST, segs);
		__u64 *n = bpf_map_lookup_elem(&lost, &k);
		if (n) {
			__sync_fetch_and_add(n, segs);
		} else {
			__u64 v = segs;
			/* Another CPU may have added the key meanwhile: then add to its count. */
			if (bpf_map_update_elem(&lost, &k, &v, BPF_NOEXIST) != 0) {
				n = bpf_map_lookup_elem(&lost, &k);
				if (n)
					__sync_fetch_and_add(n, segs);
			}
		}
		return 0;
	}
	e->port = k.port;
	e->ifindex = dk.ifindex;
	e->reason = reason;
	e->dqp = k.dqp;
	e->segs = segs;
	e->family = k.family;
	__builtin_memcpy(e->src, k.src, 16);
	__builtin_memcpy(e->dst, k.dst, 16);
	__u8 n = 0;
	for (int i = 0; i < MAX_PSNS; i++) {
		if (i >= segs)
			break;
		__u32 w;
		if (rd(&rdr, &w, 4, bth + (__u32)i * gso_size + 8))
			break;
		e->psns[i] = bpf_ntohl(w) & 0xffffff;
		n++;
	}
	e->npsn = n;
	bpf_ringbuf_submit(e, 0);
	count(STAT_EVENTS, 1);
	return 0;

not_roce:
	count(STAT_NOT_ROCE, 1);
	return 0;
}

/* tp_btf with the skb's dynptr (kernels that give it to tracing programs). */
SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb_dyn, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	return handle(skb, reason, true);
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb_btf, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	return handle(skb, reason, false);
}

SEC("tracepoint/skb/kfree_skb")
int kfree_skb_tp(struct trace_event_raw_kfree_skb *ctx)
{
	return handle((struct sk_buff *)BPF_CORE_READ(ctx, skbaddr), BPF_CORE_READ(ctx, reason), false);
}
