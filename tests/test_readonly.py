"""A store this process cannot write: damage is read past and reported, nothing moves.

A store may be read-only for good reasons: a backup mounted read-only, a copy
made to look at, another user's files. Reads must still fall back past damage
(and say that nothing was moved), a saver must open on it, the thread lock must
be usable, and the command line must say what is wrong instead of a raw errno.

Two flavours: EACCES (no write permission) and EROFS (read-only mount). Without
root, EACCES is the real thing (``chmod -R a-w``). Root ignores write
permissions, so as root both are simulated by refusing, with that errno, every
call that would change the store (``readonly_child.install``); the command line
is also run as an unprivileged user (``setpriv``) on a store that user cannot
write, so the kernel itself refuses. That user may be unable to reach the
installed console script (a checkout under a directory only its owner can enter,
such as ``/root`` or what ``mktemp -d`` makes): it then runs a copy of the
script, of the interpreter and of what the script imports, made where it can.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from echo_graph import build_graph
from logtools import append_entry
from packaging.requirements import Requirement
from readonly_child import install

from langgraph_checkpoint_verified import StoreWriteError, VerifiedSaver
from langgraph_checkpoint_verified.cli import main
from langgraph_checkpoint_verified.records.keys import checkpoint_key, thread_prefix
from langgraph_checkpoint_verified.storage.log.entries import PUT, encode_entry, scan
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME

TESTS = Path(__file__).parent
CONSOLE_SCRIPT = Path(sys.prefix) / "bin" / "langgraph-verified"
IS_ROOT = os.geteuid() == 0
FLAVOURS = ["EACCES", "EROFS"]


def config(thread_id: str = "alpha") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def checkpoint_id(item: Any) -> str:
    return str(item.config["configurable"]["checkpoint_id"])


def make_store(path: Path) -> list[Any]:
    """A real graph's store: two turns of a chat. Its checkpoints, newest first."""
    graph = build_graph(VerifiedSaver(path))
    for text in ("hi", "how are you?"):
        graph.invoke({"messages": [("user", text)]}, config())
    return list(VerifiedSaver(path).list(config()))


def damage_newest(store: Path, history: list[Any]) -> str:
    """Append an entry holding junk under the newest checkpoint's key, as a record
    damaged before it was written would be; where the store says the junk lies."""
    log = store / thread_prefix("alpha") / LOG_NAME
    key = checkpoint_key("alpha", "", checkpoint_id(history[0]))
    forged = encode_entry(PUT, key, b"junk" * 40)
    at = append_entry(log, forged)
    ((entry,), _, _) = scan(forged)
    return f"{log}@{at + entry.data_offset} ({key})"


