"""Inventory + profile -> what each host runs (pure): the context the templates render.

One function per topology keeps each shape readable:
- single: one vLLM on one host;
- data-parallel: one vLLM per host on any number (>= 2) of hosts, a LiteLLM router on the
  first host listing every replica under the same model name; clients call the router, or
  every replica directly (`client_endpoints`);
- pipeline-parallel: a Ray head (which also runs vLLM) on the first host and a Ray worker on
  the second over the QSFP link, or vLLM's native multi-node mode (`ray_cluster_backend: mp`).
"""

from __future__ import annotations

import ipaddress
import warnings
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import BaseModel

from sparkops.addresses import local_base_url
from sparkops.errors import Advice, UserError
from sparkops.privacy import TELEMETRY_OFF, private_env
from sparkops.profiles import DeployFacts, Profile, check_profile, load_profile
from sparkops.profiles.checks import fits_one_host, memory_need_bytes, pipeline_stages
from sparkops.render import envfile
from sparkops.render.command import native_parallel_flags, ray_parallel_flags, serve_command
from sparkops.render.inventory import Inventory
from sparkops.render.master_key import ENV_NAME as MASTER_KEY_ENV
from sparkops.render.services import RayService, RouterBackend, RouterService, VllmService
from sparkops.render.settings import (
    TOPOLOGY_OF,
    RayVars,
    RouterVars,
    ServingVars,
    serving_topology,
    split_prefixed,
    topology_named,
)
from sparkops.units import GIB
from sparkops.versions import VLLM_BASE_IMAGE

CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# The kit's own images and the docker/ folder each is built from (on the host, by the deploy).
KIT_IMAGES = {"gb10": "sparkops/vllm:gb10", "cpu": "sparkops/vllm:cpu"}
ROUTER_IMAGE = "sparkops/litellm:local"
SERVING_GROUP = "sparks"


@dataclass
class HostStack:
    """Everything the templates need for one host."""

    host: str
    role: str  # single | replica | head | worker
    serving: ServingVars
    profile: Profile
    vllm: VllmService  # filled in by the topology's planner (plan_stack)
    secrets: dict[str, str]
    router: RouterService | None = None
    ray: RayService | None = None
    files: list[str] = field(default_factory=list)
    stages: int = 1  # pipeline stages of the whole stack (plan_stack decided them)
    topology: str = ""  # the inventory's word (wsl2, pair-dp, ...), for headers a person reads

    def host_share(self) -> Profile:
        """The profile as one host holds it: with pipeline parallelism its share of the
        weights (each host loads 1/stages of the layers), what the memory guard sizes."""
        if self.stages <= 1 or self.role not in ("head", "worker"):
            return self.profile
        return self.profile.model_copy(
            update={"weights_gib": self.profile.weights_gib / self.stages}
        )


def serving_hosts(inv: Inventory) -> list[str]:
    """Hosts that serve: the `sparks` group if the inventory has one, else every host."""
    hosts = inv.groups.get(SERVING_GROUP) or inv.hosts
    if not hosts:
        raise UserError("the inventory lists no hosts: add the Spark(s) to hosts.yml")
    return hosts


def _reachable_address(host: str, hostvars: dict[str, Any], serving: ServingVars) -> str:
    """Where other hosts (the router) reach this host's vLLM."""
    if serving.bind_address not in ("127.0.0.1", "0.0.0.0"):
        return serving.bind_address
    return str(hostvars.get("ansible_host", host))


def _check_bind(host: str, serving: ServingVars) -> None:
    if ipaddress.ip_address(serving.bind_address).is_unspecified and not serving.allow_public_bind:
        raise UserError(
            f"host {host}: vllm_serving_bind_address {serving.bind_address} would expose the "
            "server on every interface: use 127.0.0.1 or the private link's address, or set "
            "vllm_serving_allow_public_bind: true if that is really wanted"
        )


