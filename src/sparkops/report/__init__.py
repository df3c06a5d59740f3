"""The job report: figures computed from the job directory only (so a resumed job reports
over all its runs), written as report.json, report.md and throughput.png."""
