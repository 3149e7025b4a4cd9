"""Real processes, real SIGKILL: a thread killed at random moments resumes correctly.

``crash_child.py`` runs a 12-step graph (``durability="sync"``) on a file
store with fsync on, and appends to a log, each line fsynced:

* ``run <n>`` when the node of step ``n`` starts: the side effect;
* ``put <n>`` when ``put`` has *returned* for the checkpoint holding the
  result of step ``n``: that checkpoint is acknowledged.

Several lanes (one store and thread each) run side by side. In each, a child is
started, the parent waits until the child has reported a randomly chosen number
of further lines, then sends SIGKILL; a new child resumes the thread. A child
that finishes the thread first logs ``end`` and waits to be killed or let go,
so every lane has exactly its planned number of kills; after the last one the
parent lets the next child finish (``done``). The kill points come from a fixed
seed; where exactly the child is when the signal lands (inside a node, a
``put``, an fsync, a rename) varies, which is the point.

Every wait ends on an event, never on a clock: each child writes every log
line, once it is durable, to a pipe of its own as well, and the parent blocks
on those pipes until one has a line or reaches its end (the child exited). A
child goes past a line only with the parent's leave, a byte on its stdin, sent
``AHEAD`` lines ahead of the lines read: however slowly the parent runs, a
child is killed within a few lines of its kill point, never after it ran to the
thread's end. So a slow machine makes the test slower, never wrong.

What must hold, per lane:

* **No acknowledged step runs again.** Reading the log in order, keep the
  highest ``n`` of a ``put <n>`` line seen so far. A later ``run <m>`` must have
  ``m`` greater than it: once ``put`` returned for the checkpoint holding step
  ``n``'s result, a resumed process starts after it, never at or before it. A
  step whose checkpoint was not acknowledged when the kill came may run again
  (at-least-once); a ``put`` that returned just before the kill but whose log
  line was not written yet only makes the check more lenient, never wrong.
* Every step ran at least once, and the final state equals an uncrashed run's
  (so no step's result was applied twice or lost).
* The store verifies (``verify().ok``) and no temp file of a killed writer is
  left once the store has been listed.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX

CHILD = Path(__file__).with_name("crash_child.py")
STEPS = 12  # as in crash_child.py
LANES = 3
SEED = 20240607
KILLS_PER_LANE = 7
AHEAD = 2
"""Lines a child may report beyond the last one the parent has read: a busy machine that
slows the parent down cannot let a child run past its kill point to the thread's end."""


@dataclass
class Lane:
    name: str
    root: Path
    kill_after: list[int]  # lines to wait for before each kill; empty: never kill
    process: subprocess.Popen | None = None
    reports: int | None = None  # the read end of the current child's report pipe
    target: int | None = None  # lines the current child reports before it is killed
    reported: int = 0
    last_report: bytes = b""
    pending: bytes = b""  # a report line not complete yet
    kills: int = 0
    finished: bool = False
    outputs: list[Path] = field(default_factory=list)

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def log(self) -> Path:
        return self.root / "log"

    def lines(self) -> list[str]:
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return []
        # a line being written when the child died is incomplete: it never happened
        return [line for line in text.split("\n")[:-1]]

    def start(self, selector: selectors.BaseSelector) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.outputs.append(self.root / f"child-{len(self.outputs)}.out")
        read_end, write_end = os.pipe()
        argv = [str(CHILD), str(self.store), str(self.log), self.name, str(write_end)]
        with self.outputs[-1].open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, *argv],
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                pass_fds=(write_end,),
            )
        # the child holds the only write end: its exit, or its death, ends the pipe
        os.close(write_end)
        self.reports = read_end
        self.reported, self.last_report, self.pending = 0, b"", b""
        if self.kill_after:
            self.target = self.kill_after.pop(0)
            self.let_go_on(AHEAD)
        else:
            self.target = None
            self.process.stdin.close()  # let it go: no kill is planned for this one
        selector.register(read_end, selectors.EVENT_READ, self)

    def let_go_on(self, lines: int) -> None:
        """Let the child report ``lines`` more lines (``crash_child.wait_to_go_on``)."""
        with suppress(BrokenPipeError):  # it exited: its pipe's end says so next
            self.process.stdin.write(b"." * lines)
            self.process.stdin.flush()

    def stop_listening(self, selector: selectors.BaseSelector) -> None:
        selector.unregister(self.reports)
        os.close(self.reports)
        if not self.process.stdin.closed:
            self.process.stdin.close()

    def output(self) -> str:
        return self.outputs[-1].read_text(errors="replace")

    def on_report(self, selector: selectors.BaseSelector) -> None:
        """Handle what the child's pipe has: new lines, or its end (the child exited)."""
        data = os.read(self.reports, 4096)
        if data:
            *complete, self.pending = (self.pending + data).split(b"\n")
            self.reported += len(complete)
            self.last_report = complete[-1] if complete else self.last_report
            at_end = self.last_report.startswith(b"end")
            if self.target is not None and (self.reported >= self.target or at_end):
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
                self.stop_listening(selector)
                self.kills += 1
                self.start(selector)
            elif self.target is not None:
                self.let_go_on(len(complete))
            return
        # the pipe ended: the child exited (nothing here kills a child but the code above)
        self.stop_listening(selector)
        returncode = self.process.wait()
        assert returncode == 0, f"{self.name} child failed ({returncode}):\n{self.output()}"
        lines = self.lines()
        assert lines and lines[-1].startswith("done"), f"{self.name} exited early"
        self.finished = True


