"""sparkops_cli through provision.yml on a real systemd Debian amd64 host: the kit lands in a venv
built from the controller's checkout, a job user runs it, a second converge changes nothing
(also with the host offline), and an install cut short is redone on the next run. Then
batch.yml starts a job with the installed kit, as the job user, the API key kept off every
command line and unit property, the deploy's readable stack record passed with --stack-record.

Only the sparkops_cli tag runs (the inventory check and preflight always run with it); the other
roles have their own tests in test_provision.py.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkops.cache import cache_dir
from tests.plugins.hosts import Host, offline, run_docker
from tests.plugins.playbook import PlaybookRun, run_playbook
from tests.plugins.provision import JOB_USER, Converged, prepare, provision, write_inventory

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
VENV = "/opt/sparkops/venv"
WHEELHOUSE = "/opt/wheelhouse"
TAGS = ("--tags", "sparkops_cli")
STACK_RECORD = "/etc/sparkops/stack-record.json"  # sparkops_defaults_stack_record


def dependency_wheels() -> Path:
    """The kit's dependencies as wheels, downloaded once per dependency list into the kit's
    cache folder (a CI caches it): the download was a minute of every run."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256("\n".join([sys.version, *sorted(deps)]).encode()).hexdigest()[:16]
    wheelhouse = cache_dir() / "testbed" / f"wheelhouse-{key}"
    if not (wheelhouse / ".complete").is_file():
        partial = wheelhouse.with_name(f"{wheelhouse.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        download = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
        subprocess.run([*download, "-d", str(partial), *deps], check=True, timeout=600)
        (partial / ".complete").touch()
        shutil.rmtree(wheelhouse, ignore_errors=True)
        partial.rename(wheelhouse)
    return wheelhouse


def prepare_kit_host(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Host, Path]:
    """A fresh amd64 host ready for the sparkops_cli role, and its inventory (nothing run)."""
    host = systemd_host(arch="amd64")
    prepare(host)  # the job user; preflight reads the GPU (a stand-in: no GB10 here)
    # The host installs the dependencies from a wheel folder, as an offline Spark would: the
    # test bed's containers cannot verify the machine's TLS-inspecting proxy to reach an index.
    run_docker("cp", str(dependency_wheels()), f"{host.id}:{WHEELHOUSE}")
    # The wheel is built from a snapshot of the checkout: the role rebuilds from its source
    # folder on every run, and other work may edit the checkout between two converges.
    source = tmp_path_factory.mktemp("checkout")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    inventory = write_inventory(
        tmp_path_factory.mktemp("inventory"),
        host,
        {
            "sparkops_cli_pip_args": ["--no-index", "--find-links", WHEELHOUSE],
            "sparkops_cli_source_dir": str(source),
            # the batch API as a service (issue 42 item 4): installed and started by the same
            # converges, so check mode, the second converge and the offline one cover it too
            "sparkops_cli_batch_api": True,
        },
    )
    return host, inventory


@dataclass(frozen=True)
class Installed:
    """A host the role installed the kit on, in one converge (for other modules' tests)."""

    host: Host
    inventory: Path


@pytest.fixture(scope="module")
def kit_installed(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> Installed:
    """One converge: the check-mode run and the second converge are this module's tests, not
    every module's that needs the kit on a host (test_batch_unit.py)."""
    host, inventory = prepare_kit_host(systemd_host, tmp_path_factory)
    first = provision(inventory, *TAGS)
    assert first.rc == 0, first.output[-4000:]
    return Installed(host, inventory)


@pytest.fixture(scope="module")
def installed(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> Converged:
    host, inventory = prepare_kit_host(systemd_host, tmp_path_factory)
    check = provision(inventory, "--check", "--diff", *TAGS)
    assert check.rc == 0, check.output[-4000:]
    untouched = host.exec(f"ls -d {VENV} /usr/local/bin/sparkops 2>&1").stdout
    assert untouched.count("No such file") == 2, untouched
    first = provision(inventory, *TAGS)
    assert first.rc == 0, first.output[-4000:]
    second = provision(inventory, *TAGS)
    print(
        f"\nsparkops_cli amd64: check {check.seconds:.0f} s, first converge {first.seconds:.0f} s,"
        f" second converge {second.seconds:.0f} s"
    )
    return Converged(host, inventory, check, first, second)


def test_check_mode_on_a_fresh_host_reports_the_install(installed: Converged) -> None:
    out = installed.check.output
    assert "would install sparkops-0.1.0-py3-none-any.whl into /opt/sparkops/venv" in out
    assert "would install, enable and start sparkops-openai-batch.service" in out
    assert installed.check.changed >= 3 and installed.check.failed == 0


def test_first_converge_installs_and_the_second_changes_nothing(installed: Converged) -> None:
    assert installed.first.changed >= 5 and installed.first.failed == 0
    assert (installed.second.changed, installed.second.failed) == (0, 0), installed.second.output
    # the batch API runs as the job user, enabled, and answers OpenAI's list of batches
    shown = installed.host.exec(
        ["systemctl", "show", "-p", "ActiveState,UnitFileState,User", "sparkops-openai-batch"]
    ).stdout
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    assert props == {"ActiveState": "active", "UnitFileState": "enabled", "User": JOB_USER}


def test_a_job_user_runs_the_installed_kit(installed: Converged) -> None:
    host = installed.host
    run_docker("cp", str(REPO / "inventory" / "single"), f"{host.id}:/tmp/inv-single")
    host.exec(["chown", "-R", JOB_USER, "/tmp/inv-single"], check=True)
    result = host.exec(
        [
            "su", "-", JOB_USER, "-c",
            "cd && HF_TOKEN=hf_t sparkops render --inventory /tmp/inv-single --out stack",
        ]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    compose = host.testinfra.file(f"/home/{JOB_USER}/stack/spark-1/compose.yml")
    assert compose.exists and "vllm" in compose.content_string
    assert host.testinfra.file(f"/home/{JOB_USER}/stack/spark-1/serving.env").mode == 0o600
    where = host.exec(["su", "-", JOB_USER, "-c", "readlink -f $(command -v sparkops)"])
    assert where.stdout.strip() == f"{VENV}/bin/sparkops"
    # The code comes from the venv, not from any checkout.
    module = host.exec([f"{VENV}/bin/python", "-c", "import sparkops; print(sparkops.__file__)"])
    assert module.stdout.startswith(f"{VENV}/lib/")


def test_a_converged_host_reconverges_offline(installed: Converged) -> None:
    with offline(installed.host):
        again = provision(installed.inventory, *TAGS)
    assert again.rc == 0, again.output[-4000:]
    assert (again.changed, again.failed) == (0, 0), again.output[-4000:]


def test_an_install_cut_short_is_redone(installed: Converged) -> None:
    host = installed.host
    host.exec(["rm", f"{VENV}/sparkops-wheel.sha1"], check=True)
    host.exec([f"{VENV}/bin/python", "-m", "pip", "uninstall", "-y", "-q", "sparkops"], check=True)
    again = provision(installed.inventory, *TAGS)
    assert again.rc == 0, again.output[-4000:]
    assert again.changed >= 2
    assert host.exec([f"{VENV}/bin/sparkops", "--help"]).returncode == 0


def run_batch_playbook(installed: Converged, extra: dict) -> PlaybookRun:
    """ansible/playbooks/batch.yml against the test host, as a user runs it."""
    return run_playbook("batch.yml", installed.inventory, extra_vars=extra, timeout=600)


def _main_pid(host: Host, unit: str) -> str:
    return host.exec(["systemctl", "show", "-p", "MainPID", "--value", unit]).stdout.strip()


SILENT_ENDPOINT = """
import http.server, json, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
        else:
            self.send_error(404)
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        held = body.get("structured_outputs") or {}
        probe = body.get("messages") == [{"role": "user", "content": "Say hello."}]
        if self.path.endswith("/completions") and (body.get("max_tokens") == 1 or probe):
            # the check request (the job unit's wait for serving, the client's own check), and
            # the structured-output probe, answered held (else 3 tries of 120 s each)
            said = held["choice"][0] if "choice" in held else json.dumps({"fruit": "kumquat"})
            answer = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                 "content": "OK" if not probe else said},
                                 "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        if self.path.endswith("/completions"):
            time.sleep(900)
        self.send_error(404)
http.server.ThreadingHTTPServer(("127.0.0.1", 18000), Handler).serve_forever()
"""


def test_batch_yml_runs_the_installed_kit_as_the_job_user_with_the_key_kept_private(
    installed: Converged,
) -> None:
    host = installed.host
    # An endpoint that serves the sample's model and answers the check request but never a
    # record's completion keeps the job running long enough to look at it.
    host.exec(
        ["systemd-run", "--unit=silent-endpoint", "python3", "-c", SILENT_ENDPOINT], check=True
    )
    samples = f"{VENV}/lib/python3.11/site-packages/sparkops/samples"
    secret = "sk-never-on-a-command-line"
    extra = {
        "sparkops_batch_name": "probe",
        "sparkops_batch_pipeline": f"{samples}/stroke-triage.yaml",
        "sparkops_batch_input": f"{samples}/triage_notes.jsonl",
        "sparkops_batch_out": f"/home/{JOB_USER}/job-out",
        "sparkops_batch_endpoints": ["http://127.0.0.1:18000"],
        "sparkops_batch_api_key": secret,
        "sparkops_batch_concurrency": 4,
    }
    unit = "sparkops-batch-probe.service"
    # The readable stack record a kit deploy leaves (role vllm_serving; its own test is in
    # test_deploy_converge.py): batch.yml hands it to the job.
    _install_record(host, "0644")
    try:
        started = run_batch_playbook(installed, extra)
        assert started.rc == 0, started.stdout[-4000:] + started.stderr[-2000:]
        assert secret not in started.stdout + started.stderr
        pid = "0"
        deadline = time.monotonic() + 120
        while pid == "0" and time.monotonic() < deadline:
            pid = _main_pid(host, unit)
            time.sleep(1)
        assert pid != "0", host.exec(["journalctl", "-u", unit, "--no-pager"]).stdout[-3000:]
        owner = host.exec(["stat", "-c", "%U", f"/proc/{pid}"]).stdout.strip()
        assert owner == JOB_USER
        argv = host.exec(["cat", f"/proc/{pid}/cmdline"]).stdout.split("\0")
        assert argv[0].startswith(f"{VENV}/bin/python") and argv[1:4] == [
            f"{VENV}/bin/sparkops",
            "batch",
            "run",
        ], argv
        assert "--api-key-env" in argv and secret not in argv
        assert argv[argv.index("--stack-record") + 1] == STACK_RECORD, argv
        environ = host.exec(["cat", f"/proc/{pid}/environ"]).stdout.split("\0")
        assert f"SPARKOPS_API_KEY={secret}" in environ
        # The unit's properties (readable by every user over D-Bus) do not hold the key.
        shown = host.exec(["systemctl", "show", unit]).stdout
        assert secret not in shown and "EnvironmentFiles=/etc/sparkops/batch/probe.env" in shown
        key_file = host.testinfra.file("/etc/sparkops/batch/probe.env")
        assert (key_file.user, key_file.mode) == ("root", 0o600)
        out = host.testinfra.file(f"/home/{JOB_USER}/job-out")
        assert (out.user, out.mode) == (JOB_USER, 0o700)
        # A second run while the job runs leaves it alone.
        again = run_batch_playbook(installed, extra)
        assert again.rc == 0 and again.changed_on(host.name) == 0, again.stdout[-3000:]
        assert _main_pid(host, unit) == pid
        # Stopped (SIGTERM: the client exits 143, a deliberate stop: the unit is left inactive,
        # not restarted), the same line starts it again: the job resumes under its name.
        host.exec(["systemctl", "stop", unit])
        resumed = run_batch_playbook(installed, extra)
        assert resumed.rc == 0, resumed.stdout[-3000:]
        new_pid = "0"
        deadline = time.monotonic() + 120
        while new_pid in ("0", pid) and time.monotonic() < deadline:
            new_pid = _main_pid(host, unit)
            time.sleep(1)
        assert new_pid not in ("0", pid)
    finally:
        host.exec(["systemctl", "stop", unit, "silent-endpoint.service"])
        host.exec(["systemctl", "reset-failed", unit])


def _install_record(host: Host, mode: str) -> None:
    record = '{"profile": "cpu-tiny", "command": ["vllm", "serve"]}'
    host.exec(["mkdir", "-p", "/etc/sparkops"], check=True)
    host.exec(["tee", STACK_RECORD], input=record, check=True)
    host.exec(["chmod", mode, STACK_RECORD], check=True)


def test_batch_yml_stops_when_the_job_user_cannot_read_the_stack_record(
    installed: Converged,
) -> None:
    samples = f"{VENV}/lib/python3.11/site-packages/sparkops/samples"
    extra = {
        "sparkops_batch_name": "unreadable-record",
        "sparkops_batch_pipeline": f"{samples}/stroke-triage.yaml",
        "sparkops_batch_input": f"{samples}/triage_notes.jsonl",
        "sparkops_batch_out": f"/home/{JOB_USER}/job-out-2",
    }
    _install_record(installed.host, "0600")
    try:
        stopped = run_batch_playbook(installed, extra)
    finally:
        installed.host.exec(["chmod", "0644", STACK_RECORD])
    assert stopped.rc != 0
    assert f"{STACK_RECORD} does not exist on" in stopped.stdout
    assert f"{JOB_USER} cannot read it" in stopped.stdout
    assert "Traceback" not in stopped.stdout + stopped.stderr
    shown = installed.host.exec(["systemctl", "status", "sparkops-batch-unreadable-record"])
    assert shown.returncode != 0  # no job was started


def test_batch_yml_refuses_root_and_a_missing_job_user(installed: Converged) -> None:
    base = {
        "sparkops_batch_pipeline": "/p.yaml",
        "sparkops_batch_input": "/r.jsonl",
        "sparkops_batch_out": "/o",
    }
    root = run_batch_playbook(installed, {**base, "sparkops_batch_user": "root"})
    assert root.rc != 0 and "never root" in root.stdout
    ghost = run_batch_playbook(installed, {**base, "sparkops_batch_user": "nobody-here"})
    assert ghost.rc != 0 and "'nobody-here' does not exist" in ghost.stdout
    unreadable = run_batch_playbook(installed, base)
    assert unreadable.rc != 0 and f"{JOB_USER} cannot read it" in unreadable.stdout


def test_a_venv_without_pip_is_rebuilt_and_one_that_cannot_be_made_says_why(
    installed: Converged,
) -> None:
    """Issue 24 item 14: a venv cut short (no pip) is detected and rebuilt; a venv that cannot
    be created (a full filesystem) stops with venv's reason and leaves nothing half-made; a
    noexec filesystem is refused before anything is created there."""
    host = installed.host
    host.exec(f"rm -rf {VENV}/lib/python3*/site-packages/pip", check=True)
    repaired = provision(installed.inventory, *TAGS)
    assert repaired.rc == 0, repaired.output[-4000:]
    assert f"{VENV} is unusable" in repaired.text and "No module named 'pip'" in repaired.text
    assert host.exec([f"{VENV}/bin/sparkops", "--help"]).returncode == 0

    host.exec("mkdir -p /mnt/full /mnt/noexec", check=True)
    host.exec("mount -t tmpfs -o size=256k tmpfs /mnt/full", check=True)
    host.exec("mount -t tmpfs -o noexec tmpfs /mnt/noexec", check=True)
    try:
        full = provision(installed.inventory, *TAGS, "-e", "sparkops_cli_venv=/mnt/full/venv")
        assert full.rc != 0
        assert "-m venv /mnt/full/venv` failed on" in full.text
        assert "/mnt/full/venv is full (0 MiB free before the venv was made" in full.text
        # venv's own last line ends with a full stop ("... returned non-zero exit status 1."):
        # the sentence keeps one (issue 34 item 9, "status 1..")
        start = full.text.index("-m venv /mnt/full/venv` failed on")
        said = full.text[start : full.text.index("The half-made venv was removed", start)]
        assert re.search(r"[^.]\.\.(?!\.)", said) is None, said
        assert host.exec("test -e /mnt/full/venv").returncode != 0  # nothing half-made left
        # A folder inside the noexec filesystem: the fix remounts its mount point, not the
        # folder (issue 34 item 9).
        host.exec("mkdir -p /mnt/noexec/sub", check=True)
        noexec = provision(installed.inventory, *TAGS, "-e", "sparkops_cli_venv=/mnt/noexec/sub/v")
        assert noexec.rc != 0
        assert (
            "/mnt/noexec/sub/v is on a filesystem mounted noexec (/mnt/noexec/sub is, on the"
            " filesystem mounted at /mnt/noexec)" in noexec.text
        )
        assert "`mount -o remount,exec /mnt/noexec`" in noexec.text
        assert host.exec("test -e /mnt/noexec/sub/v").returncode != 0
        assert "Traceback" not in full.output + noexec.output
    finally:
        host.exec("umount /mnt/full /mnt/noexec")


def test_a_file_at_the_link_path_is_named_with_what_to_do(installed: Converged) -> None:
    """Issue 24 item 23: another file at /usr/local/bin/sparkops is left alone, and the run
    says what is there and what to do, instead of Ansible's "refusing to convert"."""
    host = installed.host
    host.exec(
        "rm /usr/local/bin/sparkops && echo '#!/bin/sh' > /usr/local/bin/sparkops", check=True
    )
    try:
        run = provision(installed.inventory, *TAGS)
        assert run.rc != 0
        assert "/usr/local/bin/sparkops on" in run.text
        assert "is already a file of 10 bytes, owned by root" in run.text
        assert "mv /usr/local/bin/sparkops /usr/local/bin/sparkops.old" in run.text
        assert "refusing to convert" not in run.output and "Traceback" not in run.output
        assert host.exec("cat /usr/local/bin/sparkops").stdout == "#!/bin/sh\n"  # untouched
    finally:
        host.exec(
            f"rm -f /usr/local/bin/sparkops && ln -s {VENV}/bin/sparkops /usr/local/bin/sparkops"
        )


def test_batch_yml_fails_with_the_job_s_own_message_when_the_job_dies_at_start(
    installed: Converged,
) -> None:
    """Issue 31 item 4: a pipeline copied without the prompt files it names made a job that
    exited 2 in its first second while batch.yml ended green; only journalctl said why."""
    host = installed.host
    samples = f"{VENV}/lib/python3.11/site-packages/sparkops/samples"
    job = f"/home/{JOB_USER}/lonely-job"
    host.exec(["runuser", "-u", JOB_USER, "--", "mkdir", "-p", job], check=True)
    host.exec(["cp", f"{samples}/stroke-triage.yaml", f"{job}/pipeline.yaml"], check=True)
    host.exec(["chown", "-R", JOB_USER, job], check=True)
    # A serving stack that answers: the job's unit waits for one before the client starts.
    host.exec(
        ["systemd-run", "--unit=silent-endpoint-2", "python3", "-c", SILENT_ENDPOINT], check=True
    )
    extra = {
        "sparkops_batch_name": "no-prompts",
        "sparkops_batch_pipeline": f"{job}/pipeline.yaml",
        "sparkops_batch_input": f"{samples}/triage_notes.jsonl",
        "sparkops_batch_out": f"{job}/out",
        "sparkops_batch_endpoints": ["http://127.0.0.1:18000"],
    }
    try:
        died = run_batch_playbook(installed, extra)
    finally:
        host.exec(["systemctl", "stop", "silent-endpoint-2.service"])
        host.exec(["systemctl", "reset-failed", "sparkops-batch-no-prompts.service"])
    text = " ".join(died.stdout.split())
    assert died.rc != 0, died.stdout[-3000:]
    assert "The job no-prompts stopped before it started on" in text, died.stdout[-3000:]
    assert f"names a prompt file, but {job}/prompts/screen.txt was not found" in text
    assert "run batch.yml again with the same sparkops_batch_name: it resumes" in text
    assert "Traceback" not in died.stdout + died.stderr
