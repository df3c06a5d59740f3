"""The images a host's stack runs, and what the deploy checks in each before `up`.

Apart from render/stack.py (what each host runs) because this is the deploy's pre-flight of
those images: the docker/ folder and build args of the kit's own, and a `docker run` probe
for the Python modules each must hold.
"""

from __future__ import annotations

from typing import Any

from sparkops.render.settings import RouterVars
from sparkops.render.stack import KIT_IMAGES, ROUTER_IMAGE, HostStack
from sparkops.versions import RAY_VERSION


def _python_probe(modules: list[str], imports: list[str]) -> str:
    """A python3 one-liner printing one JSON line: the modules it cannot find or load, and the
    machine its binaries run as (an image imported without a platform claims the engine's
    architecture in its metadata whatever its binaries are; emulation runs them anyway).

    find_spec does not import (vLLM's import loads torch: seconds per probe); xxhash is
    imported because vLLM accepts `--prefix-caching-hash-algo xxhash` and fails only later.
    """
    return (
        "import importlib.util, json, platform, sys\n"
        f"missing = [m for m in {modules!r} if importlib.util.find_spec(m) is None]\n"
        f"for m in [m for m in {imports!r} if m not in missing]:\n"
        "    try:\n"
        "        __import__(m)\n"
        "    except Exception as err:\n"
        "        missing.append(f'{m} ({type(err).__name__}: {err})')\n"
        "print(json.dumps({'missing': missing, 'machine': platform.machine()}))"
    )


def _probe_argv(image: str, env: dict[str, str], volumes: list[str], code: str) -> list[str]:
    """`docker run` of python3 in the image, offline, with the service's env and mounts."""
    environment = [x for key, value in sorted(env.items()) for x in ("--env", f"{key}={value}")]
    return [
        "docker", "run", "--rm", "--network", "none", "--entrypoint", "python3",
        *volumes, *environment, image, "-c", code,
    ]  # fmt: skip


def _vllm_build(stack: HostStack) -> dict[str, Any] | None:
    """docker/vllm for the kit's GB10 image: FROM the base image pinned by its digest."""
    if stack.vllm["image"] != KIT_IMAGES["gb10"]:
        return None
    serving = stack.serving
    problem = ""
    if not serving.base_digest:
        problem = (
            f"set vllm_serving_base_digest to the sha256 digest of {serving.base_image} for "
            f"linux/arm64 (`docker buildx imagetools inspect {serving.base_image}`): the kit "
            "builds vLLM only from a pinned base"
        )
    return {
        "context": "vllm",
        "args": {
            "VLLM_BASE": serving.base_image,
            "VLLM_DIGEST": serving.base_digest,
            "WITH_RAY": "1",
            "RAY_VERSION": RAY_VERSION,
        },
        "problem": problem,
    }


def required_images(stack: HostStack) -> list[dict[str, Any]]:
    """Every image this host's stack runs, with what the deploy checks in it before `up`.

    Each: name; `build` (the docker/ folder that builds it and its build args, with `problem`
    set when it cannot be built as configured; None for an image the kit does not build, such
    as NVIDIA's container or the CPU stand-in); `modules` that must be in it (vllm; xxhash
    when the profile hashes with it; ray for the Ray pipeline pair; flashinfer_cubin in the
    kit's own GB10 image, which docker/vllm builds with FlashInfer's kernels so that vLLM
    fetches nothing at start: an image built before it did lacks them; litellm in the router);
    and `probe`, the argv of a `docker run` that checks them with the stack's own mounts and
    environment (a venv mounted from the host counts, as it does at run time).
    """
    vllm = stack.vllm
    modules = ["vllm"]
    imports: list[str] = []
    if (stack.profile.vllm.prefix_caching_hash_algo or "").startswith("xxhash"):
        modules.append("xxhash")
        imports.append("xxhash")
    if stack.ray and stack.ray["backend"] == "ray":
        modules.append("ray")
    build = _vllm_build(stack)
    if build is not None:
        modules.append("flashinfer_cubin")
    mounts = [vllm["model_dir"]] if vllm["model_dir"] else []
    mounts += list(vllm["extra_volumes"])
    volumes = [x for path in mounts for x in ("--volume", f"{path}:{path}:ro")]
    images = [
        {
            "name": vllm["image"],
            "build": build,
            "modules": modules,
            "probe": _probe_argv(
                vllm["image"], vllm["env"], volumes, _python_probe(modules, imports)
            ),
        }
    ]
    if stack.router:
        settings: RouterVars = stack.router["settings"]
        router = settings.image
        images.append(
            {
                "name": router,
                "build": {
                    "context": "litellm",
                    "args": {
                        "BASE_IMAGE": settings.base_image,
                        "LITELLM_VERSION": settings.version,
                    },
                    "problem": "",
                }
                if router.partition(":")[0] == ROUTER_IMAGE.partition(":")[0]
                else None,
                "modules": ["litellm"],
                "probe": _probe_argv(
                    router, stack.router["env"], [], _python_probe(["litellm.proxy"], [])
                ),
            }
        )
    return images
