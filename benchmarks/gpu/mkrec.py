"""Fresh records for each GPU run: the kit's 300 sample notes, a run tag and index in front.

Distinct text per record (no prefix-cache hits across records or runs beyond the shared
system prompt), as in the seed's cold sweep.   [N=4000] python3 mkrec.py NOTES OUT_DIR TAG...
"""

import json
import os
import sys
from pathlib import Path

notes = [json.loads(line)["text"] for line in Path(sys.argv[1]).read_text().splitlines()]
for tag in sys.argv[3:]:
    with open(f"{sys.argv[2]}/recs_{tag}.jsonl", "w") as fh:
        for i in range(int(os.environ.get("N", "4000"))):
            text = f"[{tag}-{i}] " + notes[i % len(notes)]
            fh.write(json.dumps({"id": f"{tag}{i:05d}", "text": text}) + "\n")
print("records written:", " ".join(sys.argv[3:]))