def _base_env(profile: Profile, serving: ServingVars) -> dict[str, str]:
    # Privacy by default (sparkops.privacy): the weights are on the host before vLLM starts (a
    # mounted vllm_serving_model_dir, or the deploy's host-side download), so vLLM never
    # reaches the hub, unless vllm_serving_model_download is false.
    env = private_env(offline=bool(serving.model_dir) or serving.model_download)
    env.update(profile.env)
    env.update(serving.extra_env)
    return env


def _secrets(serving: ServingVars, secrets: dict[str, str]) -> dict[str, str]:
    out = {}
    token = serving.hf_token or secrets.get("HF_TOKEN", "")
    if token:
        out["HF_TOKEN"] = token
    api_key = serving.api_key or secrets.get("VLLM_API_KEY", "")
    if api_key:
        out["VLLM_API_KEY"] = api_key  # vLLM reads it as --api-key, kept off the command line
    for name, value in out.items():
        try:
            envfile.quote(value)
        except envfile.EnvValueError as err:
            raise UserError(f"{name} {err}: write it on one line") from None
    return out


def _vllm_service(
    profile: Profile,
    serving: ServingVars,
    *,
    stages: int,
    parallel: list[str] | None = None,
    network_host: bool = False,
    env: dict[str, str] | None = None,
) -> VllmService:
    model = serving.model_dir or profile.model
    listen = serving.bind_address if network_host else "0.0.0.0"
    command = serve_command(
        profile, model=model, host=listen, port=serving.port, parallel=parallel, stages=stages
    )
    return {
        "image": serving.image or profile.image or KIT_IMAGES[profile.platform],
        "command": command,
        "env": {**_base_env(profile, serving), **(env or {})},
        "network_host": network_host,
        "ports": [] if network_host else [f"{serving.bind_address}:{serving.port}:{serving.port}"],
        "gpus": serving.gpus and profile.platform == "gb10",
        "hf_cache": serving.hf_cache,
        "model_dir": serving.model_dir,
        "extra_volumes": serving.extra_volumes,
        "memlock": serving.memlock,
        "health_url": f"{local_base_url(listen, serving.port)}/health",
        "start_period": serving.start_period,
        "rdma": False,
    }


def _ray_env(ray: RayVars, own_address: str, head_address: str) -> dict[str, str]:
    """The two-Spark NCCL/Ray consensus env (NVIDIA playbooks + eugr), from the inventory."""
    iface = ray.interface
    return {
        "VLLM_HOST_IP": own_address,
        "MASTER_ADDR": head_address,
        "NCCL_SOCKET_IFNAME": iface,
        "GLOO_SOCKET_IFNAME": iface,
        "TP_SOCKET_IFNAME": iface,
        "UCX_NET_DEVICES": iface,
        "OMPI_MCA_btl_tcp_if_include": iface,
        "NCCL_IB_HCA": ray.ib_hca,
        "NCCL_IB_DISABLE": "0",
        "RAY_memory_monitor_refresh_ms": "0",
        "RAY_num_prestart_python_workers": "0",
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
    }


# Serving hosts each topology takes: (fewest, most; None: no upper bound). Data parallel
# scales to any number of Sparks (each replica is independent, the router lists them all);
# the pipeline-parallel pair is two stages over one QSFP cable.
HOST_COUNTS: dict[str, tuple[int, int | None]] = {
    "single": (1, 1),
    "data-parallel": (2, None),
    "pipeline-parallel": (2, 2),
}
PIPELINE_STAGES = 2
# A Spark's GPU memory budget when the inventory sets none: the example inventories'
# vllm_serving_gpu_memory_gib (about 121.7 GiB of the 128 GB are visible to the OS).
SPARK_GPU_MEMORY_GIB = 110.0


