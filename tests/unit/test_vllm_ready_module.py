"""The readiness module's pure helpers (ansible/plugins/modules/sparkops_vllm_ready.py): the
log tail a playbook prints, the key read from the root-only env file, the server's error text.
The module itself runs for real in tests/infra/test_deploy_converge.py and test_ops_preflight.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

MODULE = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "modules"
spec = importlib.util.spec_from_file_location(
    "sparkops_vllm_ready", MODULE / "sparkops_vllm_ready.py"
)
ready = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ready)


def test_the_log_tail_has_no_terminal_escapes_and_progress_bars_keep_their_last_state():
    raw = (
        "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO start\n"
        "Loading:   0% | 0/1\rLoading: 100% | 1/1\n"
        "\x1b]0;title\x07ValueError: 160 MiB required\x00\n\n"
    )
    assert ready.clean_log(raw) == (
        "(APIServer pid=1) INFO start\nLoading: 100% | 1/1\nValueError: 160 MiB required"
    )


def test_the_api_key_comes_from_its_line_of_the_env_file(tmp_path):
    env = tmp_path / "serving.env"
    env.write_text("# Managed\nHF_TOKEN=hf_x\nVLLM_API_KEY=sk-abc=def\n")
    assert ready.read_api_key(str(env)) == "sk-abc=def"
    env.write_text("HF_TOKEN=hf_x\n")
    assert ready.read_api_key(str(env)) == ""
    assert ready.read_api_key(str(tmp_path / "absent.env")) == ""
    assert ready.read_api_key("") == ""


def test_error_text_and_reply_text_read_openai_shaped_bodies():
    assert ready.error_text('{"error": {"message": "boom", "code": 400}}') == "boom"
    assert ready.error_text('{"detail": "Not Found"}') == "Not Found"
    assert ready.error_text("<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert ready.reply_text('{"choices": [{"message": {"content": " Yes. "}}]}') == "Yes."
    assert ready.reply_text('{"choices": [{"message": {"content": null}}]}') == ""
    assert ready.reply_text('{"choices": []}') == ""


def test_a_host_without_the_docker_command_reads_as_unknown_not_a_crash(tmp_path, monkeypatch):
    # A host the kit has not provisioned yet has no docker: the readiness wait must report it
    # (preflight then names the probe that could not run) instead of failing the module.
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ready.restart_count("sparkops-vllm") == 0
    state = ready.container_state("sparkops-vllm")
    assert state["Status"] == "unknown" and "docker" in state["Error"]
    assert ready.log_tail("sparkops-vllm", 5).startswith("(docker logs failed: ")
