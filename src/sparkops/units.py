"""Memory units and the one GB10 allocator threshold shared by the planner (`plan`) and the
profile rules (`profiles`): kept below both so neither package imports the other for a
constant.

Decimal gigabytes are the unit of the seed's sizing table (0.88 x 128 GB = ~112 GB usable);
binary gibibytes the unit of vLLM's `--kv-cache-memory-bytes` advice and of the threshold.
"""

from __future__ import annotations

GB = 1_000_000_000
GIB = 1 << 30
MIB = 1 << 20

# The seed: "anything above about 54 GiB needs PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".
EXPANDABLE_SEGMENTS_ABOVE_BYTES = 54 * GIB