def _advise_against_needless_pipeline(profile: Profile, serving: ServingVars) -> None:
    """Warn (one line, the render goes on) when a pipeline-parallel stack serves a model that
    fits one Spark: two data-parallel replicas then serve more, without the pipeline's bubble
    or the link's latency in every step."""
    budget = serving.gpu_memory_gib or SPARK_GPU_MEMORY_GIB
    if profile.platform != "gb10" or not fits_one_host(profile, budget):
        return
    need = memory_need_bytes(profile, budget) / GIB
    warnings.warn(
        f"profile {profile.name} fits one Spark (weights + KV cache {need:.1f} GiB of a "
        f"{budget:.0f} GiB budget): pipeline parallel over two only slows it; serve it data "
        "parallel (sparkops_topology: pair-dp, a replica per Spark), or give pair-pp a model "
        "that needs two Sparks (e.g. the gb10-qwen25-72b-bf16 profile)",
        Advice,
        stacklevel=3,
    )


def _check_host_count(topology: str, hosts: list[str], named: tuple[str, str]) -> None:
    """Refuse a host count the topology cannot serve, quoting the user's word (`named`:
    topology_named's variable and word), not the internal serving shape."""
    if topology not in HOST_COUNTS:
        raise UserError(
            f"vllm_serving_topology '{topology}' is unknown: use one of {', '.join(TOPOLOGY_OF)}"
        )
    fewest, most = HOST_COUNTS[topology]
    if fewest <= len(hosts) and (most is None or len(hosts) <= most):
        return
    if most is None:
        need = f"at least {fewest} serving hosts"
    else:
        need = f"exactly {fewest} serving host{'s' if fewest > 1 else ''}"
    variable, word = named
    raise UserError(
        f"topology {word} ({variable}) needs {need}, the inventory has {len(hosts)} "
        f"({', '.join(hosts)}): list {need.replace(' serving', '')} under the "
        f"'{SERVING_GROUP}' group"
    )


def effective_base(serving: ServingVars, profile: Profile) -> str:
    """The image docker/vllm is built FROM: the inventory's, else the profile's, else the
    upstream image of the kit's vLLM pin."""
    return serving.base_image or profile.base_image or VLLM_BASE_IMAGE


def plan_stack(
    inv: Inventory,
    *,
    profile: Profile | None = None,
    secrets: dict[str, str] | None = None,
    concurrency: int | None = None,
) -> dict[str, HostStack]:
    """Validate the inventory and profile, then decide what each serving host runs."""
    secrets = secrets or {}
    hosts = serving_hosts(inv)
    topology = serving_topology(inv.hostvars[hosts[0]])  # first: a misspelt word says so
    parsed = {h: split_prefixed(h, inv.hostvars[h]) for h in hosts}
    first: ServingVars = parsed[hosts[0]]["vllm_serving_"]  # type: ignore[assignment]
    profile = profile or load_profile(first.profile)
    _check_host_count(topology, hosts, topology_named(inv.hostvars[hosts[0]]))
    # The stage count, decided here once and handed on as a number (the rules, the command).
    stages = pipeline_stages(profile, PIPELINE_STAGES if topology == "pipeline-parallel" else 1)
    if topology == "pipeline-parallel":
        _advise_against_needless_pipeline(profile, first)
    stacks: dict[str, HostStack] = {}
    for host in hosts:
        serving: ServingVars = parsed[host]["vllm_serving_"]  # type: ignore[assignment]
        _check_bind(host, serving)
        sec = _secrets(serving, secrets)
        facts = DeployFacts(
            host=host,
            concurrency=concurrency or serving.concurrency,
            gpu_memory_gib=serving.gpu_memory_gib,
            hf_token=bool(sec.get("HF_TOKEN")),
            pipeline_parallel=stages,
        )
        check_profile(profile, facts)
        serving = serving.model_copy(update={"base_image": effective_base(serving, profile)})
        unplanned = cast(VllmService, {})  # each topology's planner below sets it
        stacks[host] = HostStack(
            host,
            "single",
            serving,
            profile,
            unplanned,
            sec,
            stages=stages,
            topology=topology_named(inv.hostvars[hosts[0]])[1],
        )
    if topology == "single":
        only = stacks[hosts[0]]
        only.vllm = _vllm_service(profile, only.serving, stages=stages)
    elif topology == "data-parallel":
        _plan_data_parallel(inv, hosts, parsed, stacks, profile, secrets, stages)
    else:
        _plan_pipeline(inv, hosts, parsed, stacks, profile, stages)
    return stacks


