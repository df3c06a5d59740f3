"""One rule for where a client on the serving host reaches vLLM (sparkops.addresses): the
rendered container health check, the deploy's health probe (sparkops_render's health_url) and
the playbooks' vLLM URL (sparkops_vllm_url) all give the same answer for the same bind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sparkops.addresses import local_base_url
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import plan_stack
from tests.plugins.inventories import make_inventory

FILTERS = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "filter"
SECRETS = {"LITELLM_MASTER_KEY": "sk-test"}


def _filter(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", FILTERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://127.0.0.1:8000"),
        ("", "http://127.0.0.1:8000"),
        (None, "http://127.0.0.1:8000"),
        (" 10.0.0.12 ", "http://10.0.0.12:8000"),
        ("fd00::12", "http://[fd00::12]:8000"),
    ],
)
def test_local_base_url(bind, url):
    assert local_base_url(bind, 8000) == url
    assert _filter("sparkops_metrics").sparkops_vllm_url(bind, "8000") == url


def test_a_port_that_is_not_a_number_is_a_filter_error():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="port 'http' is not a number"):
        _filter("sparkops_metrics").sparkops_vllm_url("127.0.0.1", "http")


@pytest.mark.parametrize(
    ("example", "extra", "health"),
    [
        ("single", {}, "http://127.0.0.1:8000/health"),
        ("data-parallel", {"litellm_router_master_key": "sk-test"}, "http://10.0.0.11:8000/health"),
        (
            "single",
            {"vllm_serving_bind_address": "0.0.0.0", "vllm_serving_allow_public_bind": True},
            "http://127.0.0.1:8000/health",
        ),
    ],
)
def test_the_deploy_probe_and_the_playbooks_url_agree(tmp_path, example, extra, health):
    inv = read_inventory(make_inventory(tmp_path / "inv", example, **extra))
    host = inv.hosts[0]
    groups = {"all": inv.hosts, "sparks": inv.hosts}
    rendered = _filter("sparkops_render").sparkops_render(inv.hostvars, groups, host)
    assert rendered["health_url"] == health
    serving = plan_stack(inv, secrets=SECRETS)[host].serving
    url = _filter("sparkops_metrics").sparkops_vllm_url(serving.bind_address, serving.port)
    assert f"{url}/health" == health
