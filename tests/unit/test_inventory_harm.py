"""Inventories that passed the check and then harmed (issue 37 item 11).

`sparkops render --out` into the inventory folder made the next playbook run read the rendered
files as inventory sources, run memory-guard.sh as an inventory script on the controller (as
root it dropped the page cache) and keep serving.env's secrets in the folder the docs say to
commit; two Sparks with one address, a laptop inventory left with `ansible_connection: local`
and a desktop's address, 135 GiB of weights for a 128 GB Spark and `--concurrency -5` all
passed. Each is now refused before any host is touched, by `sparkops render` (exit 2, one
line, nothing written) and, where the inventory alone says it, by validate_inventory.yml in
the same words (sparkops.render.inventory_checks).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from tests.plugins.cli import sparkops
from tests.plugins.inventories import make_inventory
from tests.plugins.playbook import run_playbook

REPO = Path(__file__).resolve().parents[2]


def _copy(example: str, tmp_path: Path) -> Path:
    inventory = tmp_path / example
    shutil.copytree(REPO / "inventory" / example, inventory)
    return inventory


def _edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def _render(inventory: Path, out: str | Path, *args: str, cwd: Path):
    return sparkops(
        "render", "--inventory", str(inventory), "--out", str(out), *args, limit=120, cwd=cwd
    )


def _refused_line(proc) -> str:
    """The one line a refused render prints (exit 2, no traceback)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkops: error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0].removeprefix("sparkops: error: ")


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_render_into_the_inventory_folder_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    inventory = _copy("single", tmp_path)
    before = _files(inventory)
    line = _refused_line(_render(inventory, inventory, cwd=tmp_path))
    assert line == (
        f"--out {inventory} is inside the inventory folder {inventory}: the next playbook run "
        "would read the rendered files as inventory sources and run memory-guard.sh as an "
        "inventory script on this machine, and serving.env's secrets would sit in the "
        "inventory; render outside it (e.g. sparkops render --out /tmp/stack)"
    )
    assert _files(inventory) == before
    # Anywhere under it, relative or not, and a folder that is created on the way.
    line = _refused_line(_render(inventory, "single/stack/new", cwd=tmp_path))
    assert line.startswith(f"--out single/stack/new is inside the inventory folder {inventory}:")
    assert _files(inventory) == before


def test_render_into_another_inventory_folder_is_refused(tmp_path: Path) -> None:
    """--out under a folder that looks like an inventory (hosts.yml, group_vars/) which is
    not the --inventory given: the same harm the day that folder is used."""
    inventory = _copy("single", tmp_path)
    other = _copy("pair-dp", tmp_path)
    before = _files(other)
    line = _refused_line(_render(inventory, other / "rendered", cwd=tmp_path))
    assert line.startswith(
        f"--out {other / 'rendered'} is inside {other}, which looks like an Ansible inventory "
        "(hosts.yml or group_vars/): the next playbook run would read the rendered files"
    )
    assert line.endswith("render outside it (e.g. sparkops render --out /tmp/stack)")
    assert _files(other) == before
    # A folder beside the inventory is fine.
    done = _render(inventory, tmp_path / "stack", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "stack" / "spark-1" / "memory-guard.sh").is_file()


