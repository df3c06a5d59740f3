"""The preflight checks (sparkops.doctor): each verdict, its detail and its fix, in milliseconds.

preflight.yml only gathers facts; these tests feed the same shapes Ansible registers (a skipped
task, a uri that reached nothing, a Docker module that could not ask Docker) and a real vLLM
/metrics page (tests/unit/data, vLLM 0.32.0 on CPU) read by the playbooks' own metrics filter.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from sparkops.doctor import checks
from sparkops.doctor.preflight import (
    Settings,
    SettingsError,
    gpu_verdict,
    parse_settings,
    preflight,
)

ROOT = Path(__file__).resolve().parents[1].parent
FILTERS = ROOT / "ansible" / "plugins" / "filter"
METRICS = (Path(__file__).parent / "data" / "vllm_0.32.0_cpu_metrics.prom").read_text()
MEMINFO = (
    "MemTotal:       131072000 kB\nMemFree:         1000000 kB\nMemAvailable:   104857600 kB\n"
)
ALL = [
    "page_cache_dropped",
    "memory_headroom",
    "vllm_healthy",
    "vllm_container",
    "vllm_answers",
    "gpu_power_state",
    "prefix_caching_hash_algo",
    "kv_cache_headroom",
    "xxhash_importable",
    "output_disk_space",
    "gpu_driver_errors",
    "memory_fragmentation",
    "host_uptime",
    "cuda_allocatable",
]


# The host's own checks (issue 39), which a dead server does not touch.
HOST = {"gpu_driver_errors", "memory_fragmentation", "host_uptime", "cuda_allocatable"}


def load_filter(name: str):
    spec = importlib.util.spec_from_file_location(name, FILTERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


METRICS_FILTER = load_filter("sparkops_metrics")["sparkops_vllm_metrics"]
PREFLIGHT_FILTER = load_filter("sparkops_doctor")["sparkops_preflight"]


def gpu_result(state: str, **extra) -> dict:
    """What the command module registers for `sparkops-gpu-check --json`."""
    verdicts = {
        "ok": {"clock_mhz": 2405.0, "power_w": 89.72, "util_pct": 96.0, "rc": 0},
        "stuck": {"clock_mhz": 1005.0, "power_w": 22.14, "util_pct": 97.0, "rc": 2},
        "idle": {"clock_mhz": 208.0, "power_w": 4.31, "util_pct": 0.0, "rc": 3},
    }
    body = {"state": state, "message": f"{state} message", **verdicts[state], **extra}
    return {"rc": body["rc"], "stdout": json.dumps(body), "stderr": "", "changed": False}


def healthy_facts() -> dict:
    return {
        "check_mode": False,
        "kernel": "6.11.0-1016-nvidia",
        "drop": {"rc": 0, "stdout": "", "stderr": "", "changed": True},
        "meminfo": MEMINFO,
        "health": {"status": 200, "url": "http://127.0.0.1:8000/health"},
        "container": {
            "exists": True,
            "container": {
                "State": {"Status": "running", "Running": True, "Health": {"Status": "healthy"}}
            },
        },
        "gpu": gpu_result("ok"),
        "metrics": METRICS_FILTER(METRICS),
        "xxhash": {"rc": 0, "stdout": "3.5.0\n", "stderr": ""},
        "disk": {"rc": 0, "stdout": str(500 << 30)},
        "ready": {"health": 200, "answered": True, "model": "gemma", "reply": "It works."},
        "kernel_log": {"rc": 0, "stdout": "source=journalctl\n"},
        "buddyinfo": "Node 0, zone   Normal   10   5   3   1   0   0   0   0   0   900   25000\n",
        "uptime": "86400.00 170000.00\n",
        "page_size": {"rc": 0, "stdout": "4096"},
    }


PLAYBOOK = ROOT / "ansible" / "playbooks" / "preflight.yml"
PREFLIGHT_VARS = yaml.safe_load((ROOT / "ansible/playbooks/vars/preflight.yml").read_text())


def playbook_defaults() -> dict:
    """The settings' defaults as preflight.yml declares them (where they are written once),
    less the two it takes from the deploy's defaults (templates, set by the tests)."""
    found = {}
    for name in Settings.model_fields:
        value = PREFLIGHT_VARS[f"sparkops_preflight_{name}"]
        if not (isinstance(value, str) and "{{" in value):
            found[name] = value
    return found


SETTINGS = playbook_defaults() | {
    "wsl_autostart_script": "/opt/sparkops/windows/sparkops-wsl-autostart.cmd",
    "vllm_url": "http://127.0.0.1:8000",
    "vllm_container": "sparkops-vllm-1",
    "concurrency": "8",
    "drop_caches": True,
    "gpu_memory_gib": "",  # the inventory plans no GPU memory budget
}


