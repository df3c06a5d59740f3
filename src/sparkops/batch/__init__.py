"""The batch client: engine (asyncio, pooled HTTP, retries), journal (exactly-once resume),
progress. Library entry point: `run_job(JobConfig) -> JobSummary` (synchronous)."""

from sparkops.batch.job import JobConfig, JobSummary, run_job, run_job_async

__all__ = ["JobConfig", "JobSummary", "run_job", "run_job_async"]