def _render_stack_into(inventory: Path, tmp_path: Path) -> Path:
    """A stack rendered elsewhere and moved into the inventory (what an earlier kit let
    `render --out` do), with memory-guard.sh made harmless: these tests run Ansible on the
    folder, and Ansible would run the real one (as root it drops the page cache)."""
    done = _render(inventory, tmp_path / "stack", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shutil.move(tmp_path / "stack" / "spark-1", inventory / "spark-1")
    (inventory / "spark-1" / "memory-guard.sh").chmod(0o644)
    (inventory / "spark-1" / "load-guard.py").chmod(0o644)
    return inventory / "spark-1"


def test_an_inventory_holding_a_rendered_stack_is_refused_by_render_and_playbook(
    tmp_path: Path,
) -> None:
    inventory = _copy("single", tmp_path)
    stack = _render_stack_into(inventory, tmp_path)
    said = (
        f"{stack} holds files `sparkops render` writes (compose.yml, load-guard.json, "
        "load-guard.py, memory-guard.sh, serving.env, sparkops-serving.service, "
        "stack-record.json), inside the inventory folder "
        f"{inventory}: Ansible reads each as an inventory source, runs an executable one "
        "(memory-guard.sh) as an inventory script on this machine, and serving.env holds "
        "secrets in the folder you commit. Remove them from the inventory and render outside "
        "it (e.g. sparkops render --out /tmp/stack)"
    )
    assert _refused_line(_render(inventory, tmp_path / "out", cwd=tmp_path)) == said + "."
    assert not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0, played.output
    assert said in played.text
    assert "OK: the inventory passed every check" not in played.text


def test_an_executable_in_the_inventory_is_refused_before_ansible_runs_it(
    tmp_path: Path,
) -> None:
    """Ansible runs an executable file in an inventory folder (any subfolder but group_vars/,
    host_vars/ and dot names) as a dynamic inventory script. The render refuses before
    ansible-core parses the folder, so the script never runs; the playbook (whose Ansible has
    run it by then) stops at the check and names it."""
    inventory = _copy("single", tmp_path)
    ran = tmp_path / "script-ran"
    script = inventory / "tools" / "refresh.sh"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ntouch {ran}\necho '{{}}'\n")
    script.chmod(0o755)
    said = (
        f"{script} is executable, inside the inventory folder {inventory}: Ansible runs every "
        "executable file in an inventory folder as a dynamic inventory script, on this machine, "
        "each time it reads the inventory. Move it out of the inventory folder, or clear its "
        f"executable bit (chmod -x {script}) if it is inventory data"
    )
    assert _refused_line(_render(inventory, tmp_path / "out", cwd=tmp_path)) == said + "."
    assert not ran.exists() and not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0, played.output
    assert said in played.text
    # `-i hosts.yml` (a file source) is read alone: the script beside it is not run.
    ran.unlink()
    alone = run_playbook("validate_inventory.yml", inventory / "hosts.yml")
    assert alone.rc == 0, alone.output
    assert not ran.exists()
    # Where Ansible reads no inventory source (group_vars/, dot folders) an executable is no
    # inventory script; without the bit it is data.
    shutil.move(script, inventory / "group_vars" / "refresh.sh")
    script.parent.rmdir()
    done = _render(inventory, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def _hosts(inventory: Path) -> dict:
    return yaml.safe_load((inventory / "hosts.yml").read_text())


def test_two_sparks_with_one_address_are_refused_naming_both(tmp_path: Path) -> None:
    inventory = _copy("pair-dp", tmp_path)

    def same_address(data: dict) -> None:
        hosts = data["all"]["children"]["sparks"]["children"]["spark_pair"]["hosts"]
        hosts["spark-b"]["ansible_host"] = hosts["spark-a"]["ansible_host"]

    _edit(inventory / "hosts.yml", same_address)
    address = _hosts(inventory)["all"]["children"]["sparks"]["children"]["spark_pair"]["hosts"][
        "spark-a"
    ]["ansible_host"]
    said = (
        f"Hosts spark-a and spark-b have the same ansible_host {address}: they are one machine, "
        "so the deploy would put a serving stack on it for each and count it as more Sparks "
        "than there are. Give each Spark its own address (ansible_host) in hosts.yml, or list "
        "the machine once"
    )
    assert _refused_line(_render(inventory, "out", cwd=tmp_path)) == said + "."
    assert not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0, played.output
    assert said in played.text


def test_one_address_on_two_ssh_ports_is_two_machines(tmp_path: Path) -> None:
    """Two Sparks behind one NAT address, reached on their own forwarded ports."""
    inventory = _copy("pair-dp", tmp_path)

    def forwarded(data: dict) -> None:
        hosts = data["all"]["children"]["sparks"]["children"]["spark_pair"]["hosts"]
        for port, host in enumerate(("spark-a", "spark-b"), start=2201):
            hosts[host].update(ansible_host="203.0.113.7", ansible_port=port)

    _edit(inventory / "hosts.yml", forwarded)
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc == 0, played.output


def test_stand_ins_on_this_machine_share_its_loopback_address(tmp_path: Path) -> None:
    """The kit's own tests serve several "Sparks" on one machine (ansible_host 127.0.0.1,
    their ports apart): loopback is this machine on purpose, not a copied address."""
    inventory = make_inventory(tmp_path / "inv", "data-parallel")
    for port, host in enumerate(("spark-1", "spark-2"), start=8101):
        (inventory / "host_vars" / host).mkdir(parents=True)
        (inventory / "host_vars" / host / "serving.yml").write_text(
            yaml.safe_dump({"ansible_host": "127.0.0.1", "vllm_serving_port": port})
        )
    env = {**os.environ, "LITELLM_MASTER_KEY": "sk-test"}
    done = sparkops(
        "render", "--inventory", str(inventory), "--out", "out", limit=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "spark-2" / "compose.yml").is_file()


def _laptop_with_desktop_address(tmp_path: Path, address: str) -> Path:
    inventory = _copy("wsl2", tmp_path)

    def add_address(data: dict) -> None:
        data["all"]["children"]["sparks"]["hosts"]["rtx-spark"]["ansible_host"] = address

    _edit(inventory / "hosts.yml", add_address)
    return inventory


def test_a_local_connection_with_another_machine_s_address_is_refused(tmp_path: Path) -> None:
    inventory = _laptop_with_desktop_address(tmp_path, "192.168.1.50")
    said = (
        "Host rtx-spark has ansible_connection: local and ansible_host 192.168.1.50: with a "
        "local connection Ansible never goes to that address, every task runs on this machine "
        "instead. Remove ansible_connection: local to reach 192.168.1.50 over SSH, or remove "
        "ansible_host to run on this machine"
    )
    assert _refused_line(_render(inventory, "out", cwd=tmp_path)) == said + "."
    assert not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0, played.output
    assert said in played.text


def test_a_local_connection_with_a_loopback_address_passes(tmp_path: Path) -> None:
    for address in ("127.0.0.1", "localhost", "::1"):
        played = run_playbook(
            "validate_inventory.yml", _laptop_with_desktop_address(tmp_path / address, address)
        )
        assert played.rc == 0, played.output


def test_the_arch_stop_on_a_local_connection_names_the_connection_first(tmp_path: Path) -> None:
    """The laptop inventory run on an x86_64 desktop stopped with "set
    spark_preflight_arch_mismatch: warn", which makes the kit provision the desktop. Under a
    local connection the likelier fix is the connection; the override comes after it."""
    play = tmp_path / "arch.yml"
    tasks = REPO / "ansible" / "roles" / "spark_preflight" / "tasks" / "arch.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The preflight's architecture stop",
                    "hosts": "rtx-spark",
                    "gather_facts": True,
                    "vars": {
                        # Never this machine's: the stop fires wherever the test runs.
                        "spark_preflight_expected_arch": "sparc64",
                        "spark_preflight_arch_mismatch": "fail",
                    },
                    "tasks": [{"ansible.builtin.include_tasks": str(tasks)}],
                }
            ]
        )
    )
    played = run_playbook(play, REPO / "inventory" / "wsl2")
    assert played.rc != 0, played.output
    assert (
        "rtx-spark is reached with ansible_connection: local, so this is the machine running "
        "ansible-playbook, not a Spark: to reach a Spark over SSH, remove ansible_connection: "
        "local and set its ansible_host; run the laptop inventory on the laptop itself. Only "
        "if this machine is meant to run sparkops anyway, set spark_preflight_arch_mismatch: "
        "warn for it in the inventory."
    ) in played.text


