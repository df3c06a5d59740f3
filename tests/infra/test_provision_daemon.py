"""Provisioning never harms a host (issue 24, items 10, 15, 16, 22, 25).

One amd64 systemd host with room for its own Docker engine walks what hurt hosts before:
- every container_runtime boolean given as the string "false" through `-e` on a host without
  Docker: the role stops before any change (it used to write daemon.json, add the docker group
  and a profile script, then fail);
- a malformed /etc/docker/daemon.json: refused, naming the place, the file left as it is;
- a converge (container_runtime and host_tuning, two job users) with a dead third-party apt
  source beside Debian's, while another process holds dpkg's lock for longer than apt's own
  60 s wait: it waits, then converges;
- provision.yml with every boolean of every role it runs given as "false" through `-e`: each
  switch is off (the drop-caches sudoers rule granted before is removed, and a second such
  host_tuning run changes nothing); the job user dropped from the inventory in that run leaves
  the docker group and stops lingering;
- /etc/sudoers without `@includedir /etc/sudoers.d`: host_tuning warns that its rule is not in
  force and says what to add.
The link, deep-merge and lost-restart cases run on the interrupted host of
test_provision_runtime.py, within runs it makes anyway.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host
from tests.plugins.playbook import PlaybookRun, parse_recap, start_playbook
from tests.plugins.provision import (
    JOB_USER,
    daemon_json,
    prepare,
    provision,
    write_inventory,
)

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(3000)]

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
TAGS = ("--tags", "container_runtime")
MALFORMED = '{\n    "log-driver": "local",\n}\n'
RESTART = re.compile(r"RUNNING HANDLER \[container_runtime : Restart Docker\][^\n]*\n(changed|ok)")
LEAVER = "leaving-researcher"
SUDOERS_RULE = "/etc/sudoers.d/sparkops-drop-caches"
DEAD_SOURCE = "http://127.0.0.1:9/debian"  # the discard port: the connection is refused
# Holds dpkg's frontend lock (an fcntl lock, as apt and dpkg take it) for LOCK_HOLD_S seconds.
LOCK_HOLD_S = 75
LOCK_MARKER = "TASK [container_runtime : Keep only the packages apt can install]"
LOCK_HOLDER = (
    "import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w');"
    f" fcntl.lockf(f, fcntl.LOCK_EX); time.sleep({LOCK_HOLD_S})"
)


def booleans(*roles: str) -> list[str]:
    """The `type: bool` options of ``roles``, from their meta/argument_specs.yml."""
    names = []
    for role in roles:
        spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
        for entry in spec["argument_specs"].values():
            names += [n for n, o in entry["options"].items() if o.get("type") == "bool"]
    return names


def as_false_strings(names: list[str]) -> list[str]:
    """`-e name=false` for each name: strings, as a user types them."""
    return [arg for name in names for arg in ("-e", f"{name}=false")]


def exists(host: Host, path: str) -> bool:
    return host.exec(["test", "-e", path]).returncode == 0


@dataclass
class Walk:
    host: Host
    all_false: PlaybookRun
    untouched: dict[str, bool]
    malformed: PlaybookRun
    malformed_after: str
    read_only: PlaybookRun
    converge: PlaybookRun
    holder_rc: int | None
    granted: dict[str, bool]
    every_role_false: PlaybookRun
    granted_after: dict[str, bool]
    sudoers_rule: dict[str, bool]
    host_tuning_false_again: PlaybookRun
    no_includedir: PlaybookRun


def converge_behind_a_lock(inventory_dir: Path, *args: str) -> tuple[PlaybookRun, int | None]:
    """provision.yml while another process holds dpkg's lock for LOCK_HOLD_S seconds, taken when
    the role has decided what to install (the next task installs it)."""
    since = time.monotonic()
    lines: list[str] = []
    holder = None
    with start_playbook("provision.yml", inventory_dir, *args) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if holder is None and LOCK_MARKER in line:
                holder = subprocess.Popen(
                    ["docker", "exec", inventory_host(inventory_dir), "python3", "-c", LOCK_HOLDER]
                )
        proc.wait(timeout=1200)
    holder_rc = holder.wait(timeout=LOCK_HOLD_S + 60) if holder else None
    output = "".join(lines)
    run = PlaybookRun(proc.returncode, output, "", time.monotonic() - since, parse_recap(output))
    return run, holder_rc


def inventory_host(inventory_dir: Path) -> str:
    """The one host of an inventory written by write_inventory."""
    hosts = yaml.safe_load((inventory_dir / "hosts.yml").read_text())
    return next(iter(hosts["all"]["children"]["sparks"]["hosts"]))


def grants(host: Host) -> dict[str, bool]:
    """Whether the leaving user is in the docker group and lingers."""
    groups = host.exec(["id", "-nG", LEAVER]).stdout.split()
    return {
        "docker group": "docker" in groups,
        "linger": exists(host, f"/var/lib/systemd/linger/{LEAVER}"),
    }


@pytest.fixture(scope="module")
def walk(systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory) -> Walk:
    host = systemd_host(arch="amd64", docker=True)
    prepare(host, tools=("nvidia-smi", "nvidia-ctk"))
    host.exec(["useradd", "--create-home", LEAVER], check=True)
    directory = tmp_path_factory.mktemp("harm")
    both = {
        "container_runtime_docker_users": [JOB_USER, LEAVER],
        "host_tuning_job_users": [JOB_USER, LEAVER],
    }
    two = write_inventory(directory / "two", host, both)

    all_false = provision(two, *TAGS, *as_false_strings(booleans("container_runtime")))
    untouched = {
        path: exists(host, path)
        for path in ("/etc/docker/daemon.json", "/etc/profile.d/sparkops-docker-platform.sh")
    }
    untouched["docker group"] = host.exec(["getent", "group", "docker"]).returncode == 0

    host.exec("mkdir -p /etc/docker && cat > /etc/docker/daemon.json", input=MALFORMED, check=True)
    malformed = provision(two, *TAGS)
    malformed_after = host.exec(["cat", "/etc/docker/daemon.json"], check=True).stdout
    host.exec(["rm", "/etc/docker/daemon.json"], check=True)

    # A read-only /etc/docker (issue 34 item 9): refused before any change, naming the mount
    # point to remount, instead of the copy module's bare "not writable".
    host.exec("mount -t tmpfs -o ro tmpfs /etc/docker", check=True)
    try:
        read_only = provision(
            two, *TAGS, "-e", '{"container_runtime_daemon_options": {"log-driver": "local"}}'
        )
    finally:
        host.exec(["umount", "/etc/docker"], check=True)

    # A third-party source that no longer answers beside Debian's, which does: it is named,
    # and the packages Debian offers still install.
    host.exec(
        f"echo 'deb {DEAD_SOURCE} bookworm main' > /etc/apt/sources.list.d/dead.list", check=True
    )
    # Another apt/dpkg (a second provision, unattended-upgrades) takes dpkg's lock just before
    # the role installs and keeps it past the apt module's own 60 s wait.
    converge, holder_rc = converge_behind_a_lock(two, "--tags", "container_runtime,host_tuning")
    assert converge.rc == 0, converge.output[-4000:]
    granted = grants(host)
    sudoers_rule = {"granted": exists(host, SUDOERS_RULE)}

    # JOB_USER stays, LEAVER is dropped from both lists.
    one = write_inventory(directory / "one", host)
    every = booleans("spark_preflight", "container_runtime", "host_tuning", "sparkops_cli")
    every_role_false = provision(one, "--skip-tags", "sparkops_cli", *as_false_strings(every))
    granted_after = grants(host)
    sudoers_rule["after every false"] = exists(host, SUDOERS_RULE)
    host_tuning_false_again = provision(
        one, "--tags", "host_tuning", *as_false_strings(booleans("host_tuning"))
    )
    # Read here: the run below leaves host_tuning_drop_caches_sudo at its default (true), so it
    # grants the rule again.
    sudoers_rule["after a second run"] = exists(host, SUDOERS_RULE)

    host.exec(["sed", "-i", "/^@includedir/d", "/etc/sudoers"], check=True)
    no_includedir = provision(one, "--tags", "host_tuning", "-e", "host_tuning_gpu_check_run=false")
    print(
        f"\nharm walk: all-false refusal {all_false.seconds:.0f} s, malformed refusal"
        f" {malformed.seconds:.0f} s, converge behind a {LOCK_HOLD_S} s lock"
        f" {converge.seconds:.0f} s, every-role-false {every_role_false.seconds:.0f} s,"
        f" host_tuning without includedir {no_includedir.seconds:.0f} s"
    )
    return Walk(
        host,
        all_false,
        untouched,
        malformed,
        malformed_after,
        read_only,
        converge,
        holder_rc,
        granted,
        every_role_false,
        granted_after,
        sudoers_rule,
        host_tuning_false_again,
        no_includedir,
    )


def test_string_false_install_missing_stops_before_any_change(walk: Walk) -> None:
    run = walk.all_false
    assert run.rc != 0 and run.changed == 0, run.output[-4000:]
    assert "Traceback" not in run.output
    assert "has no Docker engine and container_runtime_install_missing is false" in run.text
    assert walk.untouched == {
        "/etc/docker/daemon.json": False,
        "/etc/profile.d/sparkops-docker-platform.sh": False,
        "docker group": False,
    }


def test_a_malformed_daemon_json_is_refused_naming_the_place_and_kept(walk: Walk) -> None:
    run = walk.malformed
    assert run.rc != 0 and run.changed == 0, run.output[-4000:]
    assert "from_json" not in run.output and "Traceback" not in run.output
    assert (
        "/etc/docker/daemon.json on " + walk.host.name + " is not valid JSON: Expecting property"
        " name enclosed in double quotes at line 3, column 1. The role will not overwrite it"
    ) in run.text
    assert walk.malformed_after == MALFORMED


def test_a_read_only_docker_folder_is_refused_with_the_mount_to_remount(walk: Walk) -> None:
    run = walk.read_only
    assert run.rc != 0 and run.changed == 0, run.output[-4000:]
    assert "Traceback" not in run.output and "not writable" not in run.output
    assert (
        f"/etc/docker on {walk.host.name} cannot be written (its filesystem, mounted at"
        " /etc/docker, is read-only)"
    ) in run.text
    assert "`mount -o remount,rw /etc/docker`" in run.text


def test_a_converge_waits_for_another_apt_past_apt_s_own_wait(walk: Walk) -> None:
    run = walk.converge
    assert run.rc == 0 and run.failed == 0, run.output[-4000:]
    assert "Could not get lock" not in run.output
    assert walk.holder_rc == 0  # the lock was held its full time, not cut short
    assert walk.granted == {"docker group": True, "linger": True}


def test_drop_caches_sudo_given_as_false_removes_the_rule(walk: Walk) -> None:
    run = walk.every_role_false
    assert run.rc == 0, run.output[-4000:]
    assert walk.sudoers_rule == {
        "granted": True,
        "after every false": False,
        "after a second run": False,
    }
    again = walk.host_tuning_false_again
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]


def test_every_boolean_of_every_role_given_as_false_turns_its_switch_off(walk: Walk) -> None:
    run = walk.every_role_false
    assert run.rc == 0, run.output[-4000:]
    host = walk.host
    assert "Enable and start earlyoom" not in run.output  # earlyoom_enabled
    assert "Sample GPU clocks and power" not in run.output  # gpu_check_run
    assert "Restart Docker" not in run.output  # manage_service, nvidia_toolkit
    assert "default-runtime" not in daemon_json(host)  # nvidia_set_default


def test_a_user_dropped_from_the_inventory_loses_the_docker_group_and_linger(walk: Walk) -> None:
    assert walk.granted_after == {"docker group": False, "linger": False}
    assert "docker" in walk.host.testinfra.user(JOB_USER).groups
    assert exists(walk.host, f"/var/lib/systemd/linger/{JOB_USER}")


def test_a_sudoers_without_includedir_is_named_with_the_line_to_add(walk: Walk) -> None:
    run = walk.no_includedir
    assert run.rc == 0, run.output[-4000:]
    assert (
        "WARNING: the rule in /etc/sudoers.d/sparkops-drop-caches is not in force on"
        f" {walk.host.name}: `sudo -l -U {JOB_USER}` does not list"
    ) in run.text
    assert "add the line `@includedir /etc/sudoers.d` to it with `visudo`" in run.text
    assert "not in force" not in walk.converge.text  # Debian's sudoers reads the directory
