"""The plans as tables for a terminal (rich): what `sparkops plan` prints without --json.

Why apart from plan/cli.py: the command reads arguments and files and picks a plan; how each
plan reads on a screen is this module's alone, and the JSON output (each plan's as_dict())
does not pass through it.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from sparkops.plan.decode import DecodeCeiling
from sparkops.plan.guard import Verdict
from sparkops.plan.memory import GB, GIB, MemoryPlan
from sparkops.plan.prefix import SharedPrefixPlan
from sparkops.plan.throughput import NOTES_FASTEST_RUN, ThroughputPlan


def print_guard(verdict: Verdict, console: Console) -> None:
    table = Table(title=f"Memory guard ({verdict.kind})", show_header=False)
    for label, value in verdict.need.items():
        table.add_row(label, f"{value / GB:,.1f} GB")
    table.add_row("total", f"{sum(verdict.need.values()) / GB:,.1f} GB")
    table.add_row("host memory", f"{verdict.pool_bytes / GB:,.1f} GB")
    table.add_row(
        "headroom / margin",
        f"{verdict.headroom_bytes / GB:,.1f} GB / {verdict.margin_bytes / GB:,.1f} GB",
    )
    table.add_row(
        "largest --kv-cache-memory-bytes",
        f"{verdict.largest_kv_bytes} ({verdict.largest_kv_bytes / GIB:,.1f} GiB)",
    )
    if verdict.serves:
        table.add_row(
            "which holds",
            f"{verdict.serves['seqs']:,} sequences x {verdict.serves['context']:,} tokens",
        )
    console.print(table)
    console.print(verdict.message, soft_wrap=True, markup=False, highlight=False)
    console.print(
        "Formula: weights + KV cache + activations + reserve + other GPU processes, checked "
        "against the host's memory (and the GPU's, where nvidia-smi reports it) less the "
        "margin. Notes: with 96 GB given to an RTX Spark's GPU, a 60 GiB KV cache started "
        "beside the FP8 weights and 64 GiB did not; this arithmetic puts the limit at about "
        "62.9 GiB.",
        markup=False,
        highlight=False,
    )


def _notes_days(records: int | None) -> str:
    """The notes' "about 1.7 days" for 500,000 records, and what their own 217/min gives."""
    if records != 500_000:
        return ""
    days = records / NOTES_FASTEST_RUN["records_per_min"] / 60 / 24
    return f"~{NOTES_FASTEST_RUN['days_for_500000']:g} days (at 217/min: {days:.2f})"


def print_throughput(plan: ThroughputPlan, console: Console, formula: str = "") -> None:
    notes = NOTES_FASTEST_RUN
    summary = Table(
        title="Throughput at this hit rate",
        caption=f"notes: the benchmark notes' fastest run ({notes['computed_tok_s']:,.0f} "
        f"tok/s, {notes['prompt_tokens']:,.0f} + {notes['gen_tokens']:,.0f} tokens a record, "
        f"{notes['hit_rate']:.1%})",
    )
    summary.add_column("")
    summary.add_column("this plan")
    summary.add_column("notes")
    summary.add_row(
        "uncached prompt tokens / record",
        f"{plan.uncached_prompt_tokens:,.0f}",
        f"~{notes['uncached_prompt_tokens']:,.0f}",
    )
    summary.add_row("computed tokens / record", f"{plan.computed_tokens_per_record:,.0f}", "")
    summary.add_row(
        "records / min", f"{plan.records_per_min:,.1f}", f"~{notes['records_per_min']:,.0f}"
    )
    summary.add_row(
        "effective tok/s", f"{plan.effective_tok_s:,.0f}", f"~{notes['effective_tok_s']:,.0f}"
    )
    summary.add_row(
        "prompt / generation tok/s computed",
        f"{plan.prompt_computed_tok_s:,.0f} / {plan.generation_tok_s:,.0f}",
        f"~{notes['prompt_computed_tok_s']:,.0f} / ~{notes['generation_tok_s']:,.0f}",
    )
    if plan.hours_for_records is not None:
        summary.add_row(
            f"hours for {plan.records:,} records",
            f"{plan.hours_for_records:,.1f} ({plan.hours_for_records / 24:.2f} days)",
            _notes_days(plan.records),
        )
    summary.add_row(
        "ceiling records / min (perfect reuse)",
        f"{plan.ceiling_records_per_min:,.1f}",
        "~250 at ~1,300 tok/s",
    )
    summary.add_row(
        "computed tokens saved per point",
        f"{plan.tokens_saved_per_point:,.0f}",
        f"~{notes['tokens_saved_per_point']:,.0f}",
    )
    console.print(summary)
    if formula:
        console.print(formula, markup=False, highlight=False)

    table = Table(title="What each point of hit rate is worth")
    for column in ("hit rate", "records/min", "+records/min", "effective tok/s", "+tok/s"):
        table.add_column(column, justify="right")
    if plan.records:
        table.add_column("hours", justify="right")
    for row in plan.table:
        cells = [
            f"{row.hit_rate:.1%}",
            f"{row.records_per_min:,.1f}",
            f"{row.gain_records_per_min:+,.1f}" if row is not plan.table[0] else "",
            f"{row.effective_tok_s:,.0f}",
            f"{row.gain_effective_tok_s:+,.0f}" if row is not plan.table[0] else "",
        ]
        if plan.records:
            cells.append(f"{row.hours_for_records:,.1f}")
        table.add_row(*cells)
    console.print(table)


