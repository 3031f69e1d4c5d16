/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Map keys, values and events shared with userspace. Every struct here is
 * mirrored by a #[repr(C)] struct in ebpf/src/abi.rs and checked there by a
 * size/offset test. Bump CG_*_ABI when a layout or a map definition changes:
 * the loader then replaces the pinned maps instead of reusing them.
 */
#ifndef DAROS_CG_ABI_H
#define DAROS_CG_ABI_H

#define CG_NET_ABI 2
#define CG_SCHED_ABI 1

#define CG_EGRESS 0
#define CG_INGRESS 1

/* Default number of workload slots; the loader may override max_entries. */
#define CG_MAX_WORKLOADS 1024
#define CG_MAX_CGROUP_KEYS 4096

/*
 * Workload index: an array probed by open addressing instead of a BPF hash map (an inlined
 * array lookup per probe instead of a jhash and a bucket walk). Userspace places each cgroup
 * id within CG_INDEX_PROBES entries of its home position and never leaves a torn entry
 * visible: it writes {0, slot} before {cgroup_id, slot}, and clears by writing {0, slot}.
 */
#define CG_INDEX_BITS 14
#define CG_INDEX_SIZE (1 << CG_INDEX_BITS)
#define CG_INDEX_PROBES 4
#define CG_INDEX_MULT 0x9E3779B97F4A7C15ULL

struct cg_index_entry {
	__u64 cgroup_id; /* 0 = empty */
	__u32 slot;
	__u32 _pad;
};

/* Fixed point of cg_bucket_cfg.ns_per_byte: cost_ns = len * ns_per_byte >> 20. */
#define CG_NS_PER_BYTE_SHIFT 20

/* Counters of one direction of one workload, per CPU (summed in userspace). */
struct cg_dir_counters {
	__u64 bytes;          /* skb->len of passed packets: L3 header + payload */
	__u64 packets;        /* passed packets (GSO skbs count once, as the stack sees them) */
	__u64 drop_bytes;     /* bytes of packets dropped by the cap */
	__u64 drop_packets;
	__u64 marked_packets; /* passed with congestion notification (egress) or ECN CE (ingress) */
};

struct cg_net_counters {
	struct cg_dir_counters dir[2];
};

/* Token bucket (GCRA form) parameters of one direction; written by userspace only. */
struct cg_bucket_cfg {
	__u64 ns_per_byte;    /* Q20 ns per byte; 0 = no cap in this direction */
	__u64 burst_ns;       /* conforming while the bucket is at most this far ahead of now */
	__u64 debt_ns;        /* further allowance: pass with notification, then drop */
	__u64 rate_bps;       /* effective cap in bytes/s (what ns_per_byte encodes) */
	__u64 configured_bps; /* operator cap, 0 = none */
	__u64 floor_cap_bps;  /* cap set by the floor controller, 0 = none */
	__u64 burst_bytes;    /* effective burst, for read-back */
	__u64 configured_burst;   /* operator cap's burst_bytes, 0 = default */
	__u32 configured_debt_ms; /* operator cap's debt_ms + 1, 0 = default */
	__u32 flags;              /* CG_CFG_F_* */
};

#define CG_CFG_F_ECN 1 /* ingress: mark ECN CE while in debt */

struct cg_net_cfg {
	__u64 cgroup_id; /* the workload's own cgroup (other keys may alias the slot) */
	__u64 _reserved;
	struct cg_bucket_cfg dir[2];
};

/* Bucket state of one direction, shared by all CPUs; one cache line each. */
struct cg_bucket_state {
	__u64 tat_ns;             /* theoretical arrival time: when the bucket is full again */
	__u64 throttled_since_ns; /* 0 = not throttled */
	__u64 last_drop_event_ns;
	__u64 unreported_drops;
	__u64 _pad[4];
};

struct cg_net_state {
	struct cg_bucket_state dir[2];
};

/* Node-wide datapath counters, per CPU. */
struct cg_net_stats {
	__u64 unknown_packets; /* packets of cgroups that are not registered */
	__u64 unknown_bytes;
	__u64 events_lost;     /* ring buffer full */
	__u64 _pad;
};

/* Written once by userspace when the pins are created. */
struct cg_meta {
	__u32 abi;
	__u32 max_slots;
	__u64 object_hash;
	__u64 created_unix_ns;
	__u64 _reserved[5];
};

#define CG_EV_THROTTLE_START 1
#define CG_EV_THROTTLE_STOP 2
#define CG_EV_DROPS 3

struct cg_event {
	__u64 ts_ns; /* CLOCK_MONOTONIC */
	__u64 cgroup_id;
	__u32 kind;
	__u32 dir;
	__u64 value; /* STOP: throttled duration in ns; DROPS: drops since the last report */
};

/* At most one CG_EV_DROPS per workload and direction in this interval. */
#define CG_DROP_EVENT_INTERVAL_NS 100000000ULL

#define CG_HIST_SLOTS 32

/* Scheduler statistics of one cgroup (all CPUs, atomically updated). */
struct cg_sched_stats {
	__u64 oncpu_ns;    /* time its tasks ran */
	__u64 slices;      /* switch-outs of its tasks */
	__u64 wait_ns;     /* run-queue wait: wakeup (or preemption) until switch-in */
	__u64 waits;
	__u64 wait_max_ns; /* since the entry was created */
	__u64 _pad[3];
	__u64 wait_hist[CG_HIST_SLOTS]; /* slot i: waits in [2^i, 2^(i+1)) microseconds; slot 0 also < 1 us */
};

struct cg_task_ts {
	__u64 enqueued_ns; /* 0 = not waiting */
	/* The task's se.sum_exec_runtime when last charged, with CG_RUNTIME_SEEN set;
	 * without that bit (0, or a timestamp pinned by an older build) there is no
	 * baseline yet. */
	__u64 runtime_seen;
};

#define CG_RUNTIME_SEEN (1ULL << 63)

#endif
