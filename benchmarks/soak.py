"""A job left alone through faults: the soak of issue 39 item 5.

A batch job runs as the kit's installed unit (provision.yml's sparkops_cli, then batch.yml) on a
systemd test host, against a real vLLM-CPU server that deploy.yml started on this machine (the
rendered compose project, `restart: unless-stopped`). Faults come while nobody touches it:

    reboot             the host container is killed and started again (a power cycle: systemd
                       boots anew, no unit stops cleanly)
    vllm_killed        vLLM's main process gets SIGKILL (Docker's restart policy brings it back)
    serving_restarted  `docker restart` of the serving container
    job_killed         the job's client gets SIGKILL (its unit's restart policy brings it back)
    disk_full          the job folder's filesystem is filled for a minute
    unreachable        the host loses its network for a minute (the server is unreachable)

A clock step is not among them: the test hosts share this machine's kernel clock, and stepping
it would step the machine's (tests/unit/test_report.py steps the job's clock instead).

The job must finish by itself with every record exactly once, each with its true status (the
faults are the server's or the host's, never a record's: every record `done`). The script
prints, and writes as JSON, per fault how long the job made no progress.

    python benchmarks/soak.py --records 50000 --minutes 60          # the soak (an hour or more)
    python benchmarks/soak.py --records 600 --faults job_killed,reboot,vllm_killed   # short

With --faults the faults come in that order when the job reaches equal shares of its records
(bounded by counts, not time: tests/infra/test_soak.py runs it so in `make test`); otherwise one
at random every --every-s seconds (a range) until --minutes have passed. Run as root on the
test bed (`make testbed`): the job folder is a loop-mounted ext4 image, so disk_full fills it
and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test bed's helpers: tests/plugins

from sparkops.local.model import ensure_tiny_model  # noqa: E402
from sparkops.local.server import free_ports  # noqa: E402
from tests.infra.test_sparkops_cli_role import WHEELHOUSE, dependency_wheels  # noqa: E402
from tests.plugins.hosts import (  # noqa: E402
    READY_STATES,
    Host,
    build_vllm_cpu_runtime_image,
    run_docker,
    start_host,
)
from tests.plugins.inventories import local_serving_inventory  # noqa: E402
from tests.plugins.playbook import run_playbook  # noqa: E402
from tests.plugins.provision import JOB_USER, prepare, provision, write_inventory  # noqa: E402
from tests.plugins.vllm_server import mounted_venv_vars  # noqa: E402

KINDS = ("reboot", "vllm_killed", "serving_restarted", "job_killed", "disk_full", "unreachable")
NAME = "soak"
UNIT = f"sparkops-batch-{NAME}.service"
VENV = "/opt/sparkops/venv"
JOB_FS = "/srv/soak"  # the job's own filesystem on the host (the loop-mounted image)
OUT = f"{JOB_FS}/out"
PIPELINE = """\
name: soak
model: tiny
steps:
  - name: screen
    user: "Note: {{text}}\\nUrgent? Answer yes or no:"
    max_tokens: 4
    temperature: 0
    parse: {{choices: ["yes", "no"], default: unclear}}
  - name: summary
    user: "Note: {{text}}\\nSummarise it in one sentence:"
    constrain: false
    max_tokens: {free_tokens}
    temperature: 0
    parse: {{choices: ["urgent", "routine"], default: unclear}}
