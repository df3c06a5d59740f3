"""Admission keeps a steady mix of steps; connections are paced and recycled.

The engine tests run the real engine against an in-process responder
(tests/plugins/responder.py) that records, for each call, its step and the connection it came on.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from aiohttp import web

from sparkops.batch.admission import Admission
from sparkops.batch.connections import ConnectionRecycler, ConnectPacer
from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.engine import Engine, EngineConfig
from sparkops.batch.records import Record
from sparkops.batch.workload import Pipeline
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import RESULTS
from sparkops.jobdir.journal import Journal
from sparkops.pipeline.spec import parse_pipeline
from tests.plugins.responder import serve

THREE = parse_pipeline(
    {
        "name": "three",
        "model": "m",
        "steps": [
            {
                "name": s,
                "user": s + " {text}",
                "parse": {"choices": ["yes", "no"]},
                "next": {"yes": n, "no": n, "unclear": n},
            }
            for s, n in (("a", "b"), ("b", "c"), ("c", "stop"))
        ],
    }
)
ONE = parse_pipeline(
    {
        "name": "one",
        "model": "m",
        "steps": [{"name": "a", "user": "a {text}", "parse": {"choices": ["yes", "no"]}}],
    }
)


def test_a_three_step_job_caps_first_step_records_at_a_third_of_the_slots():
    adm = Admission(30, steps=3)
    assert adm.cap == 10
    for _ in range(10):
        assert adm.may_admit(busy=adm.first_step)
        adm.admitted()
    assert not adm.may_admit(busy=10)  # 10 at step 1, 20 slots idle: still no (the ramp)
    adm.first_call_done()
    assert adm.may_admit(busy=10)


def test_after_a_record_finished_no_slot_is_left_idle():
    adm = Admission(30, steps=3)
    for _ in range(10):
        adm.admitted()
    adm.record_left(3)
    assert adm.may_admit(busy=29)  # a slot would stay empty
    assert not adm.may_admit(busy=30)


def test_one_call_jobs_are_never_capped_and_the_share_follows_finished_records():
    assert Admission(1000, steps=1).cap is None
    adm = Admission(300, steps=3)
    for _ in range(60):
        adm.record_left(1)  # every record stopped after its first step
    assert adm.calls_per_record == 1.0 and adm.cap is None
    adm = Admission(300, steps=3)
    for _ in range(60):
        adm.record_left(2)
    assert adm.cap == 150


def test_every_tenth_request_asks_to_close_its_connection():
    rec = ConnectionRecycler({"Content-Type": "application/json"}, every=10)
    sent = [rec.headers() for _ in range(100)]
    assert sum(h.get("Connection") == "close" for h in sent) == 10 == rec.closed
    assert all(h["Content-Type"] == "application/json" for h in sent)
    never = ConnectionRecycler({}, every=0)
    assert not any("Connection" in never.headers() for _ in range(50))


def test_the_pacer_spaces_only_calls_that_need_a_new_connection():
    pacer = ConnectPacer(0.01)
    waits = [pacer.turn("e", n) for n in range(1, 21)]
    assert waits[0] == 0.0 and 0.18 <= waits[-1] <= 0.2  # the 20th new connection: 19 gaps
    assert all(b > a for a, b in itertools.pairwise(waits))
    assert [pacer.turn("e", n) for n in range(1, 21)] == [0.0] * 20  # reused: no wait
    assert pacer.paced == 20
    assert ConnectPacer(0).turn("e", 5) == 0.0


class Recorder:
    """Answers "yes" after a short wait; records each call's step, connection and time."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {"a": 0, "b": 0, "c": 0}
        self.samples: list[dict[str, int]] = []  # the in-flight mix at each arrival
        self.peers: list[tuple[str, int]] = []
        self.arrivals: list[float] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        step = body["messages"][-1]["content"].split()[0]
        self.in_flight[step] += 1
        self.samples.append(dict(self.in_flight))
        self.peers.append(request.transport.get_extra_info("peername"))
        self.arrivals.append(time.monotonic())
        try:
            await asyncio.sleep(0.05)
            choice = {"message": {"content": "yes"}, "finish_reason": "stop"}
            return web.json_response({"choices": [choice]})
        finally:
            self.in_flight[step] -= 1