def run_lanes(lanes: list[Lane]) -> None:
    """Drive every lane to ``done``, killing children at their chosen points."""
    try:
        with selectors.DefaultSelector() as selector:
            for lane in lanes:
                lane.start(selector)
            while not all(lane.finished for lane in lanes):
                # no timeout: each wake-up is a child's report or a child's exit
                for key, _ in selector.select():
                    key.data.on_report(selector)
    finally:
        # after a failed assertion, no child is left waiting for a parent that moved on
        for lane in lanes:
            if lane.process is not None and lane.process.poll() is None:
                lane.process.kill()
                lane.process.wait()


def check_log(lines: list[str]) -> None:
    acknowledged = 0  # the highest step whose checkpoint's put returned
    ran: set[int] = set()
    for number, line in enumerate(lines):
        word, *rest = line.split()
        if word == "end":
            continue
        if word == "put":
            acknowledged = max(acknowledged, int(rest[0]))
        elif word == "run":
            step = int(rest[0])
            assert step > acknowledged, (
                f"line {number}: step {step} ran again after put returned for step "
                f"{acknowledged}:\n" + "\n".join(lines)
            )
            ran.add(step)
    assert ran == set(range(1, STEPS + 1))
    assert lines[-1].startswith("done")


def final_values(store: Path, thread_id: str) -> dict:
    saver = VerifiedSaver(store)
    latest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    return latest.checkpoint["channel_values"]


def test_sigkill_at_random_moments_then_resume(tmp_path):
    rng = random.Random(SEED)
    lanes = [Lane("uncrashed", tmp_path / "uncrashed", kill_after=[])]
    for index in range(LANES):
        # about two log lines per step: kill points spread over the whole run
        kill_after = [rng.randint(1, 5) for _ in range(KILLS_PER_LANE)]
        lanes.append(Lane(f"lane-{index}", tmp_path / f"lane-{index}", kill_after=kill_after))
    run_lanes(lanes)

    assert [lane.kills for lane in lanes] == [0] + [KILLS_PER_LANE] * LANES
    reference = final_values(lanes[0].store, "uncrashed")
    assert reference["count"] == STEPS
    assert reference["trace"] == list(range(1, STEPS + 1))
    for lane in lanes:
        check_log(lane.lines())
        assert final_values(lane.store, lane.name) == reference, lane.name
        saver = VerifiedSaver(lane.store)
        report = saver.verify()
        assert report.ok, (lane.name, report.to_dict())
        assert not [p for p in lane.store.rglob("*") if p.name.startswith(TEMP_PREFIX)]
        assert saver.stats.damaged_records == 0
    # the kills landed while there was work left, not only at the end
    assert all(
        sum(line.startswith("end") for line in lane.lines()) < KILLS_PER_LANE for lane in lanes
    )


def test_log_check_catches_a_step_that_runs_again():
    """The invariant above is not vacuous: a rerun of an acknowledged step fails it."""
    good = [f"run {n} 1\nput {n} 1" for n in range(1, STEPS + 1)]
    lines = "\n".join(["put 0 1", *good, "done 1"]).split("\n")
    check_log(lines)
    rerun = lines[:6] + ["run 2 2"] + lines[6:]
    try:
        check_log(rerun)
    except AssertionError as exc:
        assert "step 2 ran again" in str(exc)
    else:
        raise AssertionError("a rerun of an acknowledged step went unnoticed")
