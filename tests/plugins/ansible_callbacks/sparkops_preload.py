"""Test-only Ansible callback: import the plugins every task needs once, in ansible-playbook's
own process, before it forks a worker per task.

Ansible runs each task in a forked worker, and the worker imports what the task needs: every
filter and test plugin file as soon as it templates one filter (`Jinja2Loader.all()`: the
kit's filter plugins import `sparkops`, the doctor's checks and their models), the connection
plugin (community.docker's `docker_api` with its Docker API client) and the action plugin.
What the worker imports dies with it, so every task paid those imports again: on the 2-core
test VM they were about three quarters of a worker's CPU time, and a preflight-only provision
run took 17.9 s (13.9 s of CPU) without this callback and 8.8 s (5.2 s) with it.

Imported here, before the first task, the modules are in `sys.modules` of the process every
worker is forked from, and Ansible's loader takes them from there. Nothing else changes: no
output, no option, the same plugins found on the same paths (a plugin that fails to import
here is left for the task to report as Ansible always does). `tests/plugins/playbook.py` puts
this folder on ANSIBLE_CALLBACK_PLUGINS for every playbook the tests run; it needs no enabling
(CALLBACK_NEEDS_ENABLED is false), so the kit's own `callbacks_enabled` stays as it is.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, connection_loader, filter_loader, test_loader

# The connection plugins the tests' inventories name (testinfra reaches hosts without Ansible).
CONNECTIONS = ("sparkops_testhost", "community.docker.docker_api", "ansible.builtin.local")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkops_preload"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_play_start(self, play: Any) -> None:
        """Before each play's first task (a play's roles may add plugin folders). A plugin
        that fails to import here is left to the task that needs it, which reports it."""
        with suppress(Exception):
            list(filter_loader.all())
        with suppress(Exception):
            list(test_loader.all())
        with suppress(Exception):
            list(action_loader.all(class_only=True))
        for name in CONNECTIONS:
            with suppress(Exception):
                connection_loader.get(name, class_only=True)