def print_memory(plan: MemoryPlan, console: Console) -> None:
    table = Table(title=f"KV cache plan ({plan.kv_dtype} KV)", show_header=False)
    table.add_row(
        "KV bytes / token", f"{plan.kv_bytes_per_token:,} ({plan.kv_mb_per_token:.3f} MB)"
    )
    if plan.sliding_layers:
        table.add_row(
            "sliding-window layers",
            f"{plan.sliding_layers} of {plan.sliding_layers + plan.full_layers} "
            f"(window {plan.sliding_window:,} tokens)",
        )
    table.add_row(
        "memory for vLLM / weights",
        f"{plan.memory_bytes / GB:,.2f} GB / {plan.weights_bytes / GB:,.2f} GB",
    )
    table.add_row(
        "KV cache", f"{plan.kv_cache_bytes / GB:,.2f} GB ({plan.kv_cache_bytes / GIB:,.2f} GiB)"
    )
    table.add_row("tokens that fit", f"{plan.tokens_that_fit:,}")
    usable = "unbounded" if plan.usable_ctx_per_seq is None else f"{plan.usable_ctx_per_seq:,}"
    table.add_row(f"usable_ctx_per_seq @ {plan.seqs} seqs", usable)
    table.add_row(f"sequences that fit @ {plan.context:,} tokens", f"{plan.seqs_at_context:,}")
    table.add_row("KV usage at plan", f"{plan.kv_usage_at_plan:.0%}")
    table.add_row("--kv-cache-memory-bytes", str(plan.kv_cache_memory_bytes))
    table.add_row("--max-num-seqs", str(plan.max_num_seqs))
    table.add_row("needs expandable_segments", "yes" if plan.needs_expandable_segments else "no")
    console.print(table)
    console.print(
        f"Formula: KV bytes a token = 2 (K, V) x layers x KV heads x head dim x dtype bytes = "
        f"{plan.kv_bytes_per_token:,}; KV cache = memory - weights = "
        f"{plan.memory_bytes / GB:,.2f} - {plan.weights_bytes / GB:,.2f} GB; tokens that fit = "
        f"KV cache / KV bytes a token = {plan.tokens_that_fit:,}. The sizing guide's table "
        "(e.g. Llama-3.1-8B: 0.07 MB a token, ~46k tokens a session at 32 sessions) is "
        "reproduced by tests/unit/test_plan_memory.py.",
        markup=False,
        highlight=False,
    )
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def print_shared_prefix(plan: SharedPrefixPlan, console: Console) -> None:
    table = Table(title="KV cache with shared prefixes", show_header=False)
    table.add_row("KV bytes / token (every layer)", f"{plan.kv_bytes_per_token:,}")
    sizes = "/".join(str(b) for b in sorted(set(plan.group_blocks)))
    table.add_row(
        "KV cache",
        f"{plan.kv_cache_bytes / GIB:,.1f} GiB = {plan.pool_blocks:,} blocks "
        f"({len(plan.group_blocks)} group(s) of {sizes}-token blocks)",
    )
    table.add_row(
        "shared, held once",
        f"{plan.prefixes} x {plan.shared_tokens:,} tokens (whole {plan.block_size}-token hit "
        f"blocks) = {plan.shared_blocks:,} blocks",
    )
    table.add_row(
        "own per sequence",
        f"{plan.own_prompt_tokens:,} prompt + up to {plan.output_tokens:,} written tokens = "
        f"{plan.own_blocks_typical:,.1f} blocks on average, {plan.own_blocks_peak:,} at full "
        "length",
    )
    table.add_row(
        f"KV usage at {plan.seqs:,} in flight",
        f"typical {plan.usage_typical:.1%}, peak {plan.usage_peak:.1%} (answers at every stage "
        f"of being written; all at full length at once: {plan.usage_full_answers:.0%})",
    )
    table.add_row("calls that fit at peak", f"{plan.seqs_that_fit_peak:,}")
    console.print(table)
    console.print(
        f"Formula: usage = (shared blocks + in flight x own blocks) / blocks = "
        f"({plan.shared_blocks:,} + {plan.seqs:,} x {plan.own_blocks_typical:,.1f}) / "
        f"{plan.pool_blocks:,} = {plan.usage_typical:.1%} typical (vLLM's allocator: a sliding "
        "group holds only the blocks in its window). Measured 2026-12-03 on an H200 (vLLM "
        "0.26, 960 seed-shaped calls in flight): 75.9% mean, 81.2% peak, no preemption, no hit "
        "rate lost. The seed's GB10 (vLLM 0.32) read about 55% at 1,000 in flight; the plan "
        "follows the engine measured (docs/planning.md).",
        markup=False,
        highlight=False,
    )
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def print_decode(ceiling: DecodeCeiling, console: Console) -> None:
    table = Table(
        title=f"Decode ceiling at {ceiling.bandwidth_gb_s:,.0f} GB/s, context "
        f"{ceiling.context:,} tokens"
    )
    for column in ("in flight", "step (ms)", "decode tok/s", "of the asymptote"):
        table.add_column(column, justify="right")
    for p in ceiling.points:
        table.add_row(
            f"{p.concurrency:,}",
            f"{p.step_ms:,.1f}",
            f"{p.tok_s:,.0f}",
            f"{p.share_of_asymptote:.0%}",
        )
    console.print(table)
    console.print(
        f"KV read per sequence and step {ceiling.kv_read_bytes_per_seq / 1e6:,.1f} MB, weights "
        f"{ceiling.weight_bytes / 1e9:,.1f} GB: the asymptote is {ceiling.asymptote_tok_s:,.0f} "
        f"tok/s; half of it at {ceiling.knee_concurrency:,.0f} in flight, 90% at "
        f"{ceiling.near_asymptote_concurrency:,.0f}. Past that, more concurrency buys hit rate, "
        "not decode speed. Assumed: memory-bound decode at the full bandwidth (measured points "
        "sit below), prefill and compute left out.",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
