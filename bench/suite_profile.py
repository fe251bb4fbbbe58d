"""Where a test run's time went, from the timeline `make test` records (tests/suite_timeline.py).

Prints the run's wall time and each worker's busy and idle time, the time per test file, the longest
tests, and where the workers' time went: fixed sleeps in the test process, and the CPU seconds of
the processes tests started, by kind (servers, trainers, environments, engines, model builds).
Two timelines side by side (`--before DIR`) print both and their ratio.

    .venv/bin/python bench/suite_profile.py .suite-timeline [--before DIR] [--files 25] [--tests 15]
        [--write-file-seconds tests/file_seconds.json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TestTime:
    nodeid: str
    worker: str
    start: float = float("inf")
    stop: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # setup / call / teardown seconds
    outcome: str = "passed"
    sleep_s: float = 0.0
    own_cpu_s: float = 0.0  # the test process itself: in-process servers, models loaded there
    child_cpu_s: dict[str, float] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)

    @property
    def file(self) -> str:
        return self.nodeid.split("::")[0]

    @property
    def seconds(self) -> float:
        return sum(self.phases.values())


@dataclass
class Timeline:
    tests: list[TestTime]

    @property
    def start(self) -> float:
        return min(t.start for t in self.tests)

    @property
    def stop(self) -> float:
        return max(t.stop for t in self.tests)

    @property
    def wall(self) -> float:
        return self.stop - self.start

    def workers(self) -> dict[str, list[TestTime]]:
        by: dict[str, list[TestTime]] = defaultdict(list)
        for t in self.tests:
            by[t.worker].append(t)
        return dict(sorted(by.items()))

    def files(self) -> dict[str, list[TestTime]]:
        by: dict[str, list[TestTime]] = defaultdict(list)
        for t in self.tests:
            by[t.file].append(t)
        return by


def read_timeline(folder: Path) -> Timeline:
    """The tests of the full pytest session in `folder`. `make test` runs the kernel-family passes
    into the same files first, and a test may run pytest itself: each worker's lines are grouped by
    the process that wrote them, and the largest group is the session."""
    tests: list[TestTime] = []
    for path in sorted(folder.glob("*.jsonl")):
        groups: dict[int, dict[str, TestTime]] = defaultdict(dict)
        for raw in path.read_text().splitlines():
            line: dict[str, Any] = json.loads(raw)
            test = groups[line["pid"]].setdefault(line["nodeid"], TestTime(line["nodeid"], line["worker"]))
            if line["when"] == "processes":
                test.sleep_s, test.own_cpu_s = line["sleep_s"], line["own_cpu_s"]
                test.child_cpu_s, test.children = line["child_cpu_s"], line["children"]
                continue
            test.start, test.stop = min(test.start, line["start"]), max(test.stop, line["stop"])
            test.phases[line["when"]] = line["stop"] - line["start"]
            if line["outcome"] != "passed" and test.outcome == "passed":
                test.outcome = line["outcome"]
        if groups:
            tests += [t for t in max(groups.values(), key=len).values() if t.phases]
    if not tests:
        raise SystemExit(f"no test timeline in {folder}: `make test` records one in .suite-timeline")
    return Timeline(tests)


def _fmt(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def report(timeline: Timeline, files: int, longest: int) -> list[str]:
    out = [f"pytest wall {_fmt(timeline.wall)} ({timeline.wall:.0f} s), {len(timeline.tests)} tests"]
    for worker, tests in timeline.workers().items():
        busy = sum(t.seconds for t in tests)
        last = max(t.stop for t in tests)
        out.append(
            f"  {worker}: {len(tests)} tests, busy {_fmt(busy)}, idle {_fmt(timeline.wall - busy)}"
            f" (of which at the end {_fmt(timeline.stop - last)})"
        )
    out += ["", f"{'file':58} {'tests':>5} {'worker-s':>9} {'setup-s':>8} {'sleep-s':>8} {'child cpu-s':>11}"]
    by_file = sorted(timeline.files().items(), key=lambda kv: -sum(t.seconds for t in kv[1]))
    for name, tests in by_file[:files]:
        out.append(
            f"{name:58} {len(tests):5} {sum(t.seconds for t in tests):9.0f} "
            f"{sum(t.phases.get('setup', 0.0) for t in tests):8.0f} {sum(t.sleep_s for t in tests):8.0f} "
            f"{sum(sum(t.child_cpu_s.values()) for t in tests):11.0f}"
        )
    rest = by_file[files:]
    if rest:
        out.append(
            f"{'(' + str(len(rest)) + ' more files)':58} {sum(len(ts) for _, ts in rest):5} "
            f"{sum(t.seconds for _, ts in rest for t in ts):9.0f}"
        )
    out += ["", "longest tests (s, worker, phases)"]
    for t in sorted(timeline.tests, key=lambda t: -t.seconds)[:longest]:
        phases = " ".join(f"{k} {v:.0f}" for k, v in t.phases.items() if v >= 1.0)
        out.append(f"  {t.seconds:7.0f}  {t.worker:4}  {t.nodeid}  [{phases}] {t.outcome}")
    out += ["", "where the workers' time went"]
    total = sum(t.seconds for t in timeline.tests)
    sleeps = sum(t.sleep_s for t in timeline.tests)
    own = sum(t.own_cpu_s for t in timeline.tests)
    out.append(f"  worker-seconds in tests {total:.0f}; fixed sleeps and polls in the test processes {sleeps:.0f}")
    out.append(f"  CPU seconds of the test processes themselves (in-process servers, models) {own:.0f}")
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for t in timeline.tests:
        for kind, used in t.child_cpu_s.items():
            cpu[kind] += used
        for kind, n in t.children.items():
            count[kind] += n
    out.append(f"  processes started by tests: {sum(count.values())}; their CPU seconds by kind:")
    for kind, used in sorted(cpu.items(), key=lambda kv: -kv[1]):
        each = used / max(count[kind], 1)
        out.append(f"    {kind:18} {count[kind]:5} processes {used:8.0f} cpu-s ({each:5.1f} each)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline", type=Path, help="the folder RL_MCP_SUITE_TIMELINE named")
    parser.add_argument("--before", type=Path, help="an earlier run's timeline, printed first with the ratio")
    parser.add_argument("--files", type=int, default=25)
    parser.add_argument("--tests", type=int, default=15)
    parser.add_argument(
        "--write-file-seconds", type=Path, help="write each file's worker-seconds (as tests/file_seconds.json)"
    )
    args = parser.parse_args()
    after = read_timeline(args.timeline)
    if args.write_file_seconds:
        seconds = {name: round(sum(t.seconds for t in ts), 1) for name, ts in after.files().items()}
        ordered = dict(sorted(seconds.items(), key=lambda kv: -kv[1]))
        args.write_file_seconds.write_text(json.dumps(ordered, indent=1) + "\n")
    if args.before:
        before = read_timeline(args.before)
        print(f"== before: {args.before}")
        print("\n".join(report(before, args.files, args.tests)))
        print(f"\n== after: {args.timeline}")
        print("\n".join(report(after, args.files, args.tests)))
        print(
            f"\nafter / before: pytest wall {after.wall / before.wall:.2f}x, "
            f"worker-seconds {sum(t.seconds for t in after.tests) / sum(t.seconds for t in before.tests):.2f}x"
        )
    else:
        print("\n".join(report(after, args.files, args.tests)))


if __name__ == "__main__":
    main()
