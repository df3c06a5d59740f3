"""methods.md: a paragraph a paper can take, then a table per topic (item, value, the file it
comes from), in the order of TRIPOD-LLM's methods items where they apply.

The order (Gallifant et al., The TRIPOD-LLM reporting guideline for studies using large
language models, Nat Med 2025;31:60-69): the data (source, dates, the input), the outcome and
its reference standard, the LLM (name, version, how it was accessed and served, its settings),
the prompting, the handling of records (failures, missing answers), the analysis and its
uncertainty, the computing environment, and availability. What the kit cannot know is a marked
place, never a guess.

The file is the kit's: each `--methods` rewrites it, so a researcher fills the marked places in
a copy; a methods.md the kit did not write (no header line) is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkops.errors import UserError
from sparkops.files import write_atomic
from sparkops.methods.facts import TODO, Fact, JobFacts, Served, todo, when
from sparkops.methods.pipeline import JobPipeline, folder_only_facts, pipeline_facts
from sparkops.methods.saved import methods_pipeline, saved_or_none
from sparkops.pipeline.spec import STOP, PipelineSpec

METHODS = "methods.md"
HEADER = (
    "<!-- methods.md written by sparkops from the job folder's files; each --methods rewrites "
    "it: fill the places marked TO COMPLETE in a copy -->"
)
GUIDELINE = (
    "TRIPOD-LLM (Gallifant et al., The TRIPOD-LLM reporting guideline for studies using large "
    "language models, Nat Med 2025;31:60-69)"
)


@dataclass(frozen=True)
class Section:
    """One topic of the methods: its title and its rows."""

    title: str
    facts: tuple[Fact, ...]


# ---- the sections, in TRIPOD-LLM's order -------------------------------------------------------
def data_section(facts: JobFacts) -> Section:
    m = facts.manifest
    return Section(
        "Data",
        (
            todo(
                "Source of the records",
                "where the records come from (institution, record type, how they were "
                "extracted and de-identified)",
            ),
            todo("Dates of the records", "the period the records were written in"),
            todo("Population", "who the records are about: setting, eligibility, exclusions"),
            Fact(
                "Input",
                f"{m.input} ({m.kind}, record id field {m.id_field!r}): {m.total:,} records; "
                f"SHA-256 of its bytes begins {m.input_fingerprint}",
                "manifest.json",
            ),
        ),
    )


def outcome_section(facts: JobFacts, spec: PipelineSpec | None) -> Section:
    if spec is not None:
        labels = sorted(final_labels(spec))
        outcome = Fact(
            "Outcome",
            f"the pipeline's final decision per record: {', '.join(labels)}",
            "the pipeline (see Prompting)",
        )
    else:
        outcome = Fact(
            "Outcome",
            "the final decision per record (its labels: see Decisions under Handling of records)",
            "results.jsonl",
        )
    return Section(
        "Outcome and reference standard",
        (
            outcome,
            todo(
                "Reference standard",
                "the origin of the gold labels: who labelled the records, their "
                "qualifications, the instructions, blinding to the model's answers, agreement "
                "between labellers",
            ),
        ),
    )


def final_labels(spec: PipelineSpec) -> set[str]:
    """Every label a record can end with: routed to stop, or given by the last step without
    routes (a step without `next` falls through to the following one)."""
    ends = set()
    for index, step in enumerate(spec.steps):
        if step.next is None:
            if index == len(spec.steps) - 1:
                ends.update(step.labels)
            continue
        ends.update(label for label, target in step.next.items() if target == STOP)
    return ends


def model_section(served: Served | None) -> Section:
    if served is None:
        return Section(
            "Large language model",
            (
                todo(
                    "Model and server",
                    "the job has no serving record (serving.jsonl): name the model, its "
                    "version, quantisation and the server's settings",
                ),
            ),
        )
    ident, flags, stack = served.identity, served.flags, served.stack or {}
    source = "serving.jsonl (the first run's start line)"
    stack_source = "serving.jsonl (the stack record)"
    rows = [
        Fact(
            "Model",
            f"{ident.get('model') or 'unknown'} (weights at {ident.get('root') or 'unknown'}; "
            f"context {ident.get('max_model_len') or 'unknown'} tokens)",
            source,
        ),
        _model_digest(stack, flags, stack_source),
        Fact("Quantisation", _quantisation(flags), stack_source if flags else source),
        Fact("KV-cache dtype", _kv_dtype(ident, flags), source),
        Fact(
            "Inference engine",
            f"vLLM {ident.get('version') or '(version not reported)'}" + _image(stack),
            source,
        ),
        Fact(
            "Access",
            f"self-hosted, through vLLM's OpenAI-compatible API, {served.endpoints} endpoint(s)"
            + (f" ({served.unreachable} unreachable at the start)" if served.unreachable else "")
            + ("; a local server started by `sparkops local up`" if stack.get("local") else ""),
            source,
        ),
        Fact(
            "Prefix cache",
            f"{ident.get('cache.enable_prefix_caching') or 'not reported'} (block size "
            f"{ident.get('cache.block_size') or '?'} tokens, "
            f"{ident.get('cache.num_gpu_blocks') or '?'} blocks)",
            source,
        ),
    ]
    if flags:
        shown = "; ".join(f"{k} {v}" for k, v in flags.items())
        rows.append(Fact("Serving settings (the server's command)", shown, stack_source))
    else:
        rows.append(
            todo(
                "Serving settings",
                "the server's options (the job had no stack record: `batch run --stack-record "
                "PATH`)",
            )
        )
    changed = "; ".join(served.changes + served.other_models)
    rows.append(
        Fact(
            "Changes during the job",
            changed or "none: the same serving setup answered every record",
            "serving.jsonl",
        )
    )
    return Section("Large language model", tuple(rows))


def _kv_dtype(ident: dict[str, str], flags: dict[str, str]) -> str:
    return ident.get("cache.cache_dtype") or flags.get("--kv-cache-dtype") or "not reported"


def _model_digest(stack: dict[str, object], flags: dict[str, str], source: str) -> Fact:
    revision = flags.get("--revision")
    if revision:
        return Fact("Model revision", revision, source)
    return todo(
        "Model revision or file digests",
        "the model's revision, or the sha256 of its weight files (the job folder records the "
        "path it was served from)",
    )


def _quantisation(flags: dict[str, str]) -> str:
    if "--quantization" in flags:
        return flags["--quantization"]
    if flags:
        dtype = flags.get("--dtype", "auto")
        return f"none given to vLLM (weights served as stored; --dtype {dtype})"
    return "not recorded (no stack record)"


def _image(stack: dict[str, object]) -> str:
    image, digest = stack.get("image"), stack.get("base_digest")
    if not image:
        return ""
    return f", image {image}" + (f" (base image digest {digest})" if digest else "")


def flow_section(facts: JobFacts) -> Section:
    f = facts.flow
    causes = "; ".join(f"{cause}: {n:,}" for cause, n in f.causes) or "none"
    decisions = ", ".join(f"{label} {n:,}" for label, n in f.decisions) or "none"
    runs = facts.runs
    stops = [f"run {r.number} stopped ({r.stopped})" for r in runs if r.stopped]
    killed = [f"run {r.number} ended without its end line" for r in runs if r.ended is None]
    rows = [
        Fact(
            "Records",
            f"{f.total:,} in the input: {f.done:,} decided, {f.record_errors:,} ended in "
            f"error, {f.other_errors:,} errors that were not the record's, {f.remaining:,} "
            "not finished",
            "manifest.json, results.jsonl",
        ),
        Fact(
            "Errors by cause",
            causes,
            "openai-meta.jsonl" if facts.manifest.kind == "openai" else "results.jsonl",
        ),
        Fact("Decisions", decisions, "results.jsonl"),
        Fact(
            "Answers cut off",
            f"{f.cut:,} record(s) had an answer cut off at its step's max_tokens",
            "results.jsonl (finish_reason length)",
        ),
        Fact(
            "Runs",
            f"{len(runs)} run(s)"
            + (f"; resumed {len(runs) - 1} time(s)" if len(runs) > 1 else "")
            + ("; " + "; ".join(stops + killed) if stops or killed else "")
            + "; each record has one results line, counted once",
            "runs.jsonl",
        ),
    ]
    if f.damaged or f.repeated:
        rows.append(
            Fact(
                "Results lines that count no record",
                f"{f.damaged} damaged, {f.repeated} repeating a finished record",
                "results.jsonl",
            )
        )
    return Section("Handling of records", tuple(rows))


def environment_section(facts: JobFacts) -> Section:
    runs, served, f = facts.runs, facts.served, facts.flow
    started = min((r.started for r in runs if r.started is not None), default=None)
    ended = max((r.ended for r in runs if r.ended is not None), default=None)
    active = sum(r.active_s for r in runs if r.active_s is not None)
    span = f"{active / 60:,.1f} min" if active >= 120 else f"{active:,.1f} s"
    rate = (
        f"{f.done / active * 60:,.0f} records/min over {span} of runs"
        if active and f.done
        else "not measured"
    )
    gpu = (served.gpu if served else None) or {}
    hardware = hardware_text(gpu)
    kit = served.kit_version if served and served.kit_version else "(version not recorded)"
    concurrency = sorted({r.concurrency for r in runs if r.concurrency is not None})
    return Section(
        "Computing environment",
        (
            Fact("Dates", f"{when(started)} to {when(ended)}", "runs.jsonl"),
            Fact("Hardware", hardware, "serving.jsonl (gpu)"),
            Fact(
                "Throughput",
                f"{rate}; {f.prompt_tokens:,} prompt and {f.completion_tokens:,} completion "
                f"tokens; concurrency {', '.join(map(str, concurrency)) or 'unknown'}",
                "runs.jsonl, results.jsonl",
            ),
            Fact("Software", f"sparkops {kit}", "serving.jsonl"),
        ),
    )


def hardware_text(gpu: dict[str, object]) -> str:
    """The GPU the job's host saw (sparkops-gpu-check's object), or why none is recorded."""
    found = gpu.get("gpu")
    if isinstance(found, dict) and found.get("name"):
        extra = [
            f"driver {found['driver_version']}" if found.get("driver_version") else "",
            f"CUDA {found['cuda_version']}" if found.get("cuda_version") else "",
        ]
        return ", ".join([f"GPU {found['name']}", *(x for x in extra if x)])
    why = gpu.get("unavailable") or gpu.get("message")
    return f"no GPU identity recorded ({why})" if why else "not recorded"


def integrity_section(facts: JobFacts) -> Section:
    found = facts.verification
    seal = facts.seal
    if not found.sealed:
        state = "no run sealed its files (a kit from before seals)"
    elif found.verified:
        state = f"verified against run {found.sealed_runs[-1]}'s seal (`sparkops batch verify`)"
    else:
        state = f"DOES NOT VERIFY: {found.problems[0]}"
    rows = [
        Fact(
            "Results file",
            f"results.jsonl, SHA-256 {facts.results_sha256 or 'absent'}",
            "results.jsonl",
        ),
        Fact("Seal", state, "runs.jsonl (digests)"),
    ]
    if seal is not None:
        rows.append(Fact("Last seal's SHA-256", seal.sha256, "runs.jsonl (digests)"))
    return Section("Integrity of the results", tuple(rows))


def analysis_section() -> Section:
    return Section(
        "Analysis and uncertainty",
        (
            todo(
                "Performance against the reference standard",
                "accuracy, sensitivity, specificity, PPV, NPV with 95% intervals: `sparkops "
                "compare RUN_A RUN_B --gold labels.csv --methods` writes them with the method "
                "of each interval",
            ),
        ),
    )


def availability_section() -> Section:
    return Section(
        "Availability",
        (
            todo(
                "Code and data",
                "where the pipeline, prompts and (if shareable) the records and results can be "
                "obtained; study registration",
            ),
        ),
    )


def job_sections(
    facts: JobFacts,
    pipeline: JobPipeline | None = None,
    analysis: Section | None = None,
) -> list[Section]:
    """Every section of one job, in TRIPOD-LLM's order; `pipeline` the job's (default: its
    saved copy when that is intact), `analysis` the comparison's (default: a marked place
    naming `compare --methods`)."""
    pipeline = pipeline or saved_or_none(facts.directory, facts.manifest)
    spec = pipeline.spec if pipeline is not None else None
    prompting = (
        pipeline_facts(pipeline, facts.manifest)
        if pipeline is not None
        else folder_only_facts(facts.manifest, facts.steps_seen)
    )
    return [
        data_section(facts),
        outcome_section(facts, spec),
        model_section(facts.served),
        Section("Prompting", tuple(prompting)),
        flow_section(facts),
        analysis or analysis_section(),
        environment_section(facts),
        integrity_section(facts),
        availability_section(),
    ]


# ---- the paragraph -------------------------------------------------------------------------------
def paragraph(facts: JobFacts, spec: PipelineSpec | None) -> str:
    """The methods in prose, each figure from the tables below."""
    served, f, m = facts.served, facts.flow, facts.manifest
    ident = served.identity if served else {}
    model = ident.get("model") or f"**[{TODO}: the model]**"
    version = ident.get("version")
    engine = f"vLLM {version}" if version else "vLLM"
    pipeline = (
        f"the {len(spec.steps)}-step pipeline {spec.name} "
        f"({' -> '.join(s.name for s in spec.steps)})"
        if spec is not None
        else f"the pipeline with fingerprint {m.pipeline_fingerprint}"
    )
    started = min((r.started for r in facts.runs if r.started is not None), default=None)
    ended = max((r.ended for r in facts.runs if r.ended is not None), default=None)
    runs = len(facts.runs)
    return (
        f"Records ({m.total:,}; **[{TODO}: population and source]**) were classified by "
        f"the large language model {model}, self-hosted with {engine}, using {pipeline}, "
        f"with sparkops batch jobs run between {when(started)} and {when(ended)} "
        f"({runs} run{'s' if runs != 1 else ''}). Of {m.total:,} records, {f.done:,} received a "
        f"decision, {f.record_errors + f.other_errors:,} ended in error and {f.remaining:,} "
        f"were not finished; {f.cut:,} had an answer cut off at its token limit. The results "
        f"file (results.jsonl, SHA-256 {facts.results_sha256 or 'absent'}) "
        + (
            "verifies against the job's seals."
            if facts.verification.verified
            else "does not verify against the job's seals."
            if facts.verification.sealed
            else "predates the job's seals."
        )
    )


# ---- the document --------------------------------------------------------------------------------
def render(title: str, prose: str, sections: list[Section]) -> str:
    """The Markdown: header, title, the guideline's note, the paragraph, a table per topic."""
    out = [
        HEADER,
        f"# {title}",
        "",
        f"Items in the order of {GUIDELINE}, where they apply. Each value names the file of "
        "the job folder it comes from; **[TO COMPLETE: ...]** marks what the kit cannot know.",
        "",
        "## Paragraph",
        "",
        prose,
    ]
    for section in sections:
        out += ["", f"## {section.title}", "", "| Item | Value | Source |", "|---|---|---|"]
        out += [
            f"| {_cell(x.item)} | {_cell(x.value)} | {_cell(x.source)} |" for x in section.facts
        ]
    return "\n".join(out) + "\n"