def _serving(inventory: Path, **values: object) -> None:
    def change(data: dict) -> None:
        data.update(values)
        data.pop("vllm_serving_gpu_memory_gib", None)  # no budget: the case that passed

    _edit(inventory / "group_vars" / "all" / "serving.yml", change)


BIG = (
    "Host spark-1: profile gb10-qwen25-72b-bf16 has 135.4 GiB of weights, more than the "
    "machine's 128 GB (119.2 GiB) of memory in all, before any KV cache: it cannot load. "
    "Choose a smaller or quantised profile, or split it over two Sparks (sparkops_topology: "
    "pair-pp, each Spark holds half)"
)


def test_weights_larger_than_the_spark_are_refused_by_render_and_playbook(
    tmp_path: Path,
) -> None:
    inventory = _copy("single", tmp_path)
    _serving(inventory, vllm_serving_profile="gb10-qwen25-72b-bf16", vllm_serving_concurrency=64)
    assert _refused_line(_render(inventory, "out", cwd=tmp_path)) == BIG + "."
    assert not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0, played.output
    assert BIG in played.text


def test_render_judges_the_profile_it_is_given(tmp_path: Path) -> None:
    """--profile serves another profile than the inventory's: that one is judged."""
    inventory = _copy("single", tmp_path)
    _serving(inventory, vllm_serving_concurrency=64)
    line = _refused_line(
        _render(inventory, "out", "--profile", "gb10-qwen25-72b-bf16", cwd=tmp_path)
    )
    assert line == BIG + "."
    done = _render(inventory, "out", cwd=tmp_path)  # the inventory's own 12B profile
    assert done.returncode == 0, done.stderr


