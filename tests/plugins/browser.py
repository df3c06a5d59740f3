"""A page opened in a real headless Chromium with the network off, seen through the DevTools
protocol: what it asked for, what it logged as an error, and what each section shows.

Debian's `chromium` (`make watch-tools` installs it) runs with the flags a test browser needs
(headless, no sandbox in a container, no GPU, no first-run, no background networking,
component updates or sync) and a fresh profile. The network is off twice over: the page's
network is emulated offline, and a proxy and resolver that lead nowhere catch anything that
slips past. Every request the page makes is recorded all the same (`Network.
requestWillBeSent`), so a test asserts that none left the page rather than hoping none did.

The protocol is spoken over aiohttp's websocket client (already a dependency): no selenium, no
chromedriver session needed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--proxy-server=127.0.0.1:9",  # the discard port: nothing answers there
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
# What each section of the page shows (read in the page once it has loaded).
SECTIONS_JS = """JSON.stringify([...document.querySelectorAll('section')].map(s => ({
  id: s.id,
  height: s.getBoundingClientRect().height,
  text: s.innerText.length,
  tables: s.querySelectorAll('table').length,
  images: [...s.querySelectorAll('img')].map(i => i.complete && i.naturalWidth > 0),
})))"""


@dataclass
class PageLoad:
    """What opening one page came to."""

    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log errors
    sections: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "chromium is not installed: run `make watch-tools` (Debian's chromium)"
    return found


def open_page(path: Path, limit: float = 60.0) -> PageLoad:
    """Open `path` (a file) in headless Chromium with the network off, wait for its load
    event, and return what it requested, logged and shows."""
    profile = Path(tempfile.mkdtemp(prefix="sparkops-chromium-"))
    proc = subprocess.Popen(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = _devtools_port(profile, proc, limit)
        return asyncio.run(asyncio.wait_for(_load(port, path.resolve().as_uri()), limit))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(profile: Path, proc: subprocess.Popen, limit: float) -> int:
    """The port Chromium chose (it writes DevToolsActivePort into the profile)."""
    marker = profile / "DevToolsActivePort"
    end = time.monotonic() + limit
    while not (marker.is_file() and marker.read_text().strip()):
        assert proc.poll() is None, f"chromium exited ({proc.returncode}) before it listened"
        assert time.monotonic() < end, "chromium did not open its DevTools port"
        time.sleep(0.1)
    return int(marker.read_text().splitlines()[0])


class _Session:
    """One DevTools websocket: numbered commands, every event kept."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json()
            if message.get("id") == ident:
                assert "error" not in message, message
                return message.get("result", {})
            self.events.append(message)

    async def until(self, method: str) -> None:
        """Read events until `method` comes."""
        while not any(e.get("method") == method for e in self.events):
            self.events.append(await self.ws.receive_json())


async def _load(port: int, url: str) -> PageLoad:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            session = _Session(ws)
            for domain in ("Page", "Runtime", "Log", "Network"):
                await session.send(f"{domain}.enable")
            await session.send(
                "Network.emulateNetworkConditions",
                offline=True,
                latency=0,
                downloadThroughput=-1,
                uploadThroughput=-1,
            )
            await session.send("Page.navigate", url=url)
            await session.until("Page.loadEventFired")
            found = await session.send(
                "Runtime.evaluate", expression=SECTIONS_JS, returnByValue=True
            )
            title = await session.send(
                "Runtime.evaluate", expression="document.title", returnByValue=True
            )
            await asyncio.sleep(0.5)  # late requests and errors still come in
            await session.send("Runtime.evaluate", expression="1")
    load = PageLoad(sections=json.loads(found["result"]["value"]), title=title["result"]["value"])
    for event in session.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            load.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            load.errors.append(" ".join(str(a.get("value")) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            load.errors.append(str(params.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            load.errors.append(str(params["entry"].get("text")))
    return load
