"""The laptop's Windows side, read from WSL2 through interop (issue 39 item 3).

Windows sleeps on its own timer, Windows Update restarts the machine, and WSL2 does not start
again until someone opens it: each ends a day-long job. With interop on, WSL2 runs Windows
programs, so preflight.yml asks them (the text they print is judged here, pure):

- `powercfg.exe /query SCHEME_CURRENT SUB_SLEEP`: the AC "Sleep after" and "Hibernate after"
  timeouts. Found by their GUIDs, not their English names, so a Windows in another language
  reads the same; in each setting's block the last two hexadecimal indexes are the AC then
  the DC value (the labels around them are translated).
- `reg.exe query` of Windows Update's RebootRequired and Component Based Servicing's
  RebootPending keys: a restart is pending when either exists (exit 0).
- `schtasks.exe /Query /TN sparkops-wsl-autostart`: the one-time task (the kit writes its
  script, `autostart_script`) that starts the distribution at log-on, so the job's enabled
  unit comes back after a Windows restart.

With interop off (`[interop] enabled=false` in /etc/wsl.conf) none of it can be read: one
line says so and how to turn it on. What only a real laptop can show (that the task really
starts WSL2 after an update's restart, that the lid or the battery do not sleep it anyway) is
said in docs/day-one.md.
"""

from __future__ import annotations

import re

from sparkops.doctor.checks import Check, warn_or_pass

STANDBY_IDLE = "29f6c1db-86da-48c5-9fdb-f2b67b1f44da"  # Sleep after (STANDBYIDLE)
HIBERNATE_IDLE = "9d7815a6-7ee4-497e-8888-515a05f02364"  # Hibernate after (HIBERNATEIDLE)
TASK_NAME = "sparkops-wsl-autostart"
# reg.exe and schtasks.exe answer a query with 0 (found) or 1 (not found); anything else (a
# program that could not start) is no answer.
ANSWERED = (0, 1)
SCRIPT_NAME = f"{TASK_NAME}.cmd"
INTEROP_OFF = (
    "turn WSL interop on (in /etc/wsl.conf: [interop] enabled=true, then wsl --shutdown in "
    "Windows) so preflight can read Windows' sleep timers and pending restarts"
)
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
HEX = re.compile(r"0x([0-9a-f]+)", re.I)
FIXES = {
    STANDBY_IDLE: ("sleep", "powercfg.exe /change standby-timeout-ac 0"),
    HIBERNATE_IDLE: ("hibernate", "powercfg.exe /change hibernate-timeout-ac 0"),
}


def power_settings(query: str) -> dict[str, tuple[int, int]]:
    """{setting GUID: (AC seconds, DC seconds)} from `powercfg /query` output.

    Every line holding a GUID opens a block (scheme, subgroup, setting; their labels are
    translated, the GUIDs are not); a setting's block ends with its AC then DC index."""
    found: dict[str, tuple[int, int]] = {}
    blocks: list[tuple[str, list[int]]] = []
    for line in query.splitlines():
        if opened := GUID.search(line):
            blocks.append((opened.group(0).lower(), []))
        elif blocks and (value := HEX.search(line)):
            blocks[-1][1].append(int(value.group(1), 16))
    for guid, values in blocks:
        if len(values) >= 2:
            found[guid] = (values[-2], values[-1])
    return found


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def windows_sleep(interop: bool, query: str, rc: int | None, error: str) -> Check:
    """Windows on AC power neither sleeps nor hibernates on a timer (a warning with the exact
    commands when it does)."""
    name = "windows_sleep"
    if not interop:
        return warn_or_pass(
            name, False, "WSL interop is off: Windows' sleep timers are unread", INTEROP_OFF
        )
    settings = power_settings(query) if rc == 0 else {}
    if not settings:
        said = error or query.strip()[:120] or "no output"
        detail = f"powercfg.exe /query gave no sleep settings ({said})"
        return warn_or_pass(
            name, False, detail, "run powercfg.exe /query SCHEME_CURRENT SUB_SLEEP in WSL2"
        )
    timers = []
    fixes = []
    for guid, (what, fix) in FIXES.items():
        ac = settings.get(guid, (0, 0))[0]
        if ac:
            timers.append(f"{what} after {_minutes(ac)} on AC power")
            fixes.append(fix)
    if not timers:
        return Check(name, True, "Windows neither sleeps nor hibernates on a timer on AC power")
    detail = "Windows will " + " and ".join(timers) + ", ending the job"
    return warn_or_pass(name, False, detail, "in WSL2 (or any Windows prompt): " + "; ".join(fixes))