def by_name(summary: dict) -> dict:
    return {c["name"]: c for c in summary["checks"]}


def test_a_fit_spark_passes_every_check_with_no_fix():
    summary = preflight(healthy_facts(), SETTINGS)
    assert [c["name"] for c in summary["checks"]] == ALL
    assert summary["ok"] is True, summary
    assert all(c["fix"] == "" for c in summary["checks"])
    found = by_name(summary)
    assert found["gpu_power_state"]["detail"] == "2405 MHz, 90 W, 96% busy under load"
    assert found["prefix_caching_hash_algo"]["detail"] == "server reports xxhash"
    assert found["kv_cache_headroom"]["detail"] == (
        "8 requests x 300 tokens would use 0% of 524288 cached tokens (now 0%)"
    )
    assert found["memory_headroom"]["detail"] == "100.0 GiB available (this host needs 8)"
    assert found["xxhash_importable"]["detail"] == "xxhash 3.5.0 in sparkops-vllm-1"
    assert found["vllm_container"]["detail"] == "sparkops-vllm-1: running, health healthy"
    assert found["vllm_answers"]["detail"] == "gemma answered 'It works.'"
    assert found["output_disk_space"]["detail"] == "500.0 GiB free for /var/lib/sparkops (needs 20)"


def test_the_filter_returns_the_same_summary_to_ansible():
    assert PREFLIGHT_FILTER(healthy_facts(), SETTINGS) == preflight(healthy_facts(), SETTINGS)


def test_vllm_down_fails_its_checks_and_points_at_vllm_healthy():
    facts = healthy_facts() | {
        "health": {"status": -1, "msg": "Status code was -1"},
        "metrics": METRICS_FILTER(""),
        "gpu": gpu_result("idle"),
        "container": {"exists": False, "container": None},
        "xxhash": {"skipped": False, "msg": "No such container: sparkops-vllm-1"},
    }
    found = by_name(preflight(facts, SETTINGS))
    passed = {name for name, c in found.items() if c["ok"]}
    assert passed == {"page_cache_dropped", "memory_headroom", "output_disk_space"} | HOST
    assert found["vllm_healthy"]["detail"] == "no answer at http://127.0.0.1:8000/health"
    assert found["vllm_container"]["detail"] == "sparkops-vllm-1: container absent"
    assert found["vllm_container"]["fix"] == "deploy or restart the serving stack (restart.yml)"
    assert found["prefix_caching_hash_algo"]["fix"] == checks.START_VLLM
    assert found["kv_cache_headroom"]["detail"] == "vLLM is not answering"
    assert "stayed idle under load" in found["gpu_power_state"]["fix"]
    assert (
        found["xxhash_importable"]["fix"]
        == "start the serving container first (see vllm_container)"
    )


def test_a_stuck_gpu_fails_with_the_cure():
    facts = healthy_facts() | {"gpu": gpu_result("stuck")}
    found = by_name(preflight(facts, SETTINGS))
    assert found["gpu_power_state"]["ok"] is False
    assert found["gpu_power_state"]["detail"] == "1005 MHz, 22 W, 97% busy under load"
    assert "charger unplugged at both ends" in found["gpu_power_state"]["fix"]


# ansible.builtin.command's message when the executable is absent (ansible-core 2.19).
MISSING = (
    "Error executing command: [Errno 2] No such file or directory: "
    "b'/usr/local/bin/sparkops-gpu-check'"
)


@pytest.mark.parametrize(
    ("result", "detail", "fix"),
    [
        # The command module when the script is not installed: rc 2 like "stuck", no JSON.
        (
            {"rc": 2, "stdout": "", "stderr": "", "msg": MISSING},
            f"sparkops-gpu-check could not run: {MISSING}",
            "provision.yml",
        ),
        (
            {
                "rc": 4,
                "stdout": json.dumps({"state": "no-gpu", "rc": 4, "message": "no nvidia-smi."}),
            },
            "nvidia-smi failed: no nvidia-smi.",
            "install the NVIDIA driver",
        ),
        (
            {"rc": 5, "stdout": "", "stderr": "sparkops-gpu-check: error: cannot read x\n"},
            "sparkops-gpu-check could not run: sparkops-gpu-check: error: cannot read x",
            "sparkops_preflight_gpu_check",
        ),
    ],
)
def test_gpu_check_that_could_not_judge(result, detail, fix):
    check = checks.gpu_power_state(*gpu_verdict(result))
    assert check.ok is False and check.detail == detail and fix in check.fix


