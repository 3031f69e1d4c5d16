/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The few kernel types the D-AROS programs read, hand-written instead of a
 * generated vmlinux.h. preserve_access_index makes clang emit CO-RE
 * relocations, so field offsets are resolved against the running kernel's BTF
 * at load time: only the names below must exist there.
 */
#ifndef DAROS_VMLINUX_MIN_H
#define DAROS_VMLINUX_MIN_H

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct kernfs_node {
	__u64 id; /* == inode number of the cgroup directory == bpf_skb_cgroup_id() */
};

struct cgroup {
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp; /* the task's cgroup in the v2 (default) hierarchy */
};

struct sched_entity {
	__u64 sum_exec_runtime; /* what the scheduler charged the task, cpu.stat's source */
};

struct task_struct {
	unsigned int __state;
	struct sched_entity se;
	int pid;
	int tgid;
	struct css_set *cgroups;
};

/* Kernels before 5.14 called the field "state". */
struct task_struct___pre514 {
	long state;
};

#pragma clang attribute pop

#endif