def windows_restart_pending(
    interop: bool, update_rc: int | None, servicing_rc: int | None
) -> Check:
    """No Windows restart is pending (Windows Update would restart the laptop mid-job)."""
    name = "windows_restart_pending"
    if not interop:
        return warn_or_pass(
            name, False, "WSL interop is off: a pending restart is unread", INTEROP_OFF
        )
    if update_rc not in ANSWERED or servicing_rc not in ANSWERED:
        return warn_or_pass(
            name,
            False,
            f"reg.exe could not answer (exit {update_rc}, {servicing_rc})",
            "run `reg.exe query HKLM` in WSL2: interop must reach Windows' System32",
        )
    pending = [
        what
        for what, rc in (("Windows Update", update_rc), ("component servicing", servicing_rc))
        if rc == 0
    ]
    if not pending:
        return Check(name, True, "no Windows restart is pending")
    return Check(
        name,
        False,
        f"a Windows restart is pending ({', '.join(pending)}): Windows restarts on its own, "
        "ending the job and WSL2",
        "restart Windows now, before the job (in PowerShell: Restart-Computer, or "
        "shutdown.exe /r /t 0), then open WSL2 (or let the sparkops-wsl-autostart task start it "
        "at log-on) and start the job",
    )


def wsl_autostart(interop: bool, query_rc: int | None, script_path: str) -> Check:
    """The log-on task that starts WSL2 again after a Windows restart is registered."""
    name = "wsl_autostart"
    if not interop:
        return warn_or_pass(
            name, False, "WSL interop is off: the autostart task is unread", INTEROP_OFF
        )
    if query_rc == 0:
        return Check(name, True, f"the scheduled task {TASK_NAME} is registered")
    if query_rc not in ANSWERED:
        return warn_or_pass(
            name,
            False,
            f"schtasks.exe could not answer (exit {query_rc})",
            "run `schtasks.exe /Query` in WSL2: interop must reach Windows' System32",
        )
    fix = (
        f"register it once: in Windows, right-click {script_path} (in File Explorer under "
        r"\\wsl.localhost\<distribution>) and choose Run as administrator"
    )
    return warn_or_pass(
        name,
        False,
        f"no scheduled task {TASK_NAME}: after a Windows restart WSL2 and the job stay down",
        fix,
    )


def autostart_script(distribution: str) -> str:
    """The one-time script (cmd.exe, CRLF) that registers the log-on task: it starts the WSL2
    distribution and keeps it running (a `sleep infinity` inside it), so systemd starts the
    enabled job and serving units again after Windows restarted."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", distribution):
        raise ValueError(
            f"{distribution!r} is not a WSL distribution name (letters, digits, . _ -): set "
            "host_tuning_wsl_distribution to the name `wsl -l -v` shows"
        )
    lines = [
        "@echo off",
        "rem Written by sparkops (host_tuning). Run once, as administrator: it registers a task",
        f"rem that starts WSL2 ({distribution}) at log-on, so batch jobs come back after a",
        "rem Windows restart. Remove it with: schtasks /Delete /TN " + TASK_NAME + " /F",
        f'schtasks /Create /F /TN "{TASK_NAME}" /SC ONLOGON /RL LIMITED '
        f'/TR "wsl.exe -d {distribution} --exec sleep infinity"',
        "if errorlevel 1 (echo sparkops: the task was not registered & pause & exit /b 1)",
        f"echo sparkops: task {TASK_NAME} registered; WSL2 starts at your next log-on",
        "pause",
    ]
    return "\r\n".join(lines) + "\r\n"
