"""FlashInfer's precompiled kernels in the GB10 image, at exactly the image's FlashInfer release.

Why: vLLM (0.32: vllm/utils/flashinfer.py) treats FlashInfer's kernels as optional. Without
`flashinfer-cubin` it asks NVIDIA's kernel artifactory over the network at start (and turns
FlashInfer's TRT-LLM/XQA attention off when that fails), and without `flashinfer-cubin`
*and* nvcc + ninja it turns FlashInfer off altogether; without `flashinfer-jit-cache` (CUDA
12.9 and later) FlashInfer compiles its kernels with nvcc at first use, for minutes. A
mismatched pair is worse: FlashInfer refuses to import kernels of another release. A Spark
that is offline after set-up must therefore get both packages when the image is built, at
the release of the `flashinfer-python` the pinned base image already holds (the base digest
pins it, so this pins them too).

The rule is vLLM's own (`warn_if_flashinfer_kernels_missing`): flashinfer-cubin unless
VLLM_HAS_FLASHINFER_CUBIN is set, flashinfer-jit-cache where torch is built for CUDA >= 12.9,
each at flashinfer-python's public version. The install is what `vllm download-kernels`
does, made explicit: one pinned requirement per package, from FlashInfer's own wheel index
only (`--index-url`, so no other index can answer for these names), `--no-deps` (nothing else
in the image moves), then the check below, which fails the build.

    python3 flashinfer_kernels.py check [--cuda 13.0]
    python3 flashinfer_kernels.py install [--cuda 13.0] [--index URL] [--dry-run]

Exit status: 0 complete; 1 kernels missing or mismatched (one line on stderr naming each and
the fix); 2 usage. Standard library and `packaging` only (both in every vLLM image).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
from dataclasses import dataclass

from packaging.version import Version

# FlashInfer moved flashinfer-cubin off PyPI at 0.6.14 (PyPI's size limit); both kernel
# packages are served from its own index, jit-cache per CUDA version under /cuXYZ.
DEFAULT_INDEX = "https://flashinfer.ai/whl"
CUBIN = "flashinfer-cubin"
JIT_CACHE = "flashinfer-jit-cache"


@dataclass(frozen=True)
class Kernel:
    """One kernel package the image needs, the version it must have, and where it comes from."""

    name: str
    want: str
    have: str | None
    index: str

    @property
    def ok(self) -> bool:
        return self.have is not None and Version(self.have).public == self.want


def installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda() -> str:
    """torch's CUDA version, as vLLM reads it ('' for a CPU build)."""
    import torch  # heavy: only where --cuda is not given

    return torch.version.cuda or ""


def needed(cuda: str, index: str) -> tuple[str, list[Kernel]]:
    """flashinfer-python's version and the kernel packages it needs (vLLM 0.32's rule)."""
    flashinfer = installed("flashinfer-python")
    if flashinfer is None:
        raise SystemExit(
            "flashinfer_kernels: flashinfer-python is not installed in this image: build "
            "FROM a vllm/vllm-openai image (it ships FlashInfer), or drop this step"
        )
    want = Version(flashinfer).public
    kernels = []
    if os.environ.get("VLLM_HAS_FLASHINFER_CUBIN", "0") in ("", "0"):
        kernels.append(Kernel(CUBIN, want, installed(CUBIN), index))
    if cuda and Version(cuda) >= Version("12.9"):
        tag = "cu" + "".join(cuda.split(".")[:2])
        kernels.append(Kernel(JIT_CACHE, want, installed(JIT_CACHE), f"{index}/{tag}"))
    return want, kernels


def describe(kernel: Kernel) -> str:
    return f"{kernel.name} {kernel.have or 'not installed'}"


def check(cuda: str, index: str) -> int:
    want, kernels = needed(cuda, index)
    bad = [k for k in kernels if not k.ok]
    if bad:
        print(
            f"flashinfer_kernels: FlashInfer's precompiled kernels do not match "
            f"flashinfer-python {want} ({', '.join(describe(k) for k in bad)}): vLLM would "
            "download or compile them at start, or fail to import them; rebuild the image "
            "(docker/vllm installs them) or run `vllm download-kernels` in it",
            file=sys.stderr,
        )
        return 1
    found = ", ".join(describe(k) for k in kernels) or "no kernel package needed"
    print(f"flashinfer-python {want}: {found}")
    return 0


def install(cuda: str, index: str, dry_run: bool) -> int:
    _, kernels = needed(cuda, index)
    for kernel in kernels:
        if kernel.ok:
            continue
        cmd = [
            sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps",
            "--index-url", kernel.index, f"{kernel.name}=={kernel.want}",
        ]  # fmt: skip
        print(" ".join(cmd), flush=True)
        if not dry_run:
            subprocess.run(cmd, check=True)
    return 0 if dry_run else check(cuda, index)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashinfer_kernels", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["check", "install"])
    parser.add_argument("--cuda", help="torch's CUDA version (default: read from torch)")
    parser.add_argument("--index", default=DEFAULT_INDEX, help="FlashInfer's wheel index")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands only")
    args = parser.parse_args(argv)
    cuda = torch_cuda() if args.cuda is None else args.cuda
    index = args.index.rstrip("/")
    if args.action == "check":
        return check(cuda, index)
    return install(cuda, index, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
