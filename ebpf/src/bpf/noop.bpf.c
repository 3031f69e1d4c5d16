// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/* Baseline for the benchmark: the cost of BPF_PROG_TEST_RUN itself. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup_skb/egress")
int cg_noop(struct __sk_buff *skb)
{
	return 1;
}
