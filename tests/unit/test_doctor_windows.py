"""The laptop's Windows side through WSL2 interop (sparkops.doctor.windows), judged on what
the Windows tools print: `powercfg /query SCHEME_CURRENT SUB_SLEEP` as the stand-in
tests/fixtures/bin/powercfg.exe prints it (Windows 11 Balanced on a laptop, CRLF), and the
same in German, read in the console's code page as Ansible reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.doctor.preflight import windows_side
from sparkops.doctor.windows import (
    HIBERNATE_IDLE,
    STANDBY_IDLE,
    autostart_script,
    power_settings,
    windows_restart_pending,
    windows_sleep,
    wsl_autostart,
)

DATA = Path(__file__).parent / "data"
ENGLISH = (DATA / "powercfg_sub_sleep.txt").read_bytes().decode("utf-8", "replace")
GERMAN = (DATA / "powercfg_sub_sleep_de.txt").read_bytes().decode("utf-8", "replace")
SCRIPT = "/opt/sparkops/windows/sparkops-wsl-autostart.cmd"


def test_the_ac_timers_are_read_by_guid_in_any_language() -> None:
    english = power_settings(ENGLISH)
    assert english[STANDBY_IDLE] == (1800, 900)  # 30 min on AC, 15 on battery
    assert english[HIBERNATE_IDLE] == (10800, 10800)
    assert english["94ac6d29-73ce-41a6-809f-6363ba21b47e"] == (0, 0)  # an on/off setting
    german = power_settings(GERMAN)
    assert german[STANDBY_IDLE] == (0, 900) and german[HIBERNATE_IDLE] == (10800, 10800)


def test_sleep_timers_warn_with_the_exact_commands() -> None:
    check = windows_sleep(True, ENGLISH, 0, "")
    assert (check.ok, check.warning) == (False, True)
    assert check.detail == (
        "Windows will sleep after 30 min on AC power and hibernate after 180 min on AC power, "
        "ending the job"
    )
    assert check.fix == (
        "in WSL2 (or any Windows prompt): powercfg.exe /change standby-timeout-ac 0; "
        "powercfg.exe /change hibernate-timeout-ac 0"
    )
    german = windows_sleep(True, GERMAN, 0, "")
    assert german.detail.startswith("Windows will hibernate after 180 min")
    assert german.fix.endswith("powercfg.exe /change hibernate-timeout-ac 0")
    hibernate_ac = "AC Power Setting Index: 0x00002a30"
    never = ENGLISH.replace("0x00000708", "0x00000000").replace(
        hibernate_ac, hibernate_ac[:-8] + "0" * 8
    )
    assert windows_sleep(True, never, 0, "").ok is True


def test_interop_off_or_a_tool_that_cannot_run_is_one_clear_line() -> None:
    for check in (
        windows_sleep(False, "", None, ""),
        windows_restart_pending(False, None, None),
        wsl_autostart(False, None, SCRIPT),
    ):
        assert (check.ok, check.warning) == (False, True)
        assert "WSL interop is off" in check.detail
        assert "[interop] enabled=true" in check.fix
    broken = windows_sleep(True, "", 2, "[Errno 2] No such file or directory: b'powercfg.exe'")
    assert "No such file or directory" in broken.detail and broken.warning
    assert windows_restart_pending(True, 2, 1).warning is True  # reg.exe did not answer
    assert wsl_autostart(True, 127, SCRIPT).warning is True


def test_a_pending_restart_is_refused_with_what_to_do() -> None:
    assert windows_restart_pending(True, 1, 1).ok is True
    pending = windows_restart_pending(True, 0, 1)
    assert (pending.ok, pending.warning) == (False, False)
    assert "a Windows restart is pending (Windows Update)" in pending.detail
    assert "Restart-Computer" in pending.fix and "shutdown.exe /r /t 0" in pending.fix


def test_the_autostart_task_and_its_script() -> None:
    assert wsl_autostart(True, 0, SCRIPT).ok is True
    missing = wsl_autostart(True, 1, SCRIPT)
    assert missing.warning and SCRIPT in missing.fix and "Run as administrator" in missing.fix
    script = autostart_script("Ubuntu-24.04")
    assert script.endswith("\r\n") and "\n" not in script.replace("\r\n", "")
    assert (
        'schtasks /Create /F /TN "sparkops-wsl-autostart" /SC ONLOGON /RL LIMITED '
        '/TR "wsl.exe -d Ubuntu-24.04 --exec sleep infinity"'
    ) in script
    with pytest.raises(ValueError, match="not a WSL distribution name"):
        autostart_script('Ubuntu" & del C:\\x')


@pytest.mark.parametrize(
    ("setting", "kernel", "read"),
    [
        ("auto", "6.6.87.2-microsoft-standard-WSL2", True),
        ("auto", "6.11.0-1016-nvidia", False),
        (True, "6.11.0-1016-nvidia", True),
        (False, "6.6.87.2-microsoft-standard-WSL2", False),
    ],
)
def test_the_windows_side_is_read_on_wsl2_or_when_asked(setting, kernel, read) -> None:
    assert windows_side(setting, kernel) is read
