"""Crash, corrupt and resume a multi-step LangGraph agent on a verified file store.

Run with ``make demo`` (or ``python examples/demo.py``). Everything happens in a
temporary directory; nothing needs a network.

1. A node raises part-way; a fresh saver on the same directory resumes the
   thread and the finished steps do not run again.
2. A real child process is killed with SIGKILL in the middle of a step; a new
   process resumes it to the end.
3. The newest checkpoint is damaged on disk. One bad bit costs nothing: the
   log's parity rebuilds it, and repair writes it back. Damage beyond what
   parity rebuilds: the saver falls back to the newest checkpoint that
   verifies, quarantines the damaged record, and the run still finishes with
   the right result.
4. A three-phase agent fails in its second phase; ``run_with_recovery`` rolls
   back to the end of phase one, retries with a corrective hint, and the email
   its tool sends goes out once (``examples/side_effects_demo.py``).
"""

from __future__ import annotations

import logging
import operator
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.log.entries import scan

STEPS = ["plan", "research", "draft", "review", "publish"]


class ReportState(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def build_agent(workdir: Path, *, fail_in: str | None = None, kill_in: str | None = None):
    """A five-step report-writing agent. Each step appends a line to ``ran.log``."""

    def make_step(name: str):
        def step(state: ReportState) -> dict:
            with open(workdir / "ran.log", "a") as log:
                log.write(f"{name}\n")
            flag = workdir / f"failed-{name}"
            if name == fail_in and not flag.exists():
                flag.touch()
                raise RuntimeError(f"the {name} step hit a flaky API")
            if name == kill_in:
                os.kill(os.getpid(), signal.SIGKILL)  # a real crash: no cleanup, no finally
            return {"notes": [f"{name} done for {state['topic']}"]}

        return step

    builder = StateGraph(ReportState)
    previous = START
    for name in STEPS:
        builder.add_node(name, make_step(name))
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def runs(workdir: Path) -> list[str]:
    log = workdir / "ran.log"
    return log.read_text().split() if log.exists() else []


def say(text: str = "") -> None:
    print(text, flush=True)


def raised_error(root: Path) -> None:
    say("1. A step raises an error part-way")
    store, workdir = root / "store-1", root / "work-1"
    workdir.mkdir()
    config = {"configurable": {"thread_id": "report-1"}}
    graph = build_agent(workdir, fail_in="draft").compile(checkpointer=VerifiedSaver(store))
    try:
        graph.invoke({"topic": "tides", "notes": []}, config)
    except RuntimeError as exc:
        say(f"   the run stopped: {exc}")
    say(f"   steps that ran so far: {', '.join(runs(workdir))}")
    fresh = build_agent(workdir, fail_in="draft").compile(checkpointer=VerifiedSaver(store))
    state = fresh.get_state(config)
    say(
        f"   a fresh saver on the same directory finds the thread at step {state.metadata['step']}"
        f", next: {', '.join(state.next)}"
    )
    result = fresh.invoke(None, config)
    say(f"   resumed to the end: {len(result['notes'])} notes")
    say(f"   every step ran: {', '.join(runs(workdir))}")
    counts = {name: runs(workdir).count(name) for name in STEPS}
    assert counts == {"plan": 1, "research": 1, "draft": 2, "review": 1, "publish": 1}, counts
    say("   plan and research ran once; only the failed draft step ran again.")


def killed_process(root: Path) -> None:
    say()
    say("2. The process is killed with SIGKILL in the middle of a step")
    store, workdir = root / "store-2", root / "work-2"
    workdir.mkdir()
    child = subprocess.run(
        [sys.executable, __file__, "--child", str(store), str(workdir)], check=False
    )
    say(
        f"   the child process died with signal {-child.returncode}"
        f" ({signal.Signals(-child.returncode).name})"
    )
    say(f"   steps it ran: {', '.join(runs(workdir))}")
    config = {"configurable": {"thread_id": "report-2"}}
    graph = build_agent(workdir).compile(checkpointer=VerifiedSaver(store))
    state = graph.get_state(config)
    say(
        f"   a new process finds the thread at step {state.metadata['step']}, next: "
        f"{', '.join(state.next)}"
    )
    result = graph.invoke(None, config)
    say(
        f"   finished with {len(result['notes'])} notes; steps run in total: "
        f"{', '.join(runs(workdir))}"
    )
    assert [n.split()[0] for n in result["notes"]] == STEPS
    assert runs(workdir).count("research") == 1 and runs(workdir).count("draft") == 1
    say("   only the killed review step ran again.")


def flip_newest_checkpoint(store: Path, thread_id: str) -> Path:
    """Flip one bit in the middle of the newest checkpoint's record, in the thread's log."""
    log = store / "threads" / thread_id / "log"
    data = bytearray(log.read_bytes())
    entries, _, _ = scan(bytes(data))
    newest = max((e for e in entries if e.key.endswith(".ckpt")), key=lambda e: e.key)
    data[newest.data_offset + newest.data_size // 2] ^= 0x01
    log.write_bytes(bytes(data))
    say(
        f"   flipped one bit in {log.relative_to(store)}, at byte {newest.data_offset},"
        " inside the newest checkpoint's record"
    )
    return log


def damaged_checkpoint(root: Path) -> None:
    say()
    say("3. The newest checkpoint is damaged on disk")
    store, workdir = root / "store-3", root / "work-3"
    workdir.mkdir()
    config = {"configurable": {"thread_id": "report-3"}}
    graph = build_agent(workdir, kill_in=None).compile(checkpointer=VerifiedSaver(store))
    # stop before the last step, the way an interrupted run would
    graph.invoke({"topic": "glaciers", "notes": []}, config, interrupt_before=["publish"])
    newest_step = graph.get_state(config).metadata["step"]

    # a. one bad bit: the log's parity rebuilds the block it is in; nothing is lost
    flip_newest_checkpoint(store, "report-3")
    damage_seen = []
    saver = VerifiedSaver(store, on_corruption=damage_seen.append)
    state = build_agent(workdir).compile(checkpointer=saver).get_state(config)
    assert state.metadata["step"] == newest_step and damage_seen[0].healed
    say(f"   get_state returned step {state.metadata['step']}: the newest checkpoint, rebuilt")
    say(f"   reported: {damage_seen[0].reason}")
    repaired = saver.verify(repair=True)
    say(
        f"   verify(repair=True) wrote {len(repaired.healed)} rebuilt block(s) back;"
        f" verify() now: ok={saver.verify().ok}"
    )

    # b. damage beyond what parity rebuilds (here: the parity lost as well)
    log = flip_newest_checkpoint(store, "report-3")
    log.with_name("log.parity").unlink()
    say("   ...and deleted the log's parity, so that nothing can rebuild it this time")
    damage_seen = []
    saver = VerifiedSaver(store, on_corruption=damage_seen.append)
    graph = build_agent(workdir).compile(checkpointer=saver)
    state = graph.get_state(config)
    tasks = ", ".join(
        f"{t.name} ({'result kept' if t.result is not None else 'to run'})" for t in state.tasks
    )
    say(
        f"   get_state did not fail: it returned step {state.metadata['step']}, the newest"
        f" checkpoint that verifies; its tasks: {tasks}"
    )
    for damage in damage_seen:
        say(f"   reported: {damage.kind} record, {damage.reason}")
        say(f"   quarantined to {Path(damage.quarantined_to).relative_to(store)}")
    say(f"   saver.stats: {saver.stats}")
    result = graph.invoke(None, config)
    say(f"   resumed and finished: {', '.join(n.split()[0] for n in result['notes'])}")
    assert [n.split()[0] for n in result["notes"]] == STEPS
    report = saver.verify()
    say(f"   verify() after the run: ok={report.ok}, {report.records_checked} records checked")


def child(store: str, workdir: str) -> None:
    graph = build_agent(Path(workdir), kill_in="review").compile(checkpointer=VerifiedSaver(store))
    # durability="sync": each step's checkpoint is on disk before the next step starts
    graph.invoke(
        {"topic": "volcanoes", "notes": []},
        {"configurable": {"thread_id": "report-2"}},
        durability="sync",
    )


def main() -> None:
    logging.basicConfig(stream=sys.stdout, format="   log: %(message)s", level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="verified-demo-") as tmp:
        root = Path(tmp)
        raised_error(root)
        killed_process(root)
        damaged_checkpoint(root)
        side_effects = Path(__file__).with_name("side_effects_demo.py")
        if side_effects.exists():
            sys.path.insert(0, str(side_effects.parent))
            from side_effects_demo import run_side_effects_demo

            say()
            say("4. A tool with a side effect fails part-way; the agent retries with a hint")
            run_side_effects_demo(str(root / "side-effects"))
    say()
    say("Done: every run finished with the right result, and no damaged record was used.")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
