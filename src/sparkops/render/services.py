"""The services one host runs, typed: what render/stack.py plans and the templates render
(the compose file, the router's config, Ray's start script). TypedDicts, so the templates
read them as the mappings they always were."""

from __future__ import annotations

from typing import Literal, TypedDict

from sparkops.render.settings import RayVars, RouterVars


class VllmService(TypedDict):
    """The vLLM container of one host, as the compose template renders it."""

    image: str
    command: list[str]
    env: dict[str, str]
    network_host: bool
    ports: list[str]
    gpus: bool
    hf_cache: str
    model_dir: str
    extra_volumes: list[str]
    memlock: int | None
    health_url: str
    start_period: int
    rdma: bool


class RouterBackend(TypedDict):
    host: str
    api_base: str


class RouterService(TypedDict):
    """The LiteLLM router of a data-parallel stack (on its first host)."""

    settings: RouterVars
    model_name: str
    served_model_name: str
    backends: list[RouterBackend]
    api_key: bool
    master_key: str
    env: dict[str, str]


class RayService(TypedDict):
    """One host's part of a pipeline-parallel stack (Ray, or vLLM's native multi-node)."""

    backend: Literal["ray", "mp"]
    role: str
    settings: RayVars
    head_address: str
    head_port: int
    address: str
    nodes: int
    wait_timeout: int
