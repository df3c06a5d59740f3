"""The job folder as its own layer: layout and lock (folder), line formats (lines, and the
serving lines in serving_lines; their lenient field readers in fields), durable writes
(durable), the results journal (journal), `batch status` (status), what served a job
(identity), OpenAI batch output lines (openai_lines), report.json as a typed record
(job_report.JobReport), the saved copy of the job's pipeline (pipeline_copy), each run's seal
and its check (digest, verification), one run's handle (run.JobRun) and the readers' handle
(reader.JobFolder: every file's path and reader, so no reader joins a path itself).

Below the client (batch/) and the readers (report/, compare/, bench/): it imports neither,
so a reader of a job folder never loads the client (the import contracts in pyproject.toml
say so, and `make lint` checks them).
"""
