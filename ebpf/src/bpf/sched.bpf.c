// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Per-cgroup on-CPU time and run-queue wait from the scheduler tracepoints.
 *
 * sched_wakeup/sched_wakeup_new stamp the task's enqueue time; sched_switch
 * charges the run-queue wait to `next` and the CPU time of `prev` since its
 * last charge, both keyed by the task's cgroup in the default (v2) hierarchy.
 *
 * CPU time is the growth of the task's se.sum_exec_runtime, the figure cpu.stat
 * is built from: a clock of our own (bpf_ktime) runs at another rate on some
 * hosts and counts interrupt and steal time the scheduler leaves out, and a
 * switch we miss would lose its slice instead of deferring it to the next one.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "vmlinux_min.h"
#include "cg_abi.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cg_task_ts);
} cg_task_ts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CG_MAX_CGROUP_KEYS);
	__type(key, __u64); /* cgroup id */
	__type(value, struct cg_sched_stats);
} cg_sched SEC(".maps");

/* [0] = entries that did not fit in cg_sched. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cg_sched_overflow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cg_meta);
} cg_sched_meta SEC(".maps");

static __always_inline __u64 cg_task_cgroup(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

static __always_inline long cg_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

static __always_inline struct cg_sched_stats *cg_stats(__u64 cgid)
{
	struct cg_sched_stats *s = bpf_map_lookup_elem(&cg_sched, &cgid);
	if (s)
		return s;
	struct cg_sched_stats zero = {};
	/* EEXIST when another CPU created it first: fine, look it up again. */
	bpf_map_update_elem(&cg_sched, &cgid, &zero, BPF_NOEXIST);
	s = bpf_map_lookup_elem(&cg_sched, &cgid);
	if (!s) {
		__u32 k = 0;
		__u64 *o = bpf_map_lookup_elem(&cg_sched_overflow, &k);
		if (o)
			*o += 1;
	}
	return s;
}

static __always_inline __u32 cg_log2(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xffffffff) << 5; v >>= shift; r |= shift;
	shift = (v > 0xffff) << 4; v >>= shift; r |= shift;
	shift = (v > 0xff) << 3; v >>= shift; r |= shift;
	shift = (v > 0xf) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u64 cg_runtime(struct task_struct *t)
{
	return BPF_CORE_READ(t, se.sum_exec_runtime);
}

/* Starts counting a task's CPU time from now if nothing counts it yet. */
static __always_inline void cg_baseline(struct cg_task_ts *ts, struct task_struct *t)
{
	if (!(ts->runtime_seen & CG_RUNTIME_SEEN))
		ts->runtime_seen = cg_runtime(t) | CG_RUNTIME_SEEN;
}

static __always_inline void cg_enqueue(struct task_struct *t, __u64 now)
{
	if (t->pid == 0)
		return;
	struct cg_task_ts *ts = bpf_task_storage_get(&cg_task_ts, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (ts) {
		ts->enqueued_ns = now;
		cg_baseline(ts, t);
	}
}

SEC("tp_btf/sched_wakeup")
int cg_sched_wakeup(__u64 *ctx)
{
	cg_enqueue((struct task_struct *)ctx[0], bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int cg_sched_wakeup_new(__u64 *ctx)
{
	cg_enqueue((struct task_struct *)ctx[0], bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_switch")
int cg_sched_switch(__u64 *ctx)
{
	/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, ...) */
	int preempt = ctx[0] & 1;
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u64 now = bpf_ktime_get_ns();
	struct cg_task_ts *ts;
	struct cg_sched_stats *s;

	if (prev->pid != 0) {
		ts = bpf_task_storage_get(&cg_task_ts, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (ts) {
			__u64 seen = ts->runtime_seen;
			/* put_prev_task has brought sum_exec_runtime up to this switch. */
			__u64 runtime = cg_runtime(prev);
			ts->runtime_seen = runtime | CG_RUNTIME_SEEN;
			/* Still runnable (preempted or yielded): it waits in the run queue from now. */
			if (preempt || cg_task_state(prev) == TASK_RUNNING)
				ts->enqueued_ns = now;
			__u64 base = seen & ~CG_RUNTIME_SEEN;
			if ((seen & CG_RUNTIME_SEEN) && runtime > base) {
				s = cg_stats(cg_task_cgroup(prev));
				if (s) {
					__sync_fetch_and_add(&s->oncpu_ns, runtime - base);
					__sync_fetch_and_add(&s->slices, 1);
				}
			}
		}
	}

	if (next->pid == 0)
		return 0;
	ts = bpf_task_storage_get(&cg_task_ts, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts)
		return 0;
	/* A task that ran before the programs did starts counting here. */
	cg_baseline(ts, next);
	__u64 enq = ts->enqueued_ns;
	if (!enq || now < enq)
		return 0;
	ts->enqueued_ns = 0;
	__u64 wait = now - enq;
	s = cg_stats(cg_task_cgroup(next));
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->wait_ns, wait);
	__sync_fetch_and_add(&s->waits, 1);
	__u32 slot = cg_log2(wait / 1000);
	if (slot >= CG_HIST_SLOTS)
		slot = CG_HIST_SLOTS - 1;
	barrier_var(slot); /* keep clang from folding away the mask below */
	slot &= CG_HIST_SLOTS - 1; /* a bound the verifier can see */
	__sync_fetch_and_add(&s->wait_hist[slot], 1);
	for (int i = 0; i < 3; i++) {
		__u64 max = s->wait_max_ns;
		if (wait <= max)
			break;
		if (__sync_val_compare_and_swap(&s->wait_max_ns, max, wait) == max)
			break;
	}
	return 0;
}
