"""Section 11: damage trials, one bit flipped or one 4 KB block zeroed, next to SqliteSaver.

One chat is built once per saver: a ``StateGraph`` with a ``messages`` channel
(``add_messages``) whose one node answers each human turn with an AIMessage of
~1 KB; ``damage_steps`` calls of ``graph.invoke`` on one thread, with
``VerifiedSaver(dir)`` and with ``SqliteSaver`` on a file. LangGraph writes three
checkpoints per call (the input, the turn applied, the reply), so the thread
holds three checkpoints per step. Every checkpoint is then read back from the
undamaged store and kept as digests: the truth each trial is compared with.

Each trial works on a fresh copy of the store and applies one damage:

* ``bit``: one bit flipped. The file is drawn among the thread's files for
  VerifiedSaver (every regular file under ``threads/<T>/``) and among the
  database's files for SQLite, weighted by size; then a byte offset and a bit.
* ``block``: one 4096-aligned block of a file drawn the same way zeroed
  (``min(4096, bytes left)`` bytes).

Then a new saver is opened on the copy (``VerifiedSaver(dir)`` with its
defaults, quarantine on; ``SqliteSaver(sqlite3.connect(file))``) and reads:

* ``get_tuple`` of the thread: how many checkpoints back from the true newest
  it is (0: the true newest), whether it raised, and how what it returned
  compares with what the undamaged store returns for that checkpoint id:
  exact; some pending writes left out (the rest the same); or different
  (wrong data, returned without an error);
* ``list`` of the thread: every other checkpoint must read back exactly as it
  did undamaged (checkpoint, metadata, parent, pending writes); those missing,
  with writes left out, or different are counted.

For VerifiedSaver, ``verify(repair=True)`` then runs on the damaged copy, and a
new saver reads the newest and every checkpoint again: how many are not exact.

The trials draw from ``random.Random`` seeded with the damage and saver names,
so a run repeats the same draws: the same file, the same fraction of its size,
the same bit. The stores are not byte for byte the same in every run, though:
LangGraph makes checkpoint ids from the clock, so ids, times and the sizes of
compressed records (and of SQLite's pages) differ a little, and a damage that
lands near the edge of a record may land on the other side of it in another
run. The counts repeat closely, not exactly. Nothing here is timed.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import shutil
import sqlite3
import statistics
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from chat import SQLITE, VERIFIED_FILES
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel
from typing_extensions import TypedDict
from workload import TextSource

from langgraph_checkpoint_verified import VerifiedSaver

THREAD = "chat"
CONFIG: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
BLOCK = 4096
REPLY_CHARS = (900, 1100)
DAMAGES = {
    "bit": "one bit flipped anywhere in the thread's files",
    "block": "one 4 KB-aligned block zeroed",
}


# -- the chat --------------------------------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_graph(replies: list[str]) -> StateGraph:
    """START -> reply -> END; ``reply`` answers turn ``n`` with ``replies[n]``."""

    def reply(state: ChatState) -> dict[str, Any]:
        turn = len(state["messages"]) // 2
        return {"messages": [AIMessage(replies[turn], id=f"ai-{turn:04d}")]}

    builder = StateGraph(ChatState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def run_chat(saver: Any, replies: list[str]) -> None:
    graph = build_graph(replies).compile(checkpointer=saver)
    for turn in range(len(replies)):
        message = HumanMessage(f"turn {turn}: say more", id=f"human-{turn:04d}")
        graph.invoke({"messages": [message]}, CONFIG)


# -- what a saver reads, reduced to digests ------------------------------------------------


def canonical(value: Any) -> Any:
    """A form of ``value`` whose repr is the same for equal values, dicts in any order.

    A message (a pydantic model) is its JSON, its fields in their declared order.
    """
    if isinstance(value, BaseModel):  # a message: pydantic's own serializer is quick
        return (type(value).__name__, value.model_dump_json())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(canonical(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(canonical(v)) for v in value)))
    return repr(value)


Reading = tuple[str, tuple[str, ...]]
"""What a user gets from one ``CheckpointTuple``, as digests: checkpoint, metadata and
parent in one; each pending write in another (sorted)."""


def sha(value: Any) -> str:
    return hashlib.sha256(repr(canonical(value)).encode()).hexdigest()


def reading(item: Any) -> Reading:
    parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    writes = tuple(sorted(sha(write) for write in item.pending_writes or []))
    return sha((item.checkpoint, item.metadata, parent)), writes


EXACT, WRITES_LOST, DIFFERENT = "exact", "writes lost", "different"


def compare(truth: Reading | None, read: Reading) -> str:
    """``exact``; ``writes lost`` (some pending writes left out, nothing else changed);
    or ``different`` (anything else: wrong values, metadata, parent or writes)."""
    if truth == read:
        return EXACT
    if truth is not None and truth[0] == read[0] and Counter(read[1]) <= Counter(truth[1]):
        return WRITES_LOST
    return DIFFERENT


def read_all(saver: Any) -> dict[str, Reading]:
    """Checkpoint id -> reading, for every checkpoint ``list`` returns (newest first)."""
    return {item.checkpoint["id"]: reading(item) for item in saver.list(CONFIG)}


# -- the stores ---------------------------------------------------------------------------


@dataclass
class Store:
    """A saver's undamaged store and what it reads back."""

    name: str
    origin: Path  # the directory or database file copied for each trial
    history: list[str]  # checkpoint ids, newest first
    truth: dict[str, Reading]  # checkpoint id -> what the undamaged store reads
    copy: Callable[[Path], Path]  # copies the store into a new directory, returns its path
    files: Callable[[Path], list[Path]]  # the files a damage may land in, in a copy
    open: Callable[[Path], Any]  # a context giving a new saver on a copy