def snapshot(store: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every directory (``None``) under the store."""
    return {
        str(path.relative_to(store)): None if path.is_dir() else path.read_bytes()
        for path in sorted(store.rglob("*"))
    }


def set_writable(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


@pytest.fixture(params=FLAVOURS)
def make_read_only(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Path], None]]:
    """``make_read_only(store)``: from then on this process cannot change the store."""
    chmodded: list[Path] = []

    def make(store: Path) -> None:
        if request.param == "EACCES" and not IS_ROOT:
            set_writable(store, False)  # the real thing
            chmodded.append(store)
        else:
            install(store, getattr(errno, request.param), monkeypatch.setattr)

    yield make
    for store in chmodded:
        set_writable(store, True)


# -- reads ----------------------------------------------------------------------------


def test_a_damaged_read_only_store_is_read_past_and_left_as_it_is(
    tmp_path: Path, make_read_only: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "store"
    history = make_store(store)
    damaged = damage_newest(store, history)
    files = snapshot(store)
    make_read_only(store)

    seen: list[Any] = []
    saver = VerifiedSaver(store, on_corruption=seen.append)
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        found = saver.get_tuple(config())

    older = history[1]
    assert found is not None
    assert (found.config, found.checkpoint, found.metadata, found.pending_writes) == (
        older.config,
        older.checkpoint,
        older.metadata,
        older.pending_writes,
    )
    (damage,) = seen
    assert (damage.location, damage.kind, damage.quarantined_to) == (damaged, "checkpoint", None)
    assert saver.stats.damaged_records == 1
    assert saver.stats.quarantined_records == 0
    assert saver.stats.fallbacks == 1
    (warning,) = [r.getMessage() for r in caplog.records if damaged in r.getMessage()]
    assert "read-only" in warning and "nothing was moved" in warning

    # every other way of reading goes past it the same way
    assert [checkpoint_id(t) for t in saver.list(config())] == [
        checkpoint_id(t) for t in history[1:]
    ]
    assert checkpoint_id(saver.get_tuple(history[0].config)) == checkpoint_id(older)
    graph = build_graph(saver)
    assert checkpoint_id(graph.get_state(config())) == checkpoint_id(older)
    # what fails is writing, and it says so as a StoreWriteError
    with pytest.raises(StoreWriteError):
        graph.invoke({"messages": [("user", "again")]}, config())
    assert snapshot(store) == files


@pytest.mark.parametrize("marker", ["missing", "damaged"])
def test_a_saver_opens_on_a_read_only_store(
    tmp_path: Path, make_read_only: Callable[[Path], None], marker: str
) -> None:
    store = tmp_path / "store"
    history = make_store(store)
    marker_file = store / "store.marker"
    if marker == "missing":
        marker_file.unlink()  # a store copied without it
    else:
        marker_file.write_bytes(marker_file.read_bytes()[:-1] + b"?")
    files = snapshot(store)
    make_read_only(store)

    seen: list[Any] = []
    saver = VerifiedSaver(store, on_corruption=seen.append)
    assert checkpoint_id(saver.get_tuple(config())) == checkpoint_id(history[0])
    if marker == "damaged":
        assert [(d.key, d.quarantined_to) for d in seen] == [("store.marker", None)]
    else:
        assert seen == []
    assert snapshot(store) == files


# -- the thread lock --------------------------------------------------------------------


def try_lock_elsewhere(lock_file: Path, exclusive: bool) -> str:
    """Whether another process can take the lock right now (without waiting)."""
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n"
        f"    fcntl.flock(fd, {'fcntl.LOCK_EX' if exclusive else 'fcntl.LOCK_SH'}"
        " | fcntl.LOCK_NB)\n"
        "    print('taken')\n"
        "except BlockingIOError:\n"
        "    print('held')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(lock_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_the_thread_lock_still_locks_on_a_read_only_store(
    tmp_path: Path, make_read_only: Callable[[Path], None]
) -> None:
    """A thread's lock is its log's flock, and flock works on a file opened read-only: a
    read-only store still has a lock; an append inside the block says it cannot write."""
    store = tmp_path / "store"
    make_store(store)
    log = store / thread_prefix("alpha") / LOG_NAME
    files = snapshot(store)
    make_read_only(store)
    storage = VerifiedSaver(store).storage

    for exclusive in (True, False):
        with storage.lock(thread_prefix("alpha"), exclusive=exclusive):
            assert try_lock_elsewhere(log, exclusive=False) == "held"
            with pytest.raises(StoreWriteError):
                storage.write(f"{thread_prefix('alpha')}/ns/~/x", b"never")
    assert try_lock_elsewhere(log, exclusive=True) == "taken"
    assert snapshot(store) == files


def test_a_read_only_store_without_a_log_is_not_locked_and_nothing_is_made(
    tmp_path: Path, make_read_only: Callable[[Path], None]
) -> None:
    """No log, and none can be made: nobody can write there, so there is nothing to
    exclude. Neither a log nor a missing thread's directory is made."""
    store = tmp_path / "store"
    make_store(store)
    files = snapshot(store)
    make_read_only(store)
    storage = VerifiedSaver(store).storage

    for prefix in (thread_prefix("never-written"),):
        for exclusive in (True, False):
            with storage.lock(prefix, exclusive=exclusive):
                pass
    assert snapshot(store) == files


# -- the command line -------------------------------------------------------------------


def test_verify_and_repair_say_the_store_is_read_only(
    tmp_path: Path, make_read_only: Callable[[Path], None], capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    damaged = damage_newest(store, make_store(store))
    files = snapshot(store)
    make_read_only(store)

    code = main(["verify", str(store)])
    out, err = capsys.readouterr()
    assert code == 1
    assert f"  checkpoint  {damaged}" in out.splitlines()
    assert out.splitlines()[-1] == (
        f"note: {store} is read-only for this process: repair needs to write to it"
    )

    code = main(["repair", str(store)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "Errno" not in err
    assert err.startswith(f"langgraph-verified: error: cannot repair {store}: it is read-only")
    assert "nothing was moved" in err and "make it writable" in err
    assert snapshot(store) == files


def reachable_dir(prefix: str) -> Path:
    """A new directory an unprivileged user can reach (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    path = reachable_dir("lgv-readonly-")
    yield path
    set_writable(path, True)
    shutil.rmtree(path)


def unprivileged_ids() -> tuple[int, int]:
    """``nobody``'s user and group, or the ids it usually has where it has no entry."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return 65534, 65534
    return nobody.pw_uid, nobody.pw_gid


def as_unprivileged(command: list[str]) -> list[str]:
    uid, gid = unprivileged_ids()
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *command]


def runtime_distributions() -> list[metadata.Distribution]:
    """This package's distribution and every one it needs at run time (no extras of its
    own), as installed here: what a plain ``pip install`` of the package brings."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    wanted = [("langgraph-checkpoint-verified", "")]
    while wanted:
        name, extra = wanted.pop()
        key = (name.lower().replace("_", "-").replace(".", "-"), extra)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = found.get(key[0]) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not needed here (pip would have installed it otherwise)
        found[key[0]] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                wanted += [(requirement.name, e) for e in ["", *requirement.extras]]
    return list(found.values())


def make_readable(root: Path) -> None:
    """Everyone may read (and run or enter what its owner may) under ``root``."""
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if not path.is_symlink():
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))


def copy_for_unprivileged(root: Path) -> tuple[list[str], dict[str, str]]:
    """Copies, under ``root``, of this interpreter (with its standard library), of the
    installed console script and of every distribution it imports: how to run it.

    Nothing is left behind a directory the unprivileged user cannot enter: not the
    interpreter of a Python installed under ``/root`` (pyenv), nor a venv in a checkout
    under an owner-only directory, nor the sources an editable install points at.
    """
    home = root / "python"
    executable = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    (home / "bin").mkdir(parents=True)
    shutil.copy2(executable, home / "bin" / executable.name)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    junk = shutil.ignore_patterns(
        "site-packages", "dist-packages", "test", "tests", "__pycache__", "config-*",
        "idlelib", "tkinter", "turtledemo", "ensurepip",
    )  # fmt: skip
    shutil.copytree(stdlib, home / "lib" / stdlib.name, ignore=junk, symlinks=True)
    library = sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        shutil.copy2(Path(sysconfig.get_config_var("LIBDIR")) / library, home / "lib" / library)

    site = root / "site-packages"
    for dist in runtime_distributions():
        for file in dist.files or []:
            if ".." in file.parts or file.suffix in (".pyc", ".pth"):
                continue  # scripts, compiled caches, and an editable install's hook
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(str(dist.locate_file(file))), site / file)
    package = Path(str(sys.modules[main.__module__.partition(".")[0]].__file__)).parent
    ignore = shutil.ignore_patterns("__pycache__")  # the sources, an editable install's too
    shutil.copytree(package, site / package.name, ignore=ignore, dirs_exist_ok=True)

    script = root / "bin" / CONSOLE_SCRIPT.name
    script.parent.mkdir()
    shutil.copy2(CONSOLE_SCRIPT, script)  # run by the copied interpreter: its #! is not used
    make_readable(root)
    env = {
        "PYTHONHOME": str(home),
        "PYTHONPATH": str(site),
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in [str(home / "lib"), os.environ.get("LD_LIBRARY_PATH", "")] if p
        ),
    }
    return [str(home / "bin" / executable.name), "-s", str(script)], env


def runs_unprivileged(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_unprivileged([*command, "--help"]),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"},
        cwd="/",
    )


@pytest.fixture(scope="module")
def unprivileged_console_script() -> Iterator[tuple[list[str], dict[str, str]]]:
    """How the unprivileged user runs ``langgraph-verified``: ``(command, environment)``.

    The installed console script where that user can run it, else a copy
    (``copy_for_unprivileged``) in a directory it can reach.
    """
    if runs_unprivileged([str(CONSOLE_SCRIPT)], {}).returncode == 0:
        yield [str(CONSOLE_SCRIPT)], {}
        return
    root = reachable_dir("lgv-unprivileged-")
    try:
        command, env = copy_for_unprivileged(root)
        probe = runs_unprivileged(command, env)
        assert probe.returncode == 0, f"the unprivileged user cannot run a copy either:\n{probe}"
        yield command, env
    finally:
        shutil.rmtree(root)


def run_console_script(
    store: Path,
    how: str,
    *argv: str,
    unprivileged: tuple[list[str], dict[str, str]] = ([], {}),
) -> subprocess.CompletedProcess[str]:
    """The installed ``langgraph-verified``, run on a store it cannot write."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [str(CONSOLE_SCRIPT), *argv]
    if how == "unprivileged user":
        script, extra_env = unprivileged
        command = as_unprivileged([*script, *argv])
        env.update(extra_env)
    elif how != "chmod":  # an errno name: the same fault injection as in-process
        command = [sys.executable, str(TESTS / "readonly_child.py"), str(store), how, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd="/")


def read_only_ways() -> list[str]:
    if not IS_ROOT:
        return ["chmod", "EROFS", "unprivileged user"]
    return ["EROFS", "EACCES", "unprivileged user"]


@pytest.mark.parametrize("how", read_only_ways())
def test_the_console_script_on_a_read_only_store(
    shared_dir: Path, how: str, request: pytest.FixtureRequest
) -> None:
    unprivileged: tuple[list[str], dict[str, str]] = ([], {})
    if how == "unprivileged user":
        if not IS_ROOT:
            pytest.skip("not root: the chmod run is this user's own, and it cannot become another")
        if shutil.which("setpriv") is None:
            pytest.skip("no setpriv (util-linux) to run the console script as another user")
        unprivileged = request.getfixturevalue("unprivileged_console_script")
    store = shared_dir / "store"
    history = make_store(store)
    damaged = damage_newest(store, history)
    if how == "unprivileged user":
        uid, gid = unprivileged_ids()
        for path in [store, *store.rglob("*")]:
            os.chown(path, uid, gid)
    if how in ("chmod", "unprivileged user"):
        set_writable(store, False)
    files = snapshot(store)

    verify = run_console_script(store, how, "verify", str(store), unprivileged=unprivileged)
    assert (verify.returncode, verify.stderr) == (1, "")
    assert f"  checkpoint  {damaged}" in verify.stdout.splitlines()
    assert "is read-only for this process" in verify.stdout

    repair = run_console_script(store, how, "repair", str(store), unprivileged=unprivileged)
    assert repair.returncode == 2
    assert repair.stdout == ""
    assert repair.stderr.count("\n") == 1
    assert "Traceback" not in repair.stderr and "Errno" not in repair.stderr
    assert repair.stderr.startswith(
        f"langgraph-verified: error: cannot repair {store}: it is read-only"
    )
    assert snapshot(store) == files