def test_docker_probe_failures_say_how_to_let_the_probe_run():
    no_requests = {"msg": "Failed to import the required Python library (requests) on host"}
    facts = healthy_facts() | {"container": no_requests, "xxhash": no_requests}
    found = by_name(preflight(facts, SETTINGS))
    for name in ("vllm_container", "xxhash_importable"):
        assert found[name]["ok"] is False
        assert found[name]["detail"].startswith("the probe could not run: Failed to import")
        assert "apt-get install python3-requests" in found[name]["fix"]
    engine_down = {"msg": "Error connecting: Cannot connect to the Docker daemon"}
    check = checks.vllm_container(
        "c", probed=False, exists=False, state={}, error=engine_down["msg"]
    )
    assert "systemctl start docker" in check.fix and "Cannot connect" in check.fix


def test_container_running_but_unhealthy_fails():
    state = {"Status": "running", "Running": True, "Health": {"Status": "unhealthy"}}
    check = checks.vllm_container("c", probed=True, exists=True, state=state, error="")
    assert check.ok is False and check.detail == "c: running, health unhealthy"


def test_without_a_container_xxhash_is_judged_from_the_server():
    settings = SETTINGS | {"vllm_container": ""}
    facts = healthy_facts() | {"container": {"skipped": True}, "xxhash": {"skipped": True}}
    found = by_name(preflight(facts, settings))
    assert "vllm_container" not in found
    assert found["xxhash_importable"] == {
        "name": "xxhash_importable",
        "ok": True,
        "detail": "the healthy server hashes with xxhash, so it imported it",
        "fix": "",
        "warning": False,
    }
    sha = METRICS.replace('prefix_caching_hash_algo="xxhash"', 'prefix_caching_hash_algo="sha256"')
    found = by_name(preflight(facts | {"metrics": METRICS_FILTER(sha)}, settings))
    assert found["prefix_caching_hash_algo"]["fix"].startswith(
        "serve with --prefix-caching-hash-algo xxhash"
    )
    assert found["xxhash_importable"]["ok"] is False


def test_xxhash_missing_in_the_container():
    facts = healthy_facts() | {
        "xxhash": {
            "rc": 1,
            "stdout": "",
            "stderr": "ModuleNotFoundError: No module named 'xxhash'\n",
        }
    }
    check = by_name(preflight(facts, SETTINGS))["xxhash_importable"]
    assert check["detail"] == "ModuleNotFoundError: No module named 'xxhash'"
    assert check["fix"] == "pip install xxhash in the vLLM image, then restart the server"


def test_kv_cache_too_small_for_the_planned_concurrency():
    facts = healthy_facts()
    check = by_name(preflight(facts, SETTINGS | {"concurrency": 10_000}))["kv_cache_headroom"]
    assert check["ok"] is False
    assert check["detail"].startswith("10000 requests x 300 tokens would use 572% of 524288")
    assert "sparkops plan memory" in check["fix"]
    # A server that does not report its cache size cannot be judged fit.
    check = checks.kv_cache_headroom(True, {}, None, 8, 300, 0.7)
    assert check.ok is False and check.detail == "the server does not report its KV cache size"


@pytest.mark.parametrize(
    ("kernel", "available_kib", "ok", "detail", "fix"),
    [
        (
            "6.11.0-1016-nvidia",
            7 << 20,
            False,
            "7.0 GiB available (this host needs 8)",
            "stop what else",
        ),
        (
            "6.6.87.2-microsoft-standard-WSL2",
            12 << 20,
            False,
            "12.0 GiB available (WSL2 needs 16)",
            ".wslconfig",
        ),
        (
            "6.6.87.2-microsoft-standard-WSL2",
            17 << 20,
            True,
            "17.0 GiB available (WSL2 needs 16)",
            "",
        ),
    ],
)
def test_memory_headroom_is_stricter_under_wsl2(kernel, available_kib, ok, detail, fix):
    check = checks.memory_headroom(f"MemAvailable: {available_kib} kB\n", kernel, 8, 16)
    assert (check.ok, check.detail) == (ok, detail)
    assert fix in check.fix if fix else check.fix == ""


def test_memory_headroom_without_memavailable_fails_instead_of_crashing():
    check = checks.memory_headroom("MemTotal: 1 kB\n", "5.4", 8, 16)
    assert check.ok is False and "no MemAvailable" in check.detail


@pytest.mark.parametrize(
    ("enabled", "check_mode", "drop", "ok", "detail"),
    [
        (False, False, {"skipped": True}, True, "disabled"),
        (True, True, {"skipped": True}, True, "skipped in check mode"),
        (True, False, {"rc": 0, "stderr": ""}, True, "dropped"),
        (
            True,
            False,
            {
                "rc": 1,
                "stderr": "/bin/sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only "
                "file system\n",
            },
            False,
            "/bin/sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only file system",
        ),
    ],
)
def test_page_cache_drop(enabled, check_mode, drop, ok, detail):
    facts = healthy_facts() | {"check_mode": check_mode, "drop": drop}
    check = by_name(preflight(facts, SETTINGS | {"drop_caches": enabled}))["page_cache_dropped"]
    assert (check["ok"], check["detail"]) == (ok, detail)
    assert ("become" in check["fix"]) is (not ok)