def _plan_data_parallel(
    inv: Inventory,
    hosts: list[str],
    parsed: dict[str, dict[str, BaseModel]],
    stacks: dict[str, HostStack],
    profile: Profile,
    secrets: dict[str, str],
    stages: int,
) -> None:
    for host in hosts:
        stacks[host].role = "replica"
        stacks[host].vllm = _vllm_service(profile, stacks[host].serving, stages=stages)
    router_vars = cast(RouterVars, parsed[hosts[0]]["litellm_router_"])
    master_key = router_vars.master_key or secrets.get(MASTER_KEY_ENV, "")
    if not master_key:
        raise UserError(
            "the LiteLLM router needs a master key: `sparkops render` generates one into "
            "router.env (keep it), or set LITELLM_MASTER_KEY"
        )
    backends: list[RouterBackend] = []
    for host in hosts:
        serving = stacks[host].serving
        address = _reachable_address(host, inv.hostvars[host], serving)
        backends.append({"host": host, "api_base": f"http://{address}:{serving.port}/v1"})
    stacks[hosts[0]].router = {
        "settings": router_vars,
        "model_name": router_vars.model_name or profile.served_model_name,
        "served_model_name": profile.served_model_name,
        "backends": backends,
        "api_key": bool(stacks[hosts[0]].secrets.get("VLLM_API_KEY")),
        "master_key": master_key,
        # No telemetry, and no model-cost-map download from the internet at start-up.
        "env": dict(TELEMETRY_OFF),
    }


def _plan_pipeline(
    inv: Inventory,
    hosts: list[str],
    parsed: dict[str, dict[str, BaseModel]],
    stacks: dict[str, HostStack],
    profile: Profile,
    stages: int,
) -> None:
    head = hosts[0]
    rays = {h: cast(RayVars, parsed[h]["ray_cluster_"]) for h in hosts}
    for host in hosts:
        if not rays[host].address:
            raise UserError(
                f"host {host}: pipeline parallel needs the QSFP address: set "
                "ray_cluster_address (e.g. to the address the qsfp_network role gives)"
            )
    head_ray = rays[head]
    head_addr = head_ray.address
    for rank, host in enumerate(hosts):
        ray = rays[host]
        stack = stacks[host]
        stack.role = "head" if rank == 0 else "worker"
        env = _ray_env(ray, ray.address, head_addr)
        if head_ray.backend == "ray":
            parallel = ray_parallel_flags(len(hosts)) if rank == 0 else None
        else:
            parallel = native_parallel_flags(
                stages=len(hosts),
                rank=rank,
                master_addr=head_addr,
                master_port=head_ray.master_port,
            )
        service = _vllm_service(
            profile, stack.serving, stages=stages, parallel=parallel, network_host=True, env=env
        )
        service["rdma"] = True
        stack.vllm = service
        stack.ray = {
            "backend": head_ray.backend,
            "role": stack.role,
            "settings": ray,
            "head_address": head_addr,
            "head_port": head_ray.port,
            "address": ray.address,
            "nodes": len(hosts),
            "wait_timeout": head_ray.wait_timeout,
        }


def client_endpoints(inv: Inventory, stacks: dict[str, HostStack]) -> list[str]:
    """The OpenAI base URLs a batch client gives as --endpoint, following the inventory.

    Every host that answers HTTP (not a pipeline worker), at the address other hosts reach
    it on: with data parallel over N Sparks the client spreads its calls over all N replicas
    itself (least outstanding requests, a dead one benched), so a job needs no router hop and
    no master key; the router stays for clients that want one URL.
    A loopback-bound server is reached as 127.0.0.1: only a client on that host can call it.
    """
    urls = []
    for host, stack in stacks.items():
        if stack.role == "worker":
            continue
        serving = stack.serving
        address = (
            serving.bind_address
            if ipaddress.ip_address(serving.bind_address).is_loopback
            else _reachable_address(host, inv.hostvars[host], serving)
        )
        urls.append(f"http://{address}:{serving.port}/v1")
    return urls
