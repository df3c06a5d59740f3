"""A read-only bind mount on /etc/docker is refused naming that mount (issue 43 item 7).

`mount --bind /srv/etc-docker /etc/docker`, then read-only: a folder of the root filesystem,
so the same device as /, which os.path.ismount does not see as a mount point. The role's check
used to walk up to / and advise `mount -o remount,rw /` (the wrong mount, and one that would
not make the bind mount writable). It now reads the kernel's mount table
(ansible/roles/container_runtime/files/mount-of.py). The role's configure step runs here as a
play of its own task file (the preflight before it reads daemon.json; the play gives what it
read): refused before any change, in check mode too, with the host's daemon.json, /etc/docker
and the mount left as they were. tests/infra/test_provision_daemon.py keeps the read-only
filesystem case (a tmpfs mounted read-only on /etc/docker) inside a full provision.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host, inventory
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = [pytest.mark.infra, pytest.mark.timeout(600)]

CURRENT = {"log-driver": "json-file"}
PLAY = [
    {
        "name": "Write Docker's daemon options, as container_runtime does after its preflight",
        "hosts": "testbed",
        "gather_facts": False,
        "vars": {
            # What the role's preflight read from daemon.json (tasks/preflight.yml).
            "_container_runtime_daemon_current": CURRENT,
            "container_runtime_daemon_options": {"log-driver": "local"},
        },
        "tasks": [
            {
                "name": "Run the role's configure step",
                "ansible.builtin.include_role": {
                    "name": "container_runtime",
                    "tasks_from": "configure.yml",
                },
            }
        ],
    }
]
# What a change would touch: the file behind the mount, the folder, and the mount itself.
HOST_STATE = (
    "sha256sum /srv/etc-docker/daemon.json; ls -la --time-style=full-iso /etc/docker;"
    " grep ' /etc/docker ' /proc/self/mountinfo | cut -d' ' -f4-6"
)


@pytest.fixture(scope="module")
def bound_host(systemd_host, tmp_path_factory) -> tuple[Host, Path]:
    host: Host = systemd_host("amd64")
    host.exec(
        "mkdir -p /srv/etc-docker /etc/docker"
        f" && echo '{yaml.safe_dump(CURRENT, default_flow_style=True).strip()}'"
        " > /srv/etc-docker/daemon.json"
        " && mount --bind /srv/etc-docker /etc/docker"
        " && mount -o remount,bind,ro /etc/docker",
        check=True,
    )
    assert host.exec(["touch", "/etc/docker/probe"]).returncode != 0  # really read-only
    assert (
        host.exec(
            ["python3", "-c", "import os; print(os.path.ismount('/etc/docker'))"]
        ).stdout.strip()
        == "False"
    )
    root = tmp_path_factory.mktemp("docker-folder-mount")
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory([host])))
    (root / "play.yml").write_text(yaml.safe_dump(PLAY, sort_keys=False))
    return host, root


def configure(root: Path, *args: str) -> PlaybookRun:
    run = run_playbook(root / "play.yml", root / "hosts.yml", *args, timeout=300)
    assert "Traceback" not in run.output
    return run


@pytest.mark.parametrize("mode", [(), ("--check",)], ids=["run", "check"])
def test_the_read_only_bind_mount_is_named_with_its_own_remount(bound_host, mode) -> None:
    host, root = bound_host
    before = host.exec(HOST_STATE, check=True).stdout
    run = configure(root, *mode)
    assert run.rc == 2, run.output[-4000:]
    assert run.recap[host.name].failed == 1 and run.changed_on(host.name) == 0
    assert (
        f"/etc/docker on {host.name} cannot be written (it is on the read-only mount at"
        " /etc/docker, a bind mount of /srv/etc-docker on overlay, whose filesystem is"
        " writable), so Docker's options cannot be set in /etc/docker/daemon.json. Remount it"
        " read-write (`mount -o remount,bind,rw /etc/docker`;"
    ) in run.text, run.output[-4000:]
    assert "Nothing was changed." in run.text
    assert "remount,rw /`" not in run.text and "mounted at /," not in run.text
    assert "not writable" not in run.output
    assert host.exec(HOST_STATE, check=True).stdout == before
