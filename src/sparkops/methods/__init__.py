"""The methods section a paper can take, written from a job folder alone (issue 40 item 3).

`sparkops report DIR --methods` writes DIR/methods.md: a paragraph and a table per topic, in
the order of TRIPOD-LLM's methods items where they apply (Gallifant et al., Nat Med 2025;
31:60-69), every figure naming the file of the job folder it comes from, and a marked place
(**[TO COMPLETE: ...]**) for what the kit cannot know: the population, the data's dates and
source, the reference standard's origin. `sparkops compare --methods` adds the comparison of
two runs with its intervals and verdicts (compare/methods.py builds that section).

The facts are read through the job folder's own readers (jobdir/reader.JobFolder: manifest,
runs.jsonl, serving.jsonl, results.jsonl, the seals), never report.json's keys: facts.py
gathers them, pipeline.py adds the pipeline's (the copy the job folder keeps, or a --pipeline
file, proven to be the job's by the manifest's fingerprint: saved.py), document.py writes the
Markdown. saved.py also gives `batch run` what it saves of the pipeline and its check of the
saved copy at every run.

Its own layer, between the readers (report, compare) and the pipeline and the job folder, so
both readers can write it (pyproject's import contracts).
"""
