"""Put a hub model into the Hugging Face cache vLLM mounts, before vLLM starts.

The deploy runs this with the serving image's own python3 and huggingface_hub, in a one-off
container on the Spark with the stack's cache folder mounted at HF_HOME and the token from the
stack's root-only env file (--env-file), so vLLM itself then starts with HF_HUB_OFFLINE=1 and
never spends its health start period downloading.

    model-fetch.py check REPO [REVISION]   exit 0: complete in the cache; 3: not (offline)
    model-fetch.py fetch REPO [REVISION]   download (resumes a cut one), verify, record;
                                           4: the hub (or the proxy) does not answer
    model-fetch.py wait REPO CACHE JOBFILE SECONDS
                                           on the host: wait up to SECONDS for the deploy's
                                           async job to end, print one progress line

`fetch` first writes the total size to $HF_HOME/sparkops-models/<repo>.total (the deploy's
progress lines read it), downloads with snapshot_download (which resumes .incomplete blobs),
checks that every file of the repo is in the snapshot with the hub's size, and only then writes
$HF_HOME/sparkops-models/<repo>.json, the record `check` trusts without a network. Before any of
that it opens one TCP connection to the hub (or to the HTTPS proxy the environment names) within
CONNECT_TIMEOUT_S: a Spark that cannot reach it fails in seconds with the reason, instead of
waiting out huggingface_hub's retries.

`wait` runs with the host's own python3 (standard library only): the deploy loops over it, one
progress line a round, until the download's async job has written its result.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

INCOMPLETE = 3
UNREACHABLE = 4
CONNECT_TIMEOUT_S = 20.0


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME", "/root/.cache/huggingface"))


def slug(repo: str) -> str:
    """A repo id as huggingface_hub and the fetcher's records name it in a path."""
    return repo.replace("/", "--")


def record_dir(home: Path | None = None) -> Path:
    return (home or hf_home()) / "sparkops-models"


def record_path(repo: str, suffix: str, home: Path | None = None) -> Path:
    return record_dir(home) / (slug(repo) + suffix)


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
    # relative to HF_HOME (the cache is mounted at another path in each container)
    wrong = missing_files(hf_home() / record["snapshot"], record["files"])
    if wrong:
        print(f"{repo}: {len(wrong)} file(s) missing or cut short, e.g. {wrong[0]}")
        return INCOMPLETE
    total = sum(record["files"].values())
    print(f"{repo}: complete in the cache ({len(record['files'])} files, {total / 1e9:.1f} GB)")
    return 0


def unreachable(endpoint: str) -> str:
    """Why no TCP connection to the hub (or the HTTPS proxy in the environment) opens within
    CONNECT_TIMEOUT_S; "" when one does. Names the host only, never a proxy's credentials."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or ""
    url = urlsplit(proxy or endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    what = f"the HTTPS proxy {host}:{port}" if proxy else f"the hub at {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return ""
    except OSError as err:
        kind = err.__class__.__name__
        return f"cannot reach {what} within {CONNECT_TIMEOUT_S:.0f} s ({kind}: {err})"


def fetch(repo: str, revision: str | None) -> int:
    from huggingface_hub import HfApi, constants, snapshot_download

    why = unreachable(constants.ENDPOINT)
    if why:
        print(f"{repo}: {why}")
        return UNREACHABLE
    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    record_dir().mkdir(parents=True, exist_ok=True)
    record_path(repo, ".total").write_text(str(sum(sizes.values())))
    snapshot = Path(snapshot_download(repo, revision=info.sha))
    wrong = missing_files(snapshot, sizes)
    if wrong:
        print(f"{repo}: after the download {len(wrong)} file(s) are incomplete: {wrong[:3]}")
        return INCOMPLETE
    home = hf_home()
    where = str(snapshot.relative_to(home)) if snapshot.is_relative_to(home) else str(snapshot)
    record = {"repo": repo, "revision": info.sha, "snapshot": where, "files": sizes}
    record_path(repo, ".json").write_text(json.dumps(record, indent=1, sort_keys=True))
    print(f"{repo}: downloaded and verified ({len(sizes)} files, revision {info.sha})")
    return 0


def bytes_under(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            # a blob may be renamed from .incomplete between the listing and the stat
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


def job_ended(job_file: Path) -> bool:
    """Whether Ansible's async wrapper has written the job's final result."""
    try:
        return bool(json.loads(job_file.read_text()).get("finished", 1))
    except (FileNotFoundError, ValueError):  # not started yet, or the wrapper is writing it
        return False


def wait(repo: str, cache: Path, job_file: Path, seconds: float) -> int:
    """One round of the deploy's progress: wait up to `seconds` for the job, then one line."""
    deadline = time.monotonic() + seconds
    ended = job_ended(job_file)
    while not ended and time.monotonic() < deadline:
        time.sleep(1.0)
        ended = job_ended(job_file)
    done = bytes_under(cache / "hub" / f"models--{slug(repo)}")
    try:
        total = int(record_path(repo, ".total", cache).read_text())
    except (OSError, ValueError):
        total = 0
    of = f" of {total / 1e9:.2f} GB ({100 * done // total}%)" if total > 0 else ""
    print(f"{repo}: {done / 1e9:.2f} GB{of}{', the download ended' if ended else ''}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "wait":
        return wait(argv[1], Path(argv[2]), Path(argv[3]), float(argv[4]))
    if len(argv) not in (2, 3) or argv[0] not in ("check", "fetch"):
        print(__doc__, file=sys.stderr)
        return 2
    repo = argv[1]
    revision = argv[2] if len(argv) == 3 and argv[2] else None
    return check(repo) if argv[0] == "check" else fetch(repo, revision)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
