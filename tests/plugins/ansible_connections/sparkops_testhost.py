"""Connection `sparkops_testhost`: community.docker.docker_api for the test hosts, surviving a
lost answer to Ansible's temporary-folder command, or to the plugin's own user look-up, on a
slow moment (issue 34 item 15).

On a loaded 2-core machine the Docker engine has been seen to end an exec's output stream
with nothing in it while reporting success, and a module fixture's converge has ended with its
host "unreachable" at that command: Ansible stops the whole converge ("failed to resolve
remote temporary directory ... returned empty string", or "Failed to create temporary
directory"), and a module fixture errors every test of its module, though the host and the
kit are fine. Only that command is retried here: it is made idempotent (`mkdir -p` for the
folder whose name Ansible chose) and run again, up to RETRIES times, each retry named in the
output as a warning, when its answer lacks the folder (any exit status, or no output) or the
Docker API call itself failed. A failure that stays (a full or read-only disk) reaches
Ansible after the retries, as Docker gave it.

The same lost answer to the plugin's own `id -u && id -g` (run before its first file copy,
to own the copied file) made a converge "UNREACHABLE" with "Error while determining user and
group ID ... Got value: b''" (the soak's install, in a full make test, 2026-12-07). That
command changes nothing; it is run again the same way while its answer is not two numbers.
Every other command goes to Ansible untouched.

Everything else is community.docker.docker_api itself (its options, its Docker API client).
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleConnectionFailure
from ansible.utils.display import Display
from ansible_collections.community.docker.plugins.connection.docker_api import (
    DOCUMENTATION as _DOCKER_API_DOCUMENTATION,
)
from ansible_collections.community.docker.plugins.connection.docker_api import (
    Connection as DockerApiConnection,
)

DOCUMENTATION = _DOCKER_API_DOCUMENTATION.replace("name: docker_api", "name: sparkops_testhost", 1)

RETRIES = 3
# Ansible's mkdtemp: `mkdir -p <base> && mkdir <base>/ansible-tmp-... && echo ansible-tmp-...=`
_MKDTEMP_MARK = "ansible-tmp-"
_EXCLUSIVE_MKDIR = '&& mkdir "'
# docker_api's put_file: the user and group a copied file is given.
_USER_IDS = b"id -u && id -g"

display = Display()


class Connection(DockerApiConnection):
    """docker_api, retrying only a lost answer to the temporary-folder command."""

    transport = "sparkops_testhost"

    def exec_command(self, cmd, in_data=None, sudoable=False):  # type: ignore[no-untyped-def]
        if cmd == _USER_IDS:
            return self._retried(cmd, cmd, in_data, sudoable, _two_numbers, "user look-up")
        if not isinstance(cmd, str) or _MKDTEMP_MARK not in cmd or _EXCLUSIVE_MKDIR not in cmd:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        again = cmd.replace(_EXCLUSIVE_MKDIR, '&& mkdir -p "', 1)
        return self._retried(cmd, again, in_data, sudoable, _names_the_folder, "temporary-folder")

    def _retried(self, cmd, again, in_data, sudoable, whole, what):  # type: ignore[no-untyped-def]
        """Run `cmd`, then `again` up to RETRIES times while its answer is not `whole`."""
        for attempt in range(RETRIES + 1):
            try:
                result = super().exec_command(
                    cmd if attempt == 0 else again, in_data=in_data, sudoable=sudoable
                )
            except AnsibleConnectionFailure as err:
                if attempt == RETRIES:
                    raise
                why = f"the Docker API call failed ({err})"
            else:
                rc, stdout, _ = result
                if rc == 0 and whole(_as_bytes(stdout)):
                    return result
                if attempt == RETRIES:
                    return result
                why = f"exit status {rc}" if rc else "no output"
            display.warning(
                f"{self.get_option('remote_addr')}: Ansible's {what} command got"
                f" {why}; retry {attempt + 1} of {RETRIES}"
            )
            time.sleep(attempt + 1)
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt


def _names_the_folder(stdout: bytes) -> bool:
    return _MKDTEMP_MARK.encode() in stdout


def _two_numbers(stdout: bytes) -> bool:
    lines = stdout.split()
    return len(lines) == 2 and all(line.isdigit() for line in lines)


def _as_bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
