// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Per-workload network accounting and caps on cgroup_skb egress/ingress.
 *
 * Per packet: socket cgroup id -> slot through an open-addressed array index,
 * then array lookups; all array lookups are inlined by the verifier/JIT. Counters are per CPU. A capped direction runs a GCRA
 * token bucket whose only shared state is tat_ns, updated with one atomic.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "cg_abi.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* cgroup_skb return values; bit 1 = congestion notification (egress only). */
#define CG_DROP 0
#define CG_PASS 1
#define CG_DROP_CN 2
#define CG_PASS_CN 3

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CG_INDEX_SIZE);
	__type(key, __u32);
	__type(value, struct cg_index_entry);
} cg_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CG_MAX_WORKLOADS);
	__type(key, __u32);
	__type(value, struct cg_net_counters);
} cg_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CG_MAX_WORKLOADS);
	__type(key, __u32);
	__type(value, struct cg_net_cfg);
} cg_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CG_MAX_WORKLOADS);
	__type(key, __u32);
	__type(value, struct cg_net_state);
} cg_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cg_net_stats);
} cg_net_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cg_meta);
} cg_net_meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} cg_events SEC(".maps");

static __always_inline void cg_emit(__u64 now, __u64 cgid, __u32 kind, __u32 dir, __u64 value)
{
	struct cg_event *ev = bpf_ringbuf_reserve(&cg_events, sizeof(*ev), 0);
	if (!ev) {
		__u32 zero = 0;
		struct cg_net_stats *s = bpf_map_lookup_elem(&cg_net_stats, &zero);
		if (s)
			__sync_fetch_and_add(&s->events_lost, 1);
		return;
	}
	ev->ts_ns = now;
	ev->cgroup_id = cgid;
	ev->kind = kind;
	ev->dir = dir;
	ev->value = value;
	bpf_ringbuf_submit(ev, 0);
}

/* A throttle episode starts at the first packet that is not conforming. */
static __always_inline void cg_throttle_start(struct cg_bucket_state *st, __u64 now, __u64 cgid, __u32 dir)
{
	if (st->throttled_since_ns)
		return;
	if (__sync_val_compare_and_swap(&st->throttled_since_ns, 0, now) == 0)
		cg_emit(now, cgid, CG_EV_THROTTLE_START, dir, 0);
}

/* ...and ends at the first packet that finds the bucket at most half full of debt. */
static __always_inline void cg_throttle_stop(struct cg_bucket_state *st, __u64 now, __u64 cgid, __u32 dir)
{
	__u64 since = st->throttled_since_ns;
	if (!since)
		return;
	if (__sync_val_compare_and_swap(&st->throttled_since_ns, since, 0) == since)
		cg_emit(now, cgid, CG_EV_THROTTLE_STOP, dir, now - since);
}

static __always_inline void cg_drop_event(struct cg_bucket_state *st, __u64 now, __u64 cgid, __u32 dir)
{
	__sync_fetch_and_add(&st->unreported_drops, 1);
	__u64 last = st->last_drop_event_ns;
	if (now - last < CG_DROP_EVENT_INTERVAL_NS)
		return;
	if (__sync_val_compare_and_swap(&st->last_drop_event_ns, last, now) != last)
		return;
	cg_emit(now, cgid, CG_EV_DROPS, dir, __sync_lock_test_and_set(&st->unreported_drops, 0));
}

/* The slot of a registered cgroup, or NULL. */
static __always_inline __u32 *cg_find_slot(__u64 cgid)
{
	__u32 home = (__u32)((cgid * CG_INDEX_MULT) >> (64 - CG_INDEX_BITS));
#pragma unroll
	for (__u32 i = 0; i < CG_INDEX_PROBES; i++) {
		__u32 pos = (home + i) & (CG_INDEX_SIZE - 1);
		struct cg_index_entry *e = bpf_map_lookup_elem(&cg_index, &pos);
		if (!e)
			return 0;
		if (e->cgroup_id == cgid)
			return &e->slot;
	}
	return 0;
}

