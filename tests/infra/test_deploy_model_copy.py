"""On a pair, the deploy downloads a hub model once and copies it over the private link (issue 24
item 2): two systemd hosts stand in for the Sparks, a Docker network of their own for the QSFP
cable (each host's address on it is its qsfp_network_address), the default bridge for apt.

The role's model phase runs for real (vllm_serving's render.yml then model.yml, as deploy.yml
runs them before vLLM starts; no vLLM is served here): the first host holds the kit's real small
model (SmolLM2-135M-Instruct, 270 MB) complete in its Hugging Face cache, laid out as
huggingface_hub leaves it (blobs, snapshot symlinks, refs) with the fetcher's record; the second
host's cache is empty. The second must end with the model complete by the fetcher's own offline
check, byte for byte the first's, sent by the first host's rsync daemon to the second's address
on the private network, with no download started anywhere (no hub is reachable here); a second
run changes nothing. Hostile: the second host's end of the link unplugged, its disk too small for
the model, the first host given an address that is not its own: each stops the run with the
message a user reads (the link, the address, the fix) before the phase after the model, in
bounded time, and leaves no daemon running.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_model
from tests.plugins.hosts import Host, image_ref, run_docker
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
FETCHER = REPO / "ansible/roles/vllm_serving/files/model-fetch.py"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
CACHE = "/var/lib/sparkops/hf-cache"
PORT = 8873  # vllm_serving_model_copy_port's default
PLAY = """
- name: The model phase of deploy.yml on each Spark
  hosts: sparks
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Render this host's stack
      ansible.builtin.include_role:
        name: vllm_serving
        tasks_from: render.yml
    - name: Put the model on disk before vLLM starts
      ansible.builtin.include_role:
        name: vllm_serving
        tasks_from: model.yml
    - name: Stand for the start of vLLM, which follows the model phase
      ansible.builtin.debug:
        msg: the model phase passed on {{ inventory_hostname }}
"""

spec = importlib.util.spec_from_file_location("model_fetch", FETCHER)
assert spec and spec.loader
fetcher = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetcher)


def hub_cache(model: Path, cache: Path, repo: str) -> None:
    """``cache`` as huggingface_hub's snapshot_download leaves ``model`` as ``repo`` (files as
    blobs named by hash, the snapshot of symlinks to them, refs/main), and the record the
    fetcher writes once it verified the download."""
    sha = hashlib.sha1(repo.encode()).hexdigest()
    base = cache / "hub" / f"models--{fetcher.slug(repo)}"
    snapshot = base / "snapshots" / sha
    (base / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    sizes = {}
    for path in sorted(model.iterdir()):
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, base / "blobs" / blob)
        (snapshot / path.name).symlink_to(f"../../blobs/{blob}")
        sizes[path.name] = path.stat().st_size
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(sha)
    record = {"repo": repo, "revision": sha, "snapshot": str(snapshot.relative_to(cache))}
    fetcher.record_dir(cache).mkdir(parents=True)
    fetcher.record_path(repo, ".json", cache).write_text(json.dumps({**record, "files": sizes}))
    # a token a `huggingface-cli login` leaves beside the hub folder: never to be copied
    (cache / "token").write_text("hf_not_for_the_other_spark")


def stack_vars(folder: Path) -> dict:
    """A pair-dp stack of a CPU profile whose model is the hub repo MODEL (no local folder)."""
    profile = yaml.safe_load((REPO / "src/sparkops/profiles/cpu-tiny.yaml").read_text())
    profile.update(name="cpu-smollm2", model=MODEL, served_model_name="smollm2")
    (folder / "cpu-smollm2.yaml").write_text(yaml.safe_dump(profile))
    return {
        "vllm_serving_topology": "pair-dp",
        "vllm_serving_profile": str(folder / "cpu-smollm2.yaml"),
        "vllm_serving_image": image_ref("amd64"),
        "vllm_serving_gpus": False,
        "vllm_serving_hf_cache": CACHE,
        "litellm_router_master_key": f"sk-{secrets.token_hex(8)}",
    }


@dataclass
class Pair:
    a: Host
    b: Host
    network: str
    folder: Path

    def address(self, host: Host) -> str:
        """The host's address on the pair's own network (the 'QSFP cable'); '' when unplugged."""
        net = f'index .NetworkSettings.Networks "{self.network}"'
        fmt = "{{with " + net + "}}{{.IPAddress}}{{end}}"
        return run_docker("inspect", "--format", fmt, host.id).stdout.strip()

    def run(self, name: str, *args: str, **host_vars: dict) -> PlaybookRun:
        """The model phase on both hosts, from an inventory shaped like inventory/pair-dp (each
        host's address on the pair's network as its qsfp_network_address)."""
        folder = self.folder / name
        folder.mkdir()
        members = {
            label: {
                **host.ansible_vars,
                "qsfp_network_address": self.address(host) or "192.0.2.99",
                **host_vars.get(label.replace("-", "_"), {}),
            }
            for label, host in (("spark-a", self.a), ("spark-b", self.b))
        }
        tree = {
            "all": {
                "vars": stack_vars(folder),
                "children": {"sparks": {"hosts": members}},
            }
        }
        (folder / "hosts.yml").write_text(yaml.safe_dump(tree))
        (folder / "play.yml").write_text(PLAY)
        env = {
            "ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter"),
            "ANSIBLE_ROLES_PATH": str(REPO / "ansible" / "roles"),
        }
        run = run_playbook(folder / "play.yml", folder / "hosts.yml", *args, env=env, timeout=600)
        (folder / "output.txt").write_text(run.output)
        print(f"\nmodel copy, {name}: {run.seconds:.0f} s, rc {run.rc}, changed {run.changed}")
        return run


@contextmanager
def private_network(hosts: list[Host]) -> Iterator[str]:
    """A Docker network of the pair's own (internal: no way out), standing in for the QSFP
    cable; each host keeps the default bridge, its way to Debian's mirror."""
    name = f"sparkops-qsfp-{secrets.token_hex(4)}"
    run_docker("network", "create", "--internal", name)
    try:
        for host in hosts:
            run_docker("network", "connect", name, host.id)
        yield name
    finally:
        for host in hosts:
            run_docker("network", "disconnect", "--force", name, host.id, check=False)
        run_docker("network", "rm", name, check=False)