def test_low_disk_fails():
    check = checks.output_disk_space(5 << 30, "/var/lib/sparkops/jobs", 20)
    assert (
        check.ok is False and check.detail == "5.0 GiB free for /var/lib/sparkops/jobs (needs 20)"
    )
    assert check.fix == "free space or point the job at a larger disk"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"min_free_disk_gib": "lots"}, "sparkops_preflight_min_free_disk_gib"),
        ({"concurrency": "many"}, "sparkops_preflight_concurrency"),
        ({"drop_caches": "perhaps"}, "sparkops_preflight_drop_caches"),
        ({"min_sm_clock_mhz": 1500}, "sparkops_preflight_min_sm_clock_mhz"),
    ],
)
def test_a_bad_setting_names_the_variable(settings, words):
    with pytest.raises(SettingsError, match=words):
        parse_settings(SETTINGS | settings)
    with pytest.raises(AnsibleFilterError, match=words):
        PREFLIGHT_FILTER(healthy_facts(), SETTINGS | settings)


def test_a_missing_setting_names_the_variable():
    settings = {k: v for k, v in SETTINGS.items() if k != "min_free_disk_gib"}
    with pytest.raises(SettingsError, match="sparkops_preflight_min_free_disk_gib: Field required"):
        parse_settings(settings)


def test_the_settings_defaults_are_written_once_in_preflight_yml():
    """preflight.yml declares every setting the verdicts read (a user reads and overrides
    them there); the checks hold no second copy of a default but the concurrency's, which
    preflight.yml leaves to the batch client's ("" unless the inventory plans one)."""
    declared = {f"sparkops_preflight_{name}" for name in Settings.model_fields}
    assert declared <= set(PREFLIGHT_VARS)
    with_default = {n for n, f in Settings.model_fields.items() if not f.is_required()}
    assert with_default == {"concurrency"}
    assert PREFLIGHT_VARS["sparkops_preflight_concurrency"] == (
        "{{ vllm_serving_concurrency | default('', true) }}"
    )
    assert len(playbook_defaults()) == 12  # the literals once written twice, issue 39's four


def test_the_play_hands_the_filter_every_setting():
    """The task that judges the facts passes each setting from its variable; concurrency
    only when planned (else the checks' default)."""
    tasks = [t for play in yaml.safe_load(PLAYBOOK.read_text()) for t in play.get("tasks", [])]
    judge = next(t for t in tasks if t.get("name") == "Judge the gathered facts")
    passed = judge["vars"]["_sparkops_preflight_settings"]
    assert set(passed) | {"concurrency"} == set(Settings.model_fields)
    assert passed == {name: f"{{{{ sparkops_preflight_{name} }}}}" for name in passed}
    assert "'concurrency': sparkops_preflight_concurrency" in judge["vars"]["settings"]


def test_every_check_has_a_fix_when_it_fails():
    """A failed check without advice is a dead end for the user."""
    dead = {"status": -1}
    facts = {
        "drop": {"rc": 1, "stderr": "denied"},
        "meminfo": "MemAvailable: 1 kB\n",
        "health": dead,
        "container": {"msg": "docker down"},
        "gpu": {"rc": 2, "msg": "missing"},
        "metrics": {},
        "xxhash": {"msg": "docker down"},
        "disk": {"stdout": "0"},
    }
    summary = preflight(facts, SETTINGS | {"gpu_memory_gib": 110})
    assert summary["ok"] is False
    assert [c["name"] for c in summary["checks"]] == ALL
    assert all(not c["ok"] and c["fix"] for c in summary["checks"]), summary


def test_a_healthy_server_whose_requests_fail_fails_vllm_answers_with_the_problem():
    problem = "/health answers 200 but a chat completion for 'gemma' failed: 500 boom"
    facts = healthy_facts() | {"ready": {"health": 200, "answered": False, "problem": problem}}
    summary = preflight(facts, SETTINGS)
    found = by_name(summary)
    assert summary["ok"] is False
    assert [name for name, c in found.items() if not c["ok"]] == ["vllm_answers"]
    assert found["vllm_answers"]["detail"] == problem
    assert "logs.yml" in found["vllm_answers"]["fix"]


def test_a_container_in_its_health_start_period_is_not_sent_to_restart_while_health_is_200():
    starting = {"Status": "running", "Running": True, "Health": {"Status": "starting"}}
    facts = healthy_facts() | {"container": {"exists": True, "container": {"State": starting}}}
    found = by_name(preflight(facts, SETTINGS))
    assert found["vllm_container"]["ok"] is True
    assert "start period" in found["vllm_container"]["detail"]
    down = facts | {"health": {"status": 503}}
    assert by_name(preflight(down, SETTINGS))["vllm_container"]["ok"] is False