static __always_inline int cg_handle(struct __sk_buff *skb, const __u32 dir)
{
	__u64 cgid = bpf_skb_cgroup_id(skb);
	__u32 len = skb->len;
	__u32 *slotp = cg_find_slot(cgid);
	if (!slotp) {
		__u32 zero = 0;
		struct cg_net_stats *s = bpf_map_lookup_elem(&cg_net_stats, &zero);
		if (s) {
			s->unknown_packets++;
			s->unknown_bytes += len;
		}
		return CG_PASS;
	}
	__u32 slot = *slotp;
	struct cg_net_counters *c = bpf_map_lookup_elem(&cg_counters, &slot);
	struct cg_net_cfg *cfg = bpf_map_lookup_elem(&cg_cfg, &slot);
	if (!c || !cfg)
		return CG_PASS;
	struct cg_dir_counters *dc = &c->dir[dir];
	struct cg_bucket_cfg *bc = &cfg->dir[dir];
	__u64 npb = bc->ns_per_byte;

	if (!npb) {
		/* Per-CPU: only a softirq on this CPU can interleave, the atomic keeps that exact. */
		__sync_fetch_and_add(&dc->bytes, len);
		__sync_fetch_and_add(&dc->packets, 1);
		return CG_PASS;
	}

	struct cg_net_state *state = bpf_map_lookup_elem(&cg_state, &slot);
	if (!state)
		return CG_PASS;
	struct cg_bucket_state *st = &state->dir[dir];
	__u64 now = bpf_ktime_get_ns();
	__u64 cost = ((__u64)len * npb) >> CG_NS_PER_BYTE_SHIFT;
	__u64 tat = *(volatile __u64 *)&st->tat_ns;
	__u64 ahead;

	if (tat <= now) {
		/* Bucket full: start from now. One CAS; on a lost race use the winner's value. */
		__u64 seen = __sync_val_compare_and_swap(&st->tat_ns, tat, now + cost);
		if (seen == tat) {
			if (st->throttled_since_ns)
				cg_throttle_stop(st, now, cfg->cgroup_id, dir);
			__sync_fetch_and_add(&dc->bytes, len);
			__sync_fetch_and_add(&dc->packets, 1);
			return CG_PASS;
		}
		tat = seen > now ? seen : now;
	}
	ahead = tat + cost - now;

	if (ahead <= bc->burst_ns) {
		__sync_fetch_and_add(&st->tat_ns, cost);
		if (st->throttled_since_ns && ahead <= bc->burst_ns / 2)
			cg_throttle_stop(st, now, cfg->cgroup_id, dir);
		__sync_fetch_and_add(&dc->bytes, len);
		__sync_fetch_and_add(&dc->packets, 1);
		return CG_PASS;
	}

	cg_throttle_start(st, now, cfg->cgroup_id, dir);
	if (ahead <= bc->burst_ns + bc->debt_ns) {
		/* Small debt: keep the packet, tell the sender to slow down. */
		__sync_fetch_and_add(&st->tat_ns, cost);
		__sync_fetch_and_add(&dc->bytes, len);
		__sync_fetch_and_add(&dc->packets, 1);
		__sync_fetch_and_add(&dc->marked_packets, 1);
		if (dir == CG_EGRESS)
			return CG_PASS_CN;
		if (bc->flags & CG_CFG_F_ECN)
			bpf_skb_ecn_set_ce(skb);
		return CG_PASS;
	}

	/* Beyond the debt limit: drop, uncharged. */
	__sync_fetch_and_add(&dc->drop_bytes, len);
	__sync_fetch_and_add(&dc->drop_packets, 1);
	cg_drop_event(st, now, cfg->cgroup_id, dir);
	return dir == CG_EGRESS ? CG_DROP_CN : CG_DROP;
}

SEC("cgroup_skb/egress")
int cg_egress(struct __sk_buff *skb)
{
	return cg_handle(skb, CG_EGRESS);
}

SEC("cgroup_skb/ingress")
int cg_ingress(struct __sk_buff *skb)
{
	return cg_handle(skb, CG_INGRESS);
}