def check(host: Host) -> tuple[int, str]:
    """The fetcher's own offline check of ``host``'s cache."""
    argv = ["env", f"HF_HOME={CACHE}", "python3", "/tmp/model-fetch.py", "check", MODEL]
    done = host.exec(argv)
    return done.returncode, done.stdout.strip()


def listening(host: Host) -> bool:
    """Whether anything listens on the copy's port on ``host``."""
    return f":{PORT} " in host.exec(["ss", "-Hltn"]).stdout


def digests(host: Host) -> str:
    """sha256 of every file of the model in ``host``'s cache, links followed, by name."""
    snapshot = f"{CACHE}/hub/models--{fetcher.slug(MODEL)}/snapshots"
    return host.exec(f"cd {snapshot}/* && sha256sum -- * | sort -k2").stdout


def served(run: PlaybookRun) -> str:
    """The first host's word on what its daemon served."""
    return run.stdout[run.stdout.find("Say what the first Spark served") :][:1500]


def assert_stopped_cleanly(run: PlaybookRun, pair: Pair, *words: str) -> None:
    """The run stopped with the words a user reads, before the phase after the model, within
    the run's bound, without a traceback, with the first host's daemon stopped and removed."""
    assert run.rc != 0, run.stdout[-3000:]
    for word in words:
        assert word in run.text, run.stdout[-4000:]
    assert "the model phase passed" not in run.text  # nothing after the model phase ran
    assert "Traceback" not in run.output
    # A wait for the download timeout (7,200 s) would fail the run's own bound (600 s) first.
    assert not listening(pair.a)
    assert pair.a.exec(["test", "-e", "/run/sparkops-model-copy"]).returncode == 1
    assert check(pair.b)[0] == 3  # still incomplete: vLLM would not start on it


@pytest.fixture(scope="module")
def pair(systemd_host: Callable[..., Host], tmp_path_factory) -> Iterator[Pair]:
    a, b = systemd_host(arch="amd64"), systemd_host(arch="amd64")
    folder = tmp_path_factory.mktemp("copy")
    cache = folder / "hf-cache"
    hub_cache(ensure_model("smollm2"), cache, MODEL)
    for host in (a, b):
        host.exec(["mkdir", "-p", str(Path(CACHE).parent)], check=True)
        run_docker("cp", str(FETCHER), f"{host.id}:/tmp/model-fetch.py")
    run_docker("cp", str(cache), f"{a.id}:{CACHE}")
    with private_network([a, b]) as network:
        yield Pair(a, b, network, folder)


@pytest.fixture(scope="module")
def converged(pair: Pair) -> tuple[PlaybookRun, PlaybookRun]:
    """The copy, then the same run again."""
    return pair.run("first"), pair.run("again")


