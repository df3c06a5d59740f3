"""Which mount holds /etc/docker (container_runtime's files/mount-of.py, issue 43 item 7).

A read-only bind mount of a folder of the root filesystem shares the root's device, so the old
walk up with os.path.ismount ended at / and advised `mount -o remount,rw /`. The finder reads
the kernel's mount table; these feed it tables captured in a test-host container
(tests/fixtures/mountinfo/, see the fixtures README), and one written by hand for the escapes
mountinfo uses. tests/infra/test_docker_folder_mount.py runs the role's refusal on a host.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ansible/roles/container_runtime/files/mount-of.py"
TABLES = REPO / "tests/fixtures/mountinfo"
_spec = importlib.util.spec_from_file_location("container_runtime_mount_of", SCRIPT)
assert _spec and _spec.loader
mount_of = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mount_of  # dataclasses look their module up there
_spec.loader.exec_module(mount_of)


def held(table: str, path: str = "/etc/docker"):
    return mount_of.holding(path, mount_of.parse((TABLES / table).read_text()))


def test_a_read_only_bind_mount_of_a_root_folder_is_named_not_root() -> None:
    mount = held("ro-bind-etc-docker.txt")
    assert (mount.mount_point, mount.root, mount.fstype) == (
        "/etc/docker",
        "/srv/etc-docker",
        "overlay",
    )
    assert mount.read_only == "mount"  # the mount's own flag; its filesystem is writable
    assert mount.remount == "mount -o remount,bind,rw /etc/docker"
    # A file in the folder, and a folder below it, are on the same mount; /etc is on /.
    assert held("ro-bind-etc-docker.txt", "/etc/docker/certs.d").mount_point == "/etc/docker"
    root = held("ro-bind-etc-docker.txt", "/etc")
    assert (root.mount_point, root.read_only, root.remount) == ("/", "", "mount -o remount,rw /")
    # /etc/dockerd is not under /etc/docker.
    assert held("ro-bind-etc-docker.txt", "/etc/dockerd").mount_point == "/"


def test_a_read_only_filesystem_mounted_there_is_remounted_without_bind() -> None:
    mount = held("ro-tmpfs-etc-docker.txt")
    assert (mount.mount_point, mount.fstype, mount.read_only) == (
        "/etc/docker",
        "tmpfs",
        "filesystem",
    )
    assert mount.remount == "mount -o remount,rw /etc/docker"


def test_the_last_mount_on_a_point_wins_and_escapes_are_read() -> None:
    """Two mounts on one point (the later hides the earlier), and a space written as \\040."""
    table = (
        "25 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw\n"
        "30 25 0:40 / /etc/docker rw,relatime shared:9 - tmpfs tmpfs rw\n"
        "31 30 8:2 /srv/site\\040docker /etc/docker ro,relatime shared:1 - ext4 /dev/sda2 rw\n"
        "32 25 8:3 / /data\\040set rw,relatime - ext4 /dev/sda3 ro,errors=remount-ro\n"
    )
    mounts = mount_of.parse(table)
    docker = mount_of.holding("/etc/docker", mounts)
    assert (docker.root, docker.read_only) == ("/srv/site docker", "mount")
    data = mount_of.holding("/data set/x", mounts)
    assert (data.mount_point, data.read_only) == ("/data set", "filesystem")
    assert data.remount == "mount -o remount,rw '/data set'"


def test_the_script_answers_in_json_for_this_machine(tmp_path: Path) -> None:
    """Run as the role runs it: one JSON object, the nearest existing folder of the file."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "missing" / "daemon.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert answer["folder"] == str(tmp_path.resolve())
    assert answer["writable"] is True and answer["read_only"] == ""
    assert answer["mount_point"].startswith("/")