"""
OUTAGE_S = 60.0  # disk_full and unreachable last this long
POLL_S = 5.0


@dataclass
class Fault:
    """One fault: when it came (seconds since the job started), the records done then, and
    when the job made progress again after the fault had ended (None: not yet)."""

    kind: str
    at_s: float
    done_at_fault: int
    ended_s: float | None = None
    done_after_end: int = 0
    resumed_s: float | None = None

    @property
    def stopped_s(self) -> float | None:
        """How long the job made no progress: from the fault to its first record after."""
        return None if self.resumed_s is None else self.resumed_s - self.at_s


@dataclass
class Soak:
    """What the soak saw: the faults, progress samples, and the checks of the end."""

    records: int
    started: float = field(default_factory=time.time)
    faults: list[Fault] = field(default_factory=list)
    progress: list[tuple[float, int]] = field(default_factory=list)
    finished_s: float | None = None
    ids_once: bool | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    restarts: int | None = None
    runs: int | None = None
    problems: list[str] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.time() - self.started


# ---- the serving stack: deploy.yml on this machine -----------------------------------------
@dataclass
class Serving:
    inventory: Path
    stack: Path
    url: str
    key: str

    def container(self) -> str:
        ps = run_docker("compose", "--project-directory", str(self.stack), "ps", "-aq", "vllm")
        return ps.stdout.strip()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False


def bridge_gateway() -> str:
    """The address this machine has on Docker's default bridge: the test host reaches the
    serving stack's published port there. A freshly started engine may leave the gateway out
    of the network's IPAM config (Docker 20.10 before the first restart), so the bridge
    interface's own address is the fallback."""
    fmt = (
        "{{range .IPAM.Config}}{{.Gateway}}{{end}} "
        '{{index .Options "com.docker.network.bridge.name"}}'
    )
    gateway, _, interface = run_docker("network", "inspect", "bridge", "-f", fmt).stdout.partition(
        " "
    )
    if gateway.strip():
        return gateway.strip()
    shown = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "dev", interface.strip() or "docker0"],
        capture_output=True,
        text=True,
        check=False,
    )
    addresses = [a["local"] for link in json.loads(shown.stdout or "[]") for a in link["addr_info"]]
    if not addresses:
        raise SystemExit("soak: Docker's default bridge has no gateway address")
    return addresses[0]


def deploy_serving(work: Path) -> Serving:
    """The cpu-tiny stack through deploy.yml (as test_deploy_converge.py runs it), published on
    the bridge's address so the test host can reach it."""
    port, key, gateway = free_ports(1), f"sk-soak-{secrets.token_hex(12)}", bridge_gateway()
    inventory = local_serving_inventory(
        work / "serving-inventory",
        vllm_serving_image=build_vllm_cpu_runtime_image(),
        vllm_serving_model_dir=str(ensure_tiny_model()),
        vllm_serving_port=port,
        vllm_serving_bind_address=gateway,
        vllm_serving_project=f"sparkops-soak-{secrets.token_hex(4)}",
        vllm_serving_stack_dir=str(work / "stack"),
        vllm_serving_stack_record=str(work / "etc" / "stack-record.json"),
        vllm_serving_api_key=key,
        vllm_serving_hf_cache=str(work / "hf-cache"),
        **mounted_venv_vars(),
        vllm_serving_ready_timeout=900,
    )
    run = run_playbook(
        "deploy.yml", inventory, "-e", "ansible_become=false",
        inherit_env=False, cwd=REPO / "ansible", timeout=1500,
    )  # fmt: skip
    if run.rc != 0:
        raise SystemExit(f"soak: deploy.yml failed:\n{run.stdout[-3000:]}")
    return Serving(inventory, work / "stack", f"http://{gateway}:{port}", key)