def thread_files(store: Path) -> list[Path]:
    """Every regular file under ``threads/<T>/`` (one thread: its directory name is encoded)."""
    threads = [p for p in (store / "threads").iterdir() if p.is_dir()]
    assert len(threads) == 1, f"expected one thread directory, found {threads}"
    return sorted(p for p in threads[0].rglob("*") if p.is_file() and not p.is_symlink())


def database_files(db: Path) -> list[Path]:
    return sorted(p for p in db.parent.glob(db.name + "*") if p.is_file())


@contextlib.contextmanager
def open_verified(store: Path) -> Iterator[VerifiedSaver]:
    saver = VerifiedSaver(store)
    try:
        yield saver
    finally:
        saver.close()


@contextlib.contextmanager
def open_sqlite(db: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def build_stores(steps: int, workdir: Path) -> dict[str, Store]:
    texts = TextSource(seed=11)
    replies = [texts.text(*REPLY_CHARS) for _ in range(steps)]

    origin = workdir / "verified"
    with VerifiedSaver(origin, fsync=False) as saver:  # the same bytes, written sooner
        run_chat(saver, replies)
    db = workdir / "sqlite" / "chat.db"
    db.parent.mkdir()
    with sqlite3.connect(db, check_same_thread=False) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        run_chat(SqliteSaver(conn), replies)
    conn.close()  # the WAL is folded into the database and removed: one file to copy

    def copy_tree(target: Path) -> Path:
        return Path(shutil.copytree(origin, target / "verified"))

    def copy_database(target: Path) -> Path:
        (target / "sqlite").mkdir(parents=True)
        for path in database_files(db):
            shutil.copyfile(path, target / "sqlite" / path.name)
        return target / "sqlite" / db.name

    stores = {}
    for name, where, copy, files, opener in (
        (VERIFIED_FILES, origin, copy_tree, thread_files, open_verified),
        (SQLITE, db, copy_database, database_files, open_sqlite),
    ):
        with opener(where) as saver:
            truth = read_all(saver)
        stores[name] = Store(name, where, list(truth), truth, copy, files, opener)
    return stores


# -- damage ----------------------------------------------------------------------------------


def draw_file(rng: random.Random, files: list[Path]) -> Path:
    sizes = [path.stat().st_size for path in files]
    return rng.choices(files, weights=sizes)[0]


def draw_below(rng: random.Random, count: int) -> int:
    """0 <= n < count, drawn as a fraction of ``count``: the same fraction of a file a few
    bytes longer or shorter in another run (where ``randrange`` would draw anew)."""
    return min(int(rng.random() * count), count - 1)


def flip_bit(rng: random.Random, files: list[Path], base: Path) -> dict[str, Any]:
    path = draw_file(rng, files)
    offset = draw_below(rng, path.stat().st_size)
    bit = rng.randrange(8)
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))
    return {"file": str(path.relative_to(base)), "offset": offset, "bit": bit}


