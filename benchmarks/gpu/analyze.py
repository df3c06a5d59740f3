"""Per-phase summary of a GPU run: samples.txt between the START/END marks of phases.txt.

For each phase, over the window where the generation counter moved (a bench's dataset build
and the tails dropped) and its middle 60%: running/waiting requests, GPU utilisation, the
server's rates, and the median CPU of each process. Then, per kit job folder given, the
records finished per second (waves show as runs of zeros).

    python3 analyze.py JOB_DIR...     (reads $W/samples.txt and $W/phases.txt, W=/tmp/w)
"""

import collections
import json
import os
import statistics
import sys
from pathlib import Path

W = Path(os.environ.get("W", "/tmp/w"))


def med(x: list[float]) -> float:
    return statistics.median(x) if x else float("nan")


def load_samples() -> list[dict]:
    out = []
    for line in (W / "samples.txt").read_text().splitlines():
        p = line.split()
        try:
            d: dict = {"t": float(p[0])}
        except (ValueError, IndexError):
            continue
        for kv in p[1:]:
            k, _, v = kv.partition("=")
            if k == "cpu":
                d["cpu"] = {}
                for e in v.split(","):
                    lab, _, pct = e.rpartition("=")
                    if lab:
                        d["cpu"][lab] = float(pct)
            else:
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
        out.append(d)
    return out


def phase(name: str, a0: float, b0: float, samples: list[dict]) -> None:
    ph = [s for s in samples if a0 <= s["t"] <= b0]
    inc = [i for i in range(1, len(ph)) if ph[i].get("gtok", 0) > ph[i - 1].get("gtok", 0)]
    a, b = (ph[inc[0] - 1]["t"], ph[inc[-1]]["t"]) if inc else (a0, b0)
    d = b - a
    allp = [s for s in samples if a <= s["t"] <= b]
    mid = [s for s in samples if a + 0.2 * d <= s["t"] <= b - 0.2 * d] or allp
    if len(allp) < 2:
        print(f"{name}: too few samples")
        return
    r = [s.get("running", float("nan")) for s in mid]
    w = [s.get("waiting", 0) for s in mid]
    gp = [s["gpu"] for s in mid if isinstance(s.get("gpu"), float)]
    first, last = allp[0], allp[-1]
    dt = last["t"] - first["t"]

    def rate(k: str) -> float:
        return (last.get(k, 0) - first.get(k, 0)) / dt if dt > 0 else float("nan")

    def mean_of(ks: str, kn: str) -> float:
        n = last.get(kn, 0) - first.get(kn, 0)
        return (last.get(ks, 0) - first.get(ks, 0)) / n if n else float("nan")

    cpu = collections.defaultdict(list)
    for s in mid:
        for lab, pct in s.get("cpu", {}).items():
            cpu[lab].append(pct)
    top = sorted(cpu.items(), key=lambda kv: -med(kv[1]))[:8]
    print(f"== {name}: phase {b0 - a0:.1f}s, active {d:.1f}s, {len(allp)} samples ({len(mid)} mid)")
    print(
        f"   running mid: median {med(r):.0f} max {max(r):.0f} min {min(r):.0f} | whole max "
        f"{max(s.get('running', 0) for s in allp):.0f}; zero-running samples "
        f"{sum(1 for x in r if x == 0)}/{len(r)}"
    )
    print(
        f"   waiting mid: median {med(w):.0f} max {max(w):.0f} | gpu util mid median "
        f"{med(gp):.0f}% | conns mid median {med([s.get('conns', 0) for s in mid]):.0f}"
    )
    print(
        f"   server rates over phase: {rate('done'):.0f} req/s, prompt {rate('ptok'):.0f} tok/s,"
        f" gen {rate('gtok'):.0f} tok/s, cached {rate('phit'):.0f} tok/s; engine e2e mean "
        f"{mean_of('e2e_sum', 'e2e_n'):.3f}s, queue mean {mean_of('q_sum', 'e2e_n'):.3f}s, "
        f"ttft mean {mean_of('ttft_sum', 'ttft_n'):.3f}s"
    )
    print("   cpu mid medians: " + ", ".join(f"{k}:{med(v):.0f}%(n={len(v)})" for k, v in top))
    print("   running per sample: " + " ".join(f"{s.get('running', -1):.0f}" for s in allp))


def waves(job: Path) -> None:
    fn = job / "results.jsonl"
    if not fn.exists():
        return
    ts = []
    for line in fn.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("t0") and r.get("t"):
            ts.append((r["t0"], r["t"]))
    if not ts:
        return
    t0 = min(x for x, _ in ts)
    c = collections.Counter(int(y - t0) for _, y in ts)
    per_s = " ".join(str(c.get(i, 0)) for i in range(max(c) + 1))
    print(f"{job}: records finished per s: {per_s}")


def main() -> None:
    samples = load_samples()
    marks: dict[str, dict[str, float]] = {}
    for line in (W / "phases.txt").read_text().splitlines():
        t, what, name = line.split()[:3]
        marks.setdefault(name, {})[what] = float(t)
    for name, se in marks.items():
        if "START" in se and "END" in se:
            phase(name, se["START"], se["END"], samples)
    for job in sys.argv[1:]:
        waves(Path(job))


if __name__ == "__main__":
    main()