def test_weights_larger_than_a_stated_machine_size_are_refused(tmp_path: Path) -> None:
    """vllm_serving_memory_total_gb (a 64 GB RTX Spark) is the machine's size, and a model
    whose half does not fit either is not told to split over two."""
    inventory = _copy("single", tmp_path)
    _serving(
        inventory,
        vllm_serving_profile="gb10-qwen25-72b-bf16",
        vllm_serving_memory_total_gb=64,
        vllm_serving_concurrency=64,
    )
    assert _refused_line(_render(inventory, "out", cwd=tmp_path)) == (
        "Host spark-1: profile gb10-qwen25-72b-bf16 has 135.4 GiB of weights, more than the "
        "machine's 64 GB (59.6 GiB) of memory in all, before any KV cache: it cannot load. "
        "Choose a smaller or quantised profile."
    )


def test_the_pair_pp_example_holds_half_the_weights_per_spark(tmp_path: Path) -> None:
    """135.4 GiB over two Sparks is 67.7 GiB each: it passes the playbook's check."""
    played = run_playbook("validate_inventory.yml", REPO / "inventory" / "pair-pp")
    assert played.rc == 0, played.output


def test_a_concurrency_below_one_is_refused(tmp_path: Path) -> None:
    inventory = _copy("single", tmp_path)
    for given in ("-5", "0"):
        line = _refused_line(_render(inventory, "out", "--concurrency", given, cwd=tmp_path))
        assert line == (
            f"--concurrency {given}: the job's requests in flight must be a whole number of at "
            "least 1 (e.g. --concurrency 64, at most the profile's vllm.max_num_seqs); leave it "
            "out to use the inventory's vllm_serving_concurrency"
        )
        assert not (tmp_path / "out").exists()


def test_an_absurd_concurrency_is_refused_against_the_server_s_limit(tmp_path: Path) -> None:
    """More requests in flight than the server admits (vllm.max_num_seqs) only wait."""
    inventory = _copy("single", tmp_path)
    proc = _render(inventory, "out", "--concurrency", "1000000", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "is below the job's concurrency 1000000: raise vllm.max_num_seqs" in proc.stderr
    assert not (tmp_path / "out").exists()
