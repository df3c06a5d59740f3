"""One kit job with JobConfig fields the CLI does not expose (the connection measures).

python3 kit_job.py PIPELINE INPUT OUT ENDPOINT [--recycle-every N] [--connect-gap S]
"""

import argparse
import json
from pathlib import Path

from sparkops.batch import JobConfig, run_job
from sparkops.batch.connections import CONNECT_GAP_S, RECYCLE_EVERY

ap = argparse.ArgumentParser()
ap.add_argument("pipeline", type=Path)
ap.add_argument("input", type=Path)
ap.add_argument("out", type=Path)
ap.add_argument("endpoint")
ap.add_argument("--concurrency", type=int, default=1000)
ap.add_argument("--recycle-every", type=int, default=RECYCLE_EVERY)
ap.add_argument("--connect-gap", type=float, default=CONNECT_GAP_S)
a = ap.parse_args()
s = run_job(
    JobConfig(
        input=a.input,
        out=a.out,
        endpoints=[a.endpoint],
        pipeline=a.pipeline,
        concurrency=a.concurrency,
        progress=False,
        recycle_every=a.recycle_every,
        connect_gap=a.connect_gap,
    )
)
print(json.dumps({"done": s.done, "errors": s.errors, "calls": s.calls, "elapsed_s": s.elapsed_s}))