def zero_block(rng: random.Random, files: list[Path], base: Path) -> dict[str, Any]:
    path = draw_file(rng, files)
    size = path.stat().st_size
    offset = draw_below(rng, -(-size // BLOCK)) * BLOCK
    length = min(BLOCK, size - offset)
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(bytes(length))
    return {"file": str(path.relative_to(base)), "offset": offset, "bytes": length}


APPLY = {"bit": flip_bit, "block": zero_block}


# -- one trial ---------------------------------------------------------------------------------


def error_name(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def read_back(store: Store, path: Path) -> dict[str, Any]:
    """A new saver on ``path`` reads the newest and every checkpoint; compared with the truth.

    ``back`` is how many checkpoints before the true newest the one returned is
    (``len(history)`` if nothing was returned, ``None`` if its id is unknown),
    ``newest`` how it compares with the undamaged read of the same id; the
    checkpoints ``list`` left out, or returned otherwise than undamaged, are
    listed by how they differ.
    """
    out: dict[str, Any] = {"error": None, "list_error": None, "returned": None, "back": None}
    out["newest"] = None
    read: dict[str, Reading] = {}
    try:
        with store.open(path) as saver:
            try:
                item = saver.get_tuple(CONFIG)
            except Exception as exc:
                out["error"] = error_name(exc)
            else:
                if item is None:
                    out["back"] = len(store.history)
                else:
                    returned = item.checkpoint["id"]
                    out["returned"] = returned
                    if returned in store.truth:
                        out["back"] = store.history.index(returned)
                    out["newest"] = compare(store.truth.get(returned), reading(item))
            try:
                for listed in saver.list(CONFIG):
                    read[listed.checkpoint["id"]] = reading(listed)
            except Exception as exc:
                out["list_error"] = error_name(exc)
    except Exception as exc:  # opening (or closing) the saver failed
        out["error"] = out["error"] or error_name(exc)
        out["list_error"] = out["list_error"] or error_name(exc)
    out["newest_exact"] = out["error"] is None and out["back"] == 0 and out["newest"] == EXACT
    out["listed"] = {
        c: compare(store.truth[c], read[c]) if c in read else "missing" for c in store.history
    }
    out["unknown_listed"] = sum(c not in store.truth for c in read)
    return out


def run_trial(store: Store, kind: str, rng: random.Random, where: Path) -> dict[str, Any]:
    copy = store.copy(where)
    base = copy if copy.is_dir() else copy.parent
    damage = APPLY[kind](rng, store.files(copy), base)
    first = read_back(store, copy)
    newest = store.history[0]
    others = Counter(how for c, how in first["listed"].items() if c != newest and how != EXACT)
    trial: dict[str, Any] = {
        "damage": damage,
        **{key: first[key] for key in ("error", "list_error", "returned", "back", "newest")},
        "others_missing": others["missing"],
        "others_writes_lost": others[WRITES_LOST],
        "others_different": others[DIFFERENT],
        "others_not_exact": sum(others.values()),
        "unknown_listed": first["unknown_listed"],
    }
    if store.name == VERIFIED_FILES:
        trial["repair_error"] = None
        try:
            with store.open(copy) as saver:
                trial["verify_ok"] = saver.verify(repair=True).ok
        except Exception as exc:
            trial["repair_error"] = error_name(exc)
        after = read_back(store, copy)  # a new saver: what is on disk after the repair
        not_exact = {c for c, how in after["listed"].items() if how != EXACT}
        if not after["newest_exact"]:
            not_exact.add(newest)
        trial["after_repair_not_exact"] = len(not_exact)
    shutil.rmtree(where)
    return trial


# -- the section ---------------------------------------------------------------------------------


def summarize(trials: list[dict[str, Any]], checkpoints: int) -> dict[str, Any]:
    """The row of the table: counts over the trials of one damage and one saver."""
    returned = [t for t in trials if not t["error"]]
    back = [t["back"] for t in returned if t["back"] is not None]
    further = [b for b in back if b > 1]
    row: dict[str, Any] = {
        "trials": len(trials),
        "checkpoints": checkpoints,
        "newest": sum(b == 0 for b in back),
        "back_1": sum(b == 1 for b in back),
        "back_more": len(further),
        "back_more_median": statistics.median(further) if further else None,
        "back_more_max": max(further) if further else None,
        "nothing_returned": sum(b == checkpoints for b in back),
        "unknown_returned": sum(t["back"] is None for t in returned),
        "wrong": sum(t["newest"] == DIFFERENT for t in returned),
        "writes_lost": sum(t["newest"] == WRITES_LOST for t in returned),
        "raised": len(trials) - len(returned),
        "list_raised": sum(bool(t["list_error"]) for t in trials),
        "others_not_exact_trials": sum(t["others_not_exact"] > 0 for t in trials),
        "others_not_exact_total": sum(t["others_not_exact"] for t in trials),
        "others_not_exact_max": max((t["others_not_exact"] for t in trials), default=0),
        "others_missing_total": sum(t["others_missing"] for t in trials),
        "others_writes_lost_total": sum(t["others_writes_lost"] for t in trials),
        "others_different_total": sum(t["others_different"] for t in trials),
        "others_different_trials": sum(t["others_different"] > 0 for t in trials),
        "unknown_listed_total": sum(t["unknown_listed"] for t in trials),
    }
    if trials and "after_repair_not_exact" in trials[0]:
        row["after_repair_exact_trials"] = sum(t["after_repair_not_exact"] == 0 for t in trials)
        row["after_repair_not_exact_total"] = sum(t["after_repair_not_exact"] for t in trials)
        row["after_repair_not_exact_max"] = max(t["after_repair_not_exact"] for t in trials)
        row["repair_raised"] = sum(bool(t["repair_error"]) for t in trials)
    return row


def damage_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir()
    stores = build_stores(settings.damage_steps, workdir)
    counts = {"bit": settings.damage_bit_trials, "block": settings.damage_block_trials}
    out: dict[str, Any] = {
        "steps": settings.damage_steps,
        "checkpoints": {name: len(store.history) for name, store in stores.items()},
        "bytes": {
            name: sum(p.stat().st_size for p in store.files(store.origin))
            for name, store in stores.items()
        },
        "damages": DAMAGES,
        "rows": {},
        "trials": {},
    }
    for kind, count in counts.items():
        for name, store in stores.items():
            rng = random.Random(f"{kind}/{name}")
            trials = [
                run_trial(store, kind, rng, workdir / f"trial-{kind}-{n}") for n in range(count)
            ]
            out["trials"].setdefault(kind, {})[name] = trials
            out["rows"].setdefault(kind, {})[name] = summarize(trials, len(store.history))
    return {"damage": out}
