"""Capacity planning: pure models of KV-cache memory and of throughput under prefix reuse.

Nothing here touches the network or the disk; the CLI (`sparkops plan ...`) and the deploy
profile validation both call these functions, so one model answers both.
"""

from sparkops.plan.memory import MemoryPlan, kv_bytes_per_token, plan_memory
from sparkops.plan.throughput import ThroughputPlan, plan_throughput

__all__ = [
    "MemoryPlan",
    "ThroughputPlan",
    "kv_bytes_per_token",
    "plan_memory",
    "plan_throughput",
]
