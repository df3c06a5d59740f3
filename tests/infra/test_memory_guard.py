"""The whole-host memory guard on a systemd test host (tests/plugins/hosts.py).

Only what no test host has comes from fixtures (tests/fixtures/memory): a DGX Spark's and an
RTX Spark's /proc/meminfo (the role reads vllm_serving_memory_meminfo_path) and the two
nvidia-smi queries the deploy makes. Everything else is real: the vllm_serving role's
memory_guard.yml through ansible-playbook (refusal, check mode, a second run that changes
nothing), and the rendered memory-guard.sh as ExecStartPre of the rendered unit under the
host's own systemd, whose journal carries the one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sparkops.plan.memory import GB, GIB, plan_memory
from sparkops.render import render_inventory
from tests.plugins.hosts import Host, inventory, run_docker
from tests.plugins.inventories import make_inventory
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = pytest.mark.infra

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
ON_HOST = "/etc/sparkops-fixture"
SMI = "/usr/local/lib/sparkops-fixture/nvidia-smi"
GUARD_PLAY = [
    {
        "name": "Run the vllm_serving role's memory guard",
        "hosts": "sparks",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Check the launch against the host's memory",
                "ansible.builtin.include_role": {
                    "name": "vllm_serving",
                    "tasks_from": "memory_guard.yml",
                },
            }
        ],
    }
]


@pytest.fixture(scope="module")
def host(systemd_host) -> Host:
    host = systemd_host("amd64")
    host.exec(f"mkdir -p {ON_HOST} {Path(SMI).parent}", check=True)
    run_docker("cp", str(FIXTURES / "nvidia-smi"), f"{host.id}:{SMI}")
    for meminfo in FIXTURES.glob("*.meminfo"):
        run_docker("cp", str(meminfo), f"{host.id}:{ON_HOST}/{meminfo.name}")
    return host


def use_gpu_fixture(host: Host, name: str) -> None:
    """Make the nvidia-smi stand-in report tests/fixtures/memory/<name>/."""
    host.exec(f"rm -f {ON_HOST}/compute-apps {ON_HOST}/gpu-memory-total", check=True)
    for path in (FIXTURES / name).iterdir():
        run_docker("cp", str(path), f"{host.id}:{ON_HOST}/{path.name}")


def run_guard(tmp_path: Path, host: Host, meminfo: str, *args: str, **extra) -> PlaybookRun:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory([host], group="sparks")))
    play = tmp_path / "guard.yml"
    play.write_text(yaml.safe_dump(GUARD_PLAY, sort_keys=False))
    extra_vars = tmp_path / "vars.json"
    extra_vars.write_text(
        json.dumps(
            {
                "vllm_serving_profile": "gb10-gemma4-12b-fp8",
                "vllm_serving_memory_meminfo_path": f"{ON_HOST}/{meminfo}",
                "vllm_serving_memory_nvidia_smi": SMI,
                **extra,
            }
        )
    )
    run = run_playbook(play, inv, "-e", f"@{extra_vars}", *args, timeout=300)
    assert "Traceback" not in run.output
    return run


# A Gemma-3-12B-shaped text config (48 layers, 8 KV heads of 256, 5 of every 6 layers sliding
# over 1,024 tokens), downloaded into the host's Hugging Face cache as vLLM would leave it.
GEMMA_CONFIG = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "hidden_size": 3840,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    },
}
SNAPSHOT = (
    "/var/lib/sparkops/hf-cache/hub/models--RedHatAI--gemma-4-12B-it-FP8-dynamic/snapshots/"
    "0123456789abcdef0123456789abcdef01234567"
)


def test_a_busy_dgx_spark_is_refused_before_any_change(host, tmp_path):
    use_gpu_fixture(host, "dgx-spark-busy")
    host.exec(
        ["sh", "-c", f"mkdir -p {SNAPSHOT} && cat > {SNAPSHOT}/config.json"],
        input=json.dumps(GEMMA_CONFIG),
        check=True,
    )
    largest = 57_640_222_720
    holds = plan_memory(
        GEMMA_CONFIG,
        kv_dtype="fp8",
        memory_gb=13.5 * GIB / GB + largest / GB,
        weights_gb=13.5 * GIB / GB,
        seqs=1024,
        context=8192,
    )
    assert holds.seqs_at_context == 132  # 8 full layers x 8,192 + 40 sliding x 1,024 tokens
    for mode in ((), ("--check",)):
        run = run_guard(
            tmp_path / ("check" if mode else "run"),
            host,
            "dgx-spark-busy.meminfo",
            *mode,
            vllm_serving_memory_host_kind="native",
        )
        assert run.rc == 2, run.output[-3000:]
        assert run.recap[host.name].failed == 1
        assert run.recap[host.name].changed == 0
        assert f"{host.name}: gb10-gemma4-12b-fp8 needs weights 14.5 GB" in run.output
        assert "other GPU processes 23.1 GB" in run.output
        assert "refused, available memory 86.1 GB" in run.output
        assert f"Fix: set vllm.kv_cache_memory_bytes to {largest} (53.7 GiB) or less" in run.output
        assert (
            f"which holds 132 sequences x 8,192 tokens "
            f"(1,024 sequences x {holds.usable_ctx_per_seq:,} tokens)" in run.output
        )
        assert "48213 VLLM::EngineCore" in run.output
    assert host.exec("test -e /opt/sparkops").returncode == 1  # nothing written
    host.exec("rm -rf /var/lib/sparkops", check=True)


def test_an_rtx_spark_under_wsl2_fits_and_a_second_run_changes_nothing(host, tmp_path):
    use_gpu_fixture(host, "rtx-spark-wsl2")
    for attempt in ("first", "second"):
        run = run_guard(
            tmp_path / attempt,
            host,
            "rtx-spark-wsl2.meminfo",
            vllm_serving_memory_host_kind="wsl2",
        )
        assert run.rc == 0, run.output[-3000:]
        assert run.recap[host.name].changed == 0
        assert "Windows share 32.0 GB" in run.output
        assert "= 120.9 GB of 128.0 GB: fits" in run.output


def unit_for(tmp_path: Path, meminfo: str, kind: str) -> Path:
    out = tmp_path / "render"
    render_inventory(
        make_inventory(
            tmp_path / "inv",
            "single",
            vllm_serving_memory_meminfo_path=f"{ON_HOST}/{meminfo}",
            vllm_serving_memory_host_kind=kind,
        ),
        out,
    )
    return out / "spark-1"


# The rendered unit Requires=docker.service. This host runs no engine (the guard runs before
# compose is called): a oneshot unit of that name meets the dependency, and ExecStart, which
# needs the real /usr/bin/docker, fails where the guard lets the start through.
DOCKER_UNIT_STANDIN = """[Unit]
Description=stand-in for docker.service (no engine: tests/infra/test_memory_guard.py)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
"""


def start_unit(host: Host, rendered: Path) -> tuple[int, str]:
    """Install the rendered unit and guard, start the unit, return its rc and journal."""
    host.exec(
        ["sh", "-c", "cat > /etc/systemd/system/docker.service"],
        input=DOCKER_UNIT_STANDIN,
        check=True,
    )
    host.exec("mkdir -p /opt/sparkops/serving", check=True)
    run_docker("cp", str(rendered / "memory-guard.sh"), f"{host.id}:/opt/sparkops/serving/")
    run_docker("cp", str(rendered / "sparkops-serving.service"), f"{host.id}:/etc/systemd/system/")
    host.exec("systemctl daemon-reload && journalctl --rotate --vacuum-time=1s", check=False)
    since = host.exec("date '+%Y-%m-%d %H:%M:%S'", check=True).stdout.strip()
    started = host.exec("systemctl start sparkops-serving.service")
    journal = host.exec(
        ["journalctl", "--no-pager", "-o", "cat", "--since", since, "-u", "sparkops-serving"]
    ).stdout
    return started.returncode, journal


def test_the_unit_refuses_to_start_below_the_bar(host, tmp_path):
    try:
        rc, journal = start_unit(host, unit_for(tmp_path, "dgx-spark-busy.meminfo", "native"))
        assert rc != 0
        lines = [line for line in journal.splitlines() if "sparkops-memory-guard" in line]
        assert len(lines) == 1, journal
        assert lines[0].startswith(
            "sparkops-memory-guard: refusing to start vLLM (gb10-gemma4-12b-fp8, native): "
            "MemAvailable 86.1 GB (page cache not dropped"
        )
        assert "below the 92.9 GB it needs; fix: stop what holds the memory" in lines[0]
        # ExecStart (docker compose) never ran.
        assert "docker" not in journal.replace(lines[0], "")

        rc, journal = start_unit(host, unit_for(tmp_path / "idle", "dgx-spark.meminfo", "native"))
        assert "MemAvailable 123.9 GB" in journal and "starting vLLM" in journal, journal
        # This host has no Docker: the unit got past the guard to ExecStart, which fails.
        assert rc != 0
        assert "refusing" not in journal
    finally:
        host.exec(
            "rm -rf /opt/sparkops /etc/systemd/system/sparkops-serving.service "
            "/etc/systemd/system/docker.service"
        )
        host.exec("systemctl daemon-reload")
