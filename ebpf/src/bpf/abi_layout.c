// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Not a program: build.rs runs clang -fdump-record-layouts on this file for
 * the BPF target and turns the layouts into Rust constants, against which
 * ebpf/src/abi.rs checks its mirrors.
 */
#include <linux/types.h>
#include "cg_abi.h"

#define USE(t) unsigned long long cg_size_##t = sizeof(struct t);
USE(cg_index_entry)
USE(cg_dir_counters)
USE(cg_net_counters)
USE(cg_bucket_cfg)
USE(cg_net_cfg)
USE(cg_bucket_state)
USE(cg_net_state)
USE(cg_net_stats)
USE(cg_meta)
USE(cg_event)
USE(cg_sched_stats)
USE(cg_task_ts)
