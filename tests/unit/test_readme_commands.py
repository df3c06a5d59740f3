"""Every command the README and docs/ show exists: each `sparkops …` line in their shell blocks
parses with the real argument parser, every `make` target is in the Makefile, and every playbook,
Dockerfile folder and example inventory they name is in the repository. A user copies these
lines first, so a renamed option or playbook must break this test, not the user's first day."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sparkops.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(sh|bash|console|shell)\s*$(.*?)^```\s*$", re.M | re.S)
OPTIONAL = re.compile(r"\s\[[^\[\]]*\]")  # `[--flag VALUE]`: the README's optional parts
SEPARATORS = {"&&", "||", ";", "|"}


def shell_lines(text: str) -> list[str]:
    """The command lines of the README's shell blocks, continuation lines joined."""
    lines = []
    for match in FENCE.finditer(text):
        block = match.group(2).replace("\\\n", " ")
        lines += [line.strip() for line in block.splitlines() if line.strip()]
    return lines


def commands(line: str) -> list[list[str]]:
    """The simple commands of one line: comments dropped, split at && || ; |."""
    tokens = shlex.split(OPTIONAL.sub("", line), comments=True)
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [command for command in out if command]


def sparkops_invocations(command: list[str]) -> list[list[str]]:
    """Arguments of each `sparkops` run in a command: directly, after VAR=value assignments,
    or as the program a wrapper starts after `--` (sparkops-run, systemd-run)."""
    found = []
    for i, token in enumerate(command):
        if Path(token).name != "sparkops":
            continue
        before = command[:i]
        if all("=" in t and not t.startswith("-") for t in before) or (before[-1:] == ["--"]):
            found.append(command[i + 1 :])
    return found


def doc_shell_lines() -> list[tuple[str, str]]:
    """(document name, command line) for every shell line of the README and docs/*.md."""
    return [(doc.name, line) for doc in DOCS for line in shell_lines(doc.read_text())]


def readme_sparkops_lines() -> list[tuple[str, list[str]]]:
    return [
        (line, argv)
        for line in shell_lines(README.read_text())
        for command in commands(line)
        for argv in sparkops_invocations(command)
    ]


def docs_sparkops_lines() -> list[tuple[str, str, list[str]]]:
    return [
        (name, line, argv)
        for name, line in doc_shell_lines()
        for command in commands(line)
        for argv in sparkops_invocations(command)
    ]


def test_the_docs_exist_and_show_commands() -> None:
    """The manual the README links to is there, and the check reaches into it."""
    names = {doc.name for doc in DOCS}
    for wanted in ("provision.md", "deploy.md", "batch.md", "planning.md", "development.md"):
        assert wanted in names, wanted
    assert {name for name, _line, _argv in docs_sparkops_lines()} >= {"README.md", "batch.md"}


def test_the_readme_shows_the_spark_owners_whole_path() -> None:
    """The quick start walks install, provision, deploy, a batch run and its report."""
    subcommands = {tuple(argv[:2]) for _line, argv in readme_sparkops_lines()}
    for wanted in [("batch", "run"), ("batch", "status"), ("report",), ("render",)]:
        assert any(sub[: len(wanted)] == wanted for sub in subcommands), wanted
    text = README.read_text()
    for playbook in ("provision.yml", "deploy.yml", "batch.yml"):
        assert f"ansible/playbooks/{playbook}" in text


@pytest.mark.parametrize(("doc", "line", "argv"), docs_sparkops_lines(), ids=lambda v: str(v)[:60])
def test_each_sparkops_line_parses_with_the_real_parser(
    doc: str, line: str, argv: list[str]
) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(
            f"{doc}: `sparkops {shlex.join(argv)}` does not parse (exit {exc.code}): {line}"
        )
    assert callable(args.func)


def test_every_make_target_the_readme_names_exists() -> None:
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    runs = [command for _doc, line in doc_shell_lines() for command in commands(line)]
    runs = [command[1:] if command[0] == "sudo" else command for command in runs]
    used = {command[1] for command in runs if command[0] == "make" and len(command) > 1}
    assert used, "the docs show no make command"
    assert used <= targets, used - targets


def test_the_readme_asks_for_root_only_where_it_is_needed() -> None:
    """Only `make test` needs root (it installs Docker and builds the test hosts): the
    "Try it without a Spark" block says so on that line, not above both commands."""
    section = README.read_text().split("## Try it without a Spark", 1)[1].split("\n## ", 1)[0]
    lines = shell_lines(section)
    (demo,) = [line for line in lines if line.startswith("make demo")]
    (test,) = [line for line in lines if "make test" in line]
    assert "root" not in section.split("```", 1)[0]
    assert "as any user" in demo
    assert test.startswith("sudo make test") and "as root" in test


def test_every_repository_path_the_readme_runs_exists() -> None:
    """Playbooks, Dockerfile folders and example inventories named in shell blocks."""
    pattern = re.compile(r"(ansible/playbooks/[\w.-]+\.yml|docker/[\w-]+|inventory/[\w-]+)")
    named = set()
    for _doc, line in doc_shell_lines():
        for command in commands(line):
            for token in command:
                named |= {m.group(1) for m in pattern.finditer(token)}
    assert named
    # inventory/mine is the copy the quick start makes (cp -r inventory/single inventory/mine).
    missing = sorted(p for p in named if p != "inventory/mine" and not (REPO / p).exists())
    assert not missing, missing


def test_the_checker_catches_a_command_that_does_not_exist() -> None:
    """The check itself: the line the README used to show would fail it."""
    (argv,) = sparkops_invocations(
        commands("sparkops-run --name triage --drop-caches -- sparkops run job.yaml")[0]
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


def test_day_one_walks_in_order_with_ssh_sudo_and_the_laptop() -> None:
    """Issue 31: README step 3 ended in "Missing sudo password" (no word of -K, ssh-copy-id or
    a sudo rule), the laptop path stopped at NVIDIA URLs the kit did not give, and step 6
    copied the pipeline without the prompt files it names."""
    day_one = (REPO / "docs" / "day-one.md").read_text()
    headings = re.findall(r"^## \d\. (.+)$", day_one, re.M)
    assert headings == [
        "Controller",
        "SSH and sudo",
        "Laptop or desktop",
        "Inventory and render",
        "Provision",
        "Deploy",
        "Preflight",
        "First job",
        "Leaving a job for the weekend",
    ]
    readme = README.read_text()
    for text in (readme, day_one):
        assert "ssh-copy-id" in text and " -K" in text
        assert "scp -r job " in text and "prompt file" in text
    laptop = ("ProArt Creator Hub", "96 GB", "systemd=true", "natively", "in Docker inside WSL2")
    for words in laptop:
        assert words in day_one, words
    assert "https://nvidia.github.io/libnvidia-container/stable/deb" in day_one
    for line in shell_lines(readme + day_one):
        if "ansible-playbook" in line and "ansible/playbooks/" in line:
            assert " -K" in line, line
    # The laptop's inventory says where the NVIDIA repository comes from.
    wsl2 = (REPO / "inventory/wsl2/group_vars/sparks/container_runtime.yml").read_text()
    assert "https://nvidia.github.io/libnvidia-container/stable/deb" in wsl2


def test_the_job_user_is_named_once_in_each_example_inventory() -> None:
    """container_runtime.yml hard-coded `researcher` beside host_tuning.yml's list."""
    import yaml

    for path in sorted((REPO / "inventory").glob("*/group_vars/sparks/container_runtime.yml")):
        users = (yaml.safe_load(path.read_text()) or {}).get("container_runtime_docker_users")
        assert users in (None, "{{ host_tuning_job_users }}"), path
