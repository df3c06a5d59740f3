"""Put a hub model into the Hugging Face cache vLLM mounts, before vLLM starts.

The deploy runs this with the serving image's own python3 and huggingface_hub, in a one-off
container on the Spark with the stack's cache folder mounted at HF_HOME and the token from the
stack's root-only env file (--env-file), so vLLM itself then starts with HF_HUB_OFFLINE=1 and
never spends its health start period downloading.

    model-fetch.py check REPO [REVISION]   exit 0: complete in the cache; 3: not (offline)
    model-fetch.py fetch REPO [REVISION]   download (resumes a cut one), verify, record

`fetch` first writes the total size to $HF_HOME/sparkops-models/<repo>.total (the deploy's
progress lines read it), downloads with snapshot_download (which resumes .incomplete blobs),
checks that every file of the repo is in the snapshot with the hub's size, and only then writes
$HF_HOME/sparkops-models/<repo>.json, the record `check` trusts without a network.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

INCOMPLETE = 3


def record_dir() -> Path:
    return Path(os.environ.get("HF_HOME", "/root/.cache/huggingface")) / "sparkops-models"


def record_path(repo: str, suffix: str) -> Path:
    return record_dir() / (repo.replace("/", "--") + suffix)


def missing_files(snapshot: Path, sizes: dict[str, int]) -> list[str]:
    """Files of the record absent from the snapshot or of another size than the hub said."""
    wrong = []
    for name, size in sorted(sizes.items()):
        path = snapshot / name
        if not path.is_file() or (size and path.stat().st_size != size):
            wrong.append(name)
    return wrong


def check(repo: str) -> int:
    try:
        record = json.loads(record_path(repo, ".json").read_text())
    except (OSError, ValueError):
        print(f"{repo}: not downloaded yet")
        return INCOMPLETE
    wrong = missing_files(Path(record["snapshot"]), record["files"])
    if wrong:
        print(f"{repo}: {len(wrong)} file(s) missing or cut short, e.g. {wrong[0]}")
        return INCOMPLETE
    total = sum(record["files"].values())
    print(f"{repo}: complete in the cache ({len(record['files'])} files, {total / 1e9:.1f} GB)")
    return 0


def fetch(repo: str, revision: str | None) -> int:
    from huggingface_hub import HfApi, snapshot_download

    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    record_dir().mkdir(parents=True, exist_ok=True)
    record_path(repo, ".total").write_text(str(sum(sizes.values())))
    snapshot = Path(snapshot_download(repo, revision=info.sha))
    wrong = missing_files(snapshot, sizes)
    if wrong:
        print(f"{repo}: after the download {len(wrong)} file(s) are incomplete: {wrong[:3]}")
        return INCOMPLETE
    record = {"repo": repo, "revision": info.sha, "snapshot": str(snapshot), "files": sizes}
    record_path(repo, ".json").write_text(json.dumps(record, indent=1, sort_keys=True))
    print(f"{repo}: downloaded and verified ({len(sizes)} files, revision {info.sha})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in ("check", "fetch"):
        print(__doc__, file=sys.stderr)
        return 2
    repo = argv[1]
    revision = argv[2] if len(argv) == 3 and argv[2] else None
    return check(repo) if argv[0] == "check" else fetch(repo, revision)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