def _row(fact: Fact) -> str:
    return f"| {_cell(fact.item)} | {_cell(fact.value)} | {_cell(fact.source)} |"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_methods(path: Path, text: str) -> Path:
    """Write methods.md (0600, atomic); a file there the kit did not write is refused."""
    if path.exists():
        try:
            first = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        except OSError:
            first = ""
        if first != HEADER:
            raise UserError(
                f"{path} exists and was not written by sparkops (its first line is not the "
                "kit's header): move it away, or pass another file, so it is not overwritten"
            )
    write_atomic(path, text)
    return path


def job_methods(directory: Path, pipeline: Path | None = None) -> str:
    """methods.md's text for one job folder: the pipeline its folder keeps, or `--pipeline`
    for a folder from before the copy (methods/saved.py)."""
    facts = JobFacts.read(directory)
    job = methods_pipeline(directory, facts.manifest, pipeline)
    sections = job_sections(facts, job)
    spec = job.spec if job is not None else None
    return render(f"Methods: job {directory.name}", paragraph(facts, spec), sections)


def write_job_methods(directory: Path, pipeline: Path | None = None) -> Path:
    """`sparkops report DIR --methods`: DIR/methods.md, its path returned."""
    return write_methods(directory / METHODS, job_methods(directory, pipeline))


def differing(a: list[Section], b: list[Section]) -> list[tuple[str, Fact, Fact]]:
    """Rows whose value differs between two runs' sections (same section and item)."""
    out = []
    for left, right in zip(a, b, strict=False):
        theirs = {fact.item: fact for fact in right.facts}
        for fact in left.facts:
            other = theirs.get(fact.item)
            if other is not None and other.value != fact.value and not fact.todo:
                out.append((left.title, fact, other))
    return out
