/* The few kernel types the drop program reads, declared for CO-RE: preserve_access_index makes
 * every field access a relocation that the loader resolves against the running kernel's BTF, so
 * only the names matter here, not the layout. Kept small instead of a generated vmlinux.h. */
#ifndef KDROP_H
#define KDROP_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <stdbool.h>

struct net {
	__u64 net_cookie;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
	unsigned int len;
	unsigned int data_len;
	__u16 network_header;
	__u16 protocol;
	unsigned int end;
	unsigned char *head;
	unsigned char *data;
} __attribute__((preserve_access_index));

struct skb_shared_info {
	unsigned short gso_size;
	unsigned short gso_segs;
} __attribute__((preserve_access_index));

struct trace_entry {
	unsigned short type;
	unsigned char flags;
	unsigned char preempt_count;
	int pid;
} __attribute__((preserve_access_index));

enum skb_drop_reason {
	SKB_DROP_REASON_NOT_SPECIFIED = 2,
};

/* The classic tracepoint's record (skb:kfree_skb). */
struct trace_event_raw_kfree_skb {
	struct trace_entry ent;
	void *skbaddr;
	void *location;
	enum skb_drop_reason reason;
} __attribute__((preserve_access_index));

#endif