async def run(tmp_path, spec, n, concurrency, **cfg):
    rec = Recorder()
    tmp_path.mkdir(parents=True, exist_ok=True)
    async with serve(rec.handle) as url:
        journal = Journal(tmp_path, "id", fsync_interval=0)
        journal.open()
        pool = EndpointPool.from_urls([url], stall_after=0)
        engine = Engine(
            EngineConfig(concurrency=concurrency, retry_for=30, **cfg),
            pool,
            journal,
            Pipeline(spec),
        )
        records = (Record(f"r{i}", i + 1, {"text": f"n{i}"}) for i in range(n))
        t0 = time.monotonic()
        await asyncio.wait_for(engine.run(records), 60)
        wall = time.monotonic() - t0
        journal.close()
        return rec, list(iter_json_lines(tmp_path / RESULTS)), wall


class LoggedAdmission(Admission):
    """The engine's own Admission, logging every decision it takes (the scheduler's view: what
    it held and what it decided, independent of how fast this machine ran the calls)."""

    log: list[dict[str, object]]

    def __init__(self, concurrency: int, steps: int) -> None:
        super().__init__(concurrency, steps)
        self.log = []

    def may_admit(self, busy: int) -> bool:
        decided = super().may_admit(busy)
        self.log.append(
            {"event": "asked", "busy": busy, "first_step": self.first_step, "cap": self.cap,
             "finished": self.finished, "yes": decided}
        )  # fmt: skip
        return decided

    def admitted(self) -> None:
        super().admitted()
        self.log.append(
            {"event": "admitted", "first_step": self.first_step, "finished": self.finished}
        )

    def first_call_done(self) -> None:
        super().first_call_done()
        self.log.append({"event": "first_call_done"})


def test_a_three_step_job_ramps_in_and_keeps_every_step_in_flight(tmp_path, monkeypatch):
    """Judged on the scheduler's decisions, not on samples of what the server saw in flight
    (those depend on how busy the machine is: 101 of 600 samples on a loaded 2-core box)."""
    made: list[LoggedAdmission] = []

    def logged(concurrency: int, steps: int) -> LoggedAdmission:
        made.append(LoggedAdmission(concurrency, steps))
        return made[-1]

    monkeypatch.setattr("sparkops.batch.engine.Admission", logged)
    rec, results, _ = asyncio.run(run(tmp_path, THREE, 300, 30))
    ids = [r["id"] for r in results]
    assert sorted(ids) == sorted(f"r{i}" for i in range(300)) and len(set(ids)) == 300
    assert all(r["status"] == "done" and len(r["steps"]) == 3 for r in results)
    assert len(rec.samples) == 900  # every step of every record called exactly once
    (admission,) = made
    log = admission.log
    admitted = [e for e in log if e["event"] == "admitted"]
    assert len(admitted) == 300
    # The start: a third of the slots take first-step records (before: all 30 at once), and
    # no more start until a first call came back.
    first_done = next(i for i, e in enumerate(log) if e["event"] == "first_call_done")
    assert sum(1 for e in log[:first_done] if e["event"] == "admitted") == 10
    # Until a record has finished, first-step records never exceed the cap (the ramp).
    assert all(e["first_step"] <= 10 for e in admitted if e["finished"] == 0)
    # Throughout: a record starts above the cap only to fill a slot that would stay idle,
    # and the cap did hold records back, keeping the later steps' share of the slots.
    over = [e for e in log if e["event"] == "asked" and e["yes"] and e["first_step"] >= e["cap"]]
    assert all(e["finished"] > 0 and e["busy"] < 30 for e in over)
    assert any(e["event"] == "asked" and not e["yes"] for e in log)


def test_connections_are_recycled_and_opened_at_a_pace(tmp_path):
    rec, results, _ = asyncio.run(run(tmp_path, ONE, 200, 20, recycle_every=10, connect_gap=0.02))
    assert len(results) == 200 and all(r["status"] == "done" for r in results)
    first = sorted(
        {p: t for p, t in reversed(list(zip(rec.peers, rec.arrivals, strict=True)))}.values()
    )
    # 20 connections for 20 in flight, their first requests at least ~0.02 s apart
    assert len(first) >= 20
    assert first[19] - first[0] >= 0.3
    # every 10th request closed its connection: about 200 / 10 new ones on top of the 20
    assert 30 <= len(set(rec.peers)) <= 45
    rec, _, _ = asyncio.run(run(tmp_path / "k", ONE, 200, 20, recycle_every=0, connect_gap=0))
    assert len(set(rec.peers)) == 20  # kept alive throughout