def test_the_second_spark_gets_the_model_over_the_private_link(pair: Pair, converged) -> None:
    first, _ = converged
    assert first.rc == 0, first.stdout[-5000:]
    assert check(pair.b) == check(pair.a)
    assert check(pair.b)[0] == 0, check(pair.b)
    assert digests(pair.b) == digests(pair.a) != ""
    # nothing downloaded: the first host's cache was complete, the second copied it
    assert "Start the download" not in first.text and "would download" not in first.text
    # the first host's daemon served the second host's address on the pair's network
    assert re.search(
        rf"rsync on model/ from sparkops@\S+ \({re.escape(pair.address(pair.b))}\)", first.text
    ), served(first)
    assert (
        f"copied from spark-a ({pair.address(pair.a)}:{PORT}) over the private link" in first.text
    )
    assert "the model phase passed on spark-b" in first.text
    # only the model and its record: the login token beside the hub folder stayed behind
    assert pair.b.exec(["test", "-e", f"{CACHE}/token"]).returncode == 1
    assert "hf_not_for_the_other_spark" not in first.output
    # the daemon ended with the copy, its password and settings with it; the receiver's copy of
    # the password is gone too
    assert not listening(pair.a)
    assert pair.a.exec(["test", "-e", "/run/sparkops-model-copy"]).returncode == 1
    assert pair.b.exec(["test", "-e", "/run/sparkops-model-copy"]).returncode == 1


def test_a_second_run_changes_nothing(converged) -> None:
    _, again = converged
    assert again.rc == 0, again.stdout[-5000:]
    assert again.changed == 0, again.stdout[-5000:]
    assert "copied from" not in again.text


def test_a_later_run_copies_only_what_is_missing(pair: Pair, converged) -> None:
    """One file lost on the second host: the next run sends it alone (rsync's own count in the
    first host's daemon log), not the 270 MB again."""
    config = f"{CACHE}/hub/models--{fetcher.slug(MODEL)}/snapshots/*/config.json"
    pair.b.exec(f"rm -f $(readlink -f {config})", check=True)
    assert check(pair.b)[0] == 3
    run = pair.run("one-file")
    assert run.rc == 0, run.stdout[-4000:]
    assert check(pair.b)[0] == 0
    sent = re.search(r"sent (\d+) bytes", served(run))
    assert sent and int(sent.group(1)) < 1_000_000, served(run)


def test_check_mode_says_where_the_copy_would_come_from(pair: Pair, converged) -> None:
    pair.b.exec(["rm", "-rf", CACHE], check=True)
    run = pair.run("check", "--check")
    assert run.rc == 0, run.stdout[-4000:]
    assert (
        f"would copy what is missing of {MODEL} into {CACHE} from spark-a "
        f"({pair.address(pair.a)}:{PORT}) over the private link, nothing from the hub"
    ) in run.text, run.stdout[-4000:]
    assert check(pair.b)[0] == 3  # check mode copied nothing
    assert not listening(pair.a)
    # vllm_serving_model_copy: false on the second: it would download its own
    alone = pair.run("check-alone", "--check", spark_b={"vllm_serving_model_copy": False})
    assert alone.rc == 0, alone.stdout[-4000:]
    assert f"would download {MODEL} into {CACHE} (what is missing, with progress)" in alone.text
    assert "would copy" not in alone.text


def test_an_unplugged_link_stops_the_run_naming_the_link(pair: Pair, converged) -> None:
    pair.b.exec(["rm", "-rf", CACHE], check=True)
    run_docker("network", "disconnect", pair.network, pair.b.id)
    try:
        run = pair.run("unplugged")
    finally:
        run_docker("network", "connect", pair.network, pair.b.id)
    assert_stopped_cleanly(
        run,
        pair,
        f"spark-b cannot reach the first Spark spark-a at {pair.address(pair.a)}:{PORT} over "
        "the private link",
        "Check that the link is up on both Sparks",
        "vllm_serving_model_copy: false",
    )


def test_a_copy_cut_short_by_a_full_disk_stops_the_run(pair: Pair, converged) -> None:
    pair.b.exec(["rm", "-rf", CACHE], check=True)
    pair.b.exec(["mkdir", "-p", CACHE], check=True)
    mount = pair.b.exec(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", CACHE])
    assert mount.returncode == 0, mount.stderr
    try:
        run = pair.run("full")
    finally:
        pair.b.exec(["umount", CACHE])
    assert_stopped_cleanly(
        run,
        pair,
        f"The copy of {MODEL} from spark-a ({pair.address(pair.a)}:{PORT}) to spark-b stopped "
        "before it was complete",
        "No space left on device",
        f"Free space in {CACHE} on spark-b",
    )


def test_an_address_the_first_spark_does_not_have_stops_the_run(pair: Pair, converged) -> None:
    pair.b.exec(["rm", "-rf", CACHE], check=True)
    run = pair.run("not-its-address", spark_a={"vllm_serving_model_copy_address": "192.0.2.10"})
    assert_stopped_cleanly(
        run,
        pair,
        "spark-a cannot serve HuggingFaceTB/SmolLM2-135M-Instruct to the other Sparks on "
        f"192.0.2.10:{PORT}",
        "must be spark-a's own address on the private link",
    )