# ---- the job's host: a systemd test host with the kit installed -----------------------------
@contextmanager
def job_filesystem(work: Path, size_mib: int, own: bool) -> Iterator[Path]:
    """The folder that becomes the host's JOB_FS. With `own` (disk_full is among the faults),
    an ext4 image loop-mounted here: disk_full fills it and nothing else (no reserved blocks:
    the job user meets the same full disk root does); else a plain folder (no loop device
    needed)."""
    image, mount = work / "jobfs.img", work / "jobfs"
    mount.mkdir()
    if not own:
        yield mount
        return
    subprocess.run(["truncate", "-s", f"{size_mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def install_kit(work: Path, host: Host) -> Path:
    """The kit on the soak's host (started by the caller, which removes it however this ends:
    started here, a failed install left it running)."""
    prepare(host)
    run_docker("cp", str(dependency_wheels()), f"{host.id}:{WHEELHOUSE}")
    inventory = write_inventory(
        work / "host-inventory",
        host,
        {
            "sparkops_cli_pip_args": ["--no-index", "--find-links", WHEELHOUSE],
            "sparkops_cli_source_dir": str(REPO),
        },
    )
    run = provision(inventory, "--tags", "sparkops_cli")
    if run.rc != 0:
        raise SystemExit(f"soak: provision.yml failed:\n{run.output[-3000:]}")
    host.exec(["chown", JOB_USER, JOB_FS], check=True)
    return inventory


def write_job(mount: Path, count: int, free_tokens: int = 48) -> list[str]:
    """The job's pipeline and `count` short records, each with its own id, readable by the job
    user. A constrained step, then a free one of `free_tokens` (fewer make a record quicker:
    16 let the short soak's 600 records at 2 in flight still take tens of seconds between
    its faults, well over the 5 s between looks; the cpu-tiny profile's 2,048-token context
    holds it, the sample pipeline's does not)."""
    (mount / "pipeline.yaml").write_text(PIPELINE.format(free_tokens=free_tokens))
    ids = [f"soak-{i:06d}" for i in range(count)]
    with (mount / "records.jsonl").open("w") as fh:
        for i, rid in enumerate(ids):
            fh.write(json.dumps({"id": rid, "text": f"triage note {i % 300}: headache"}) + "\n")
    for name in ("pipeline.yaml", "records.jsonl"):
        os.chmod(mount / name, 0o644)
    return ids


def start_job(
    inventory: Path, serving: Serving, concurrency: int, restart_delay_s: float | None
) -> None:
    """batch.yml, as a user starts a job: the kit's defaults but the delay before a restart
    when one is given (the short soak's, so that its job kill costs seconds, not a minute)."""
    extra: dict[str, Any] = {
        "sparkops_batch_name": NAME,
        "sparkops_batch_pipeline": f"{JOB_FS}/pipeline.yaml",
        "sparkops_batch_input": f"{JOB_FS}/records.jsonl",
        "sparkops_batch_out": OUT,
        "sparkops_batch_endpoints": [serving.url],
        "sparkops_batch_api_key": serving.key,
        "sparkops_batch_concurrency": concurrency,
        "sparkops_batch_stack_record": "",  # the stack was deployed elsewhere (this machine)
    }
    if restart_delay_s is not None:
        extra["sparkops_batch_restart_delay_s"] = restart_delay_s
    run = run_playbook("batch.yml", inventory, extra_vars=extra, timeout=900)
    if run.rc != 0:
        raise SystemExit(f"soak: batch.yml failed:\n{run.stdout[-3000:]}")


def on_host(host: Host, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A command on the host, bounded (the host may be rebooting)."""
    return run_docker("exec", host.id, *argv, check=False, timeout=timeout)


def job_status(host: Host) -> dict[str, Any] | None:
    """`sparkops batch status --json` on the host; None while it cannot say (a reboot)."""
    try:
        run = on_host(host, f"{VENV}/bin/sparkops", "batch", "status", OUT, "--json")
    except (subprocess.SubprocessError, OSError):
        return None
    if run.returncode != 0:
        return None
    try:
        return dict(json.loads(run.stdout))
    except ValueError:
        return None


def unit_state(host: Host) -> dict[str, str]:
    props = "ActiveState,SubState,NRestarts"
    try:
        out = on_host(host, "systemctl", "show", f"--property={props}", UNIT).stdout
    except (subprocess.SubprocessError, OSError):
        return {}
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# ---- the faults --------------------------------------------------------------------------------
def wait_booted(host: Host, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(subprocess.SubprocessError, OSError):
            if host.system_state() in READY_STATES:
                return
        time.sleep(1)
    raise SystemExit(f"soak: {host.name} did not boot again within {timeout:.0f} s")


def inject(kind: str, host: Host, serving: Serving) -> None:
    """Bring one fault about and, for the outages, end it after OUTAGE_S."""
    if kind == "reboot":
        run_docker("kill", host.id)
        run_docker("start", host.id)
        wait_booted(host)
    elif kind == "vllm_killed":
        pid = run_docker("inspect", "-f", "{{.State.Pid}}", serving.container()).stdout.strip()
        if pid and pid != "0":
            os.kill(int(pid), signal.SIGKILL)  # an exit, not a `docker stop`: it restarts
    elif kind == "serving_restarted":
        run_docker("restart", serving.container(), timeout=300)
    elif kind == "job_killed":
        host.exec(["systemctl", "kill", "--signal=KILL", "--kill-whom=main", UNIT])
    elif kind == "disk_full":
        host.exec(f"fallocate -l $(df --output=avail -B1 {JOB_FS} | tail -1) {JOB_FS}/filler")
        time.sleep(OUTAGE_S)
        host.exec(["rm", "-f", f"{JOB_FS}/filler"], check=True)
    elif kind == "unreachable":
        run_docker("network", "disconnect", "bridge", host.id)
        time.sleep(OUTAGE_S)
        run_docker("network", "connect", "bridge", host.id)
    else:
        raise ValueError(kind)


# ---- the run -----------------------------------------------------------------------------------
def stopped(host: Host) -> bool:
    """Whether the job's unit has stopped (with a complete folder: the job has finished)."""
    return unit_state(host).get("ActiveState") in ("inactive", "failed")


def drive(
    soak: Soak,
    host: Host,
    serving: Serving,
    next_fault: Callable[[Soak, int], str | None],
    deadline_s: float,
) -> None:
    """Watch the job, bring each fault when `next_fault` names one, note when the job made
    progress again, until the job has finished (or the deadline: then a problem)."""
    open_fault: Fault | None = None
    last_done = 0
    while soak.elapsed() < deadline_s:
        status = job_status(host)
        done = int(status.get("done", 0)) if status else last_done
        soak.progress.append((round(soak.elapsed(), 1), done))
        if open_fault and open_fault.ended_s is not None and done > open_fault.done_after_end:
            open_fault.resumed_s = soak.elapsed()
            open_fault = None
        if status and status.get("complete") and stopped(host):
            soak.finished_s = soak.elapsed()
            return
        kind = None if open_fault else next_fault(soak, done)
        if kind:
            open_fault = Fault(kind, soak.elapsed(), done)
            soak.faults.append(open_fault)
            print(f"soak: {soak.elapsed():7.0f} s  {done:>7} done  fault: {kind}", flush=True)
            inject(kind, host, serving)
            open_fault.ended_s = soak.elapsed()
            after = job_status(host)
            open_fault.done_after_end = int(after.get("done", done)) if after else done
        last_done = done
        time.sleep(POLL_S)
    soak.problems.append(f"the job had not finished after {deadline_s:.0f} s")


def by_counts(kinds: list[str], total: int) -> Callable[[Soak, int], str | None]:
    """The short soak: fault i when the job has done (i + 1) / (len + 1) of its records."""

    def choose(soak: Soak, done: int) -> str | None:
        i = len(soak.faults)
        if i < len(kinds) and done >= (i + 1) * total // (len(kinds) + 1):
            return kinds[i]
        return None

    return choose


def at_random(
    kinds: list[str], every_s: tuple[float, float], minutes: float, total: int, seed: int
) -> Callable[[Soak, int], str | None]:
    """The soak: one fault of a random kind every `every_s` seconds (a random gap in that
    range), until `minutes` have passed or the job is nearly done (it must finish alone)."""
    rng = random.Random(seed)
    due = [rng.uniform(*every_s)]

    def choose(soak: Soak, done: int) -> str | None:
        now = soak.elapsed()
        if now < due[0] or now > minutes * 60 or done >= total * 0.98:
            return None
        due[0] = now + rng.uniform(*every_s)
        return rng.choice(kinds)

    return choose


def check_end(soak: Soak, host: Host, ids: list[str]) -> None:
    """Every record exactly once, each `done` (no fault was a record's)."""
    text = host.exec(["cat", f"{OUT}/results.jsonl"]).stdout
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    seen = Counter(str(line.get("id")) for line in lines)
    soak.ids_once = seen == Counter(ids)
    soak.statuses = dict(Counter(str(line.get("status")) for line in lines))
    if not soak.ids_once:
        missing = len(set(ids) - set(seen))
        twice = sum(1 for n in seen.values() if n > 1)
        extra = len(set(seen) - set(ids))
        soak.problems.append(f"ids: {missing} missing, {twice} twice, {extra} not in the input")
    if soak.statuses != {"done": len(ids)}:
        soak.problems.append(f"statuses {soak.statuses}, expected every record done")
    status = job_status(host) or {}
    soak.runs = status.get("runs")
    restarts = unit_state(host).get("NRestarts")
    soak.restarts = int(restarts) if restarts and restarts.isdigit() else None


def summary(soak: Soak) -> str:
    rows = [
        "| # | fault | at (s) | done then | job stopped (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, fault in enumerate(soak.faults, 1):
        stopped = "not resumed" if fault.stopped_s is None else f"{fault.stopped_s:.0f}"
        rows.append(
            f"| {i} | {fault.kind} | {fault.at_s:.0f} | {fault.done_at_fault} | {stopped} |"
        )
    took = "did not finish" if soak.finished_s is None else f"{soak.finished_s / 60:.1f} min"
    rate = "" if not soak.finished_s else f", {soak.records / soak.finished_s * 60:.0f} records/min"
    rows.append("")
    rows.append(
        f"{soak.records} records, {len(soak.faults)} faults, finished in {took}{rate}; "
        f"every id once: {soak.ids_once}; statuses {soak.statuses}; runs {soak.runs}"
    )
    rows += [f"PROBLEM: {p}" for p in soak.problems]
    return "\n".join(rows)


def run(args: argparse.Namespace) -> Soak:
    soak = Soak(records=args.records)
    with tempfile.TemporaryDirectory(prefix="sparkops-soak-", dir=args.work) as tmp:
        work = Path(tmp)
        host: Host | None = None
        serving: Serving | None = None
        try:
            serving = deploy_serving(work)
            kinds = args.faults or args.kinds
            with job_filesystem(work, args.fs_mib, "disk_full" in kinds) as mount:
                try:
                    host = start_host("amd64", False, extra_flags=[f"--volume={mount}:{JOB_FS}"])
                    inventory = install_kit(work, host)
                    ids = write_job(mount, args.records, args.free_tokens)
                    soak.started = time.time()
                    start_job(inventory, serving, args.concurrency, args.restart_delay_s)
                    if args.faults:
                        chooser = by_counts(args.faults, args.records)
                    else:
                        every = (args.every_s[0], args.every_s[1])
                        chooser = at_random(
                            args.kinds, every, args.minutes, args.records, args.seed
                        )
                    drive(soak, host, serving, chooser, args.deadline_minutes * 60)
                    check_end(soak, host, ids)
                finally:
                    if host is not None:
                        run_docker("rm", "--force", "--volumes", host.id, check=False)
        finally:
            if serving is not None:
                down = ["compose", "--project-directory", str(serving.stack), "down", "-v"]
                run_docker(*down, check=False, timeout=300)
    return soak


def kinds_arg(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"faults are some of {', '.join(KINDS)}")
    return kinds


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(f"soak: stopped by signal {signum}; removing the host and the stack")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--minutes", type=float, default=60.0, help="faults come this long")
    parser.add_argument("--every-s", type=float, nargs=2, default=(120.0, 360.0))
    parser.add_argument("--kinds", type=kinds_arg, default=list(KINDS))
    parser.add_argument("--faults", type=kinds_arg, help="these, in order, by counts")
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--free-tokens", type=int, default=48, help="the free step's max_tokens")
    parser.add_argument("--fs-mib", type=int, default=1024)
    parser.add_argument("--restart-delay-s", type=float, help="the job unit's (kit: 60 s)")
    parser.add_argument("--deadline-minutes", type=float, default=240.0)
    parser.add_argument("--work", default=None, help="where the temporary folder goes")
    parser.add_argument("--report", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    # Stopped early (SIGTERM, or SIGINT where a shell started it in the background with SIGINT
    # ignored), it still removes its host, its serving stack and its loop mount.
    before = {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        soak = run(args)
    finally:  # a caller's own handlers back (tests/infra/test_soak.py runs it in pytest)
        for signum, handler in before.items():
            signal.signal(signum, handler)
    print(summary(soak))
    if args.report:
        body = asdict(soak) | {"stopped_s": [f.stopped_s for f in soak.faults]}
        args.report.write_text(json.dumps(body, indent=2) + "\n")
    return 0 if not soak.problems else 1


if __name__ == "__main__":
    sys.exit(main())
