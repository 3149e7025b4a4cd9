"""``memories``: the long-term memory a ``VerifiedStore`` keeps, as people read it.

A typer command, registered by ``app``. ``memories STORE`` lists the namespaces
that hold items, with how many each holds; ``memories STORE NAMESPACE...`` lists
the items under a namespace prefix (key, value clipped, updated_at), newest first,
as ``VerifiedStore.search`` returns them. ``--filter`` is a JSON object handed to
``search``'s ``filter``; ``--query`` ranks by similarity, which needs an embedding
function (``--embed``): the index of a store is configured in code, not kept in
its records.

It only looks: the store is opened with ``quarantine=False`` (damage is reported,
never moved) and every read passes ``refresh_ttl=False`` (no touch record is
written). A damaged item is not shown; it is named in one warning line on stderr
(and under ``damaged`` with ``--json``), and the exit code stays 0, as ``inspect``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    clip,
    escape,
    out,
    print_json,
    table,
)
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import (
    CommandError,
    is_object_store,
    object_storage,
    read_key,
    run_guarded,
)

if TYPE_CHECKING:
    from langgraph.store.base import SearchItem

    from langgraph_checkpoint_verified.engine import Damage
    from langgraph_checkpoint_verified.store import VerifiedStore

EVERYTHING = sys.maxsize
"""The ``limit`` of a search that must return every item (counting namespaces)."""


def namespace_of(labels: list[str]) -> tuple[str, ...]:
    """The namespace the NAMESPACE arguments name: one label each, or one dotted argument.

    A label cannot hold a ``.`` (``VerifiedStore`` refuses it), so a single
    argument with dots is split there: ``users.ada`` is ``("users", "ada")``. A
    ``/`` may be part of a label, so it is never a separator.

    Args:
        labels: The NAMESPACE arguments.

    Returns:
        The namespace prefix.

    Raises:
        CommandError: A label is empty, or a dot is mixed with several arguments.

    Example:
        >>> namespace_of(["users", "ada"]) == namespace_of(["users.ada"]) == ("users", "ada")
        True
    """
    if len(labels) == 1 and "." in labels[0]:
        labels = labels[0].split(".")
    elif any("." in label for label in labels):
        raise CommandError(
            "a namespace label cannot hold a '.': give the labels as separate arguments "
            "(users ada) or as one dotted argument (users.ada)"
        )
    if any(not label for label in labels):
        raise CommandError("a namespace label cannot be empty")
    return tuple(labels)


def parse_filter(text: str | None) -> dict[str, Any] | None:
    """The ``--filter`` value: a JSON object, as ``search(filter=...)`` takes it.

    Args:
        text: The option's value, or ``None``.

    Returns:
        The filter, or ``None``.

    Raises:
        CommandError: Not JSON, or not an object.

    Example:
        >>> parse_filter('{"price": {"$gte": 4}}')
        {'price': {'$gte': 4}}
    """
    if text is None:
        return None
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"--filter is not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(found, dict):
        raise CommandError(
            f'--filter must be a JSON object such as {{"kind": "drink"}}, '
            f"not {type(found).__name__}"
        )
    return found


def embedding(spec: str) -> Any:
    """What ``--embed`` names: ``package.module:function``, else a LangChain model id.

    Args:
        spec: ``my_app.embeddings:embed`` (a function from texts to vectors, imported)
            or ``provider:model`` such as ``openai:text-embedding-3-small`` (LangChain's
            ``init_embeddings``, when ``provider`` is not a module that can be imported).

    Returns:
        The function, or ``spec`` itself for ``VerifiedStore`` to resolve.

    Raises:
        CommandError: The module imports but has no such attribute.
    """
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        return spec
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return spec  # not a module: a provider name for init_embeddings
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise CommandError(f"--embed {spec}: {module_name} has no {attribute!r}") from None


def open_memories(
    store: str, key_file: str | None, *, embed: str | None, on_corruption: Any
) -> VerifiedStore:
    """An existing store's memory, opened to look: damage is reported, never moved.

    Args:
        store: The STORE argument.
        key_file: The --key-file argument, or ``None``.
        embed: The --embed argument, or ``None`` (no index).
        on_corruption: Called with each ``Damage`` found.

    Returns:
        The ``VerifiedStore``, with ``quarantine=False``.

    Raises:
        CommandError: No store is there, or it needs a key that was not given.
    """
    from langgraph_checkpoint_verified.engine.marker import STORE_MARKER_KEY
    from langgraph_checkpoint_verified.errors import StoreKeyError
    from langgraph_checkpoint_verified.records.keys import MEMORIES_PREFIX, STORE_PREFIX
    from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX
    from langgraph_checkpoint_verified.store import VerifiedStore

    known = {MEMORIES_PREFIX, STORE_PREFIX, "threads", "cache", QUARANTINE_PREFIX, STORE_MARKER_KEY}
    if is_object_store(store):
        where: Any = object_storage(store)
        # one LIST first: a mistyped bucket or prefix is an error, not an empty store
        names = set(where.list(""))
        if not names:
            raise CommandError(f"no store at {store}: nothing is stored under that prefix")
    else:
        where = Path(store)
        if not where.exists():
            raise CommandError(f"no store at {store}: the directory does not exist")
        if not where.is_dir():
            raise CommandError(f"{store} is not a store: a store is a directory")
        names = {child.name for child in where.iterdir()}
    if not names & known:
        raise CommandError(
            f"{store} is not a store: it has neither {MEMORIES_PREFIX}/ nor threads/"
        )
    index = {"dims": 0, "embed": embedding(embed)} if embed is not None else None
    try:
        return VerifiedStore(
            **({"storage": where} if is_object_store(store) else {"path": where}),
            key=read_key(key_file),
            index=index,  # type: ignore[arg-type]
            quarantine=False,
            on_corruption=on_corruption,
        )
    except StoreKeyError as exc:
        if exc.store_is_keyed and key_file is None:
            raise CommandError(
                f"{store} was written with a secret key; pass --key-file FILE "
                f"(nothing was read or moved)"
            ) from None
        raise


def memories(
    store: Store,
    namespace: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[NAMESPACE]...",
            help="a namespace prefix: labels as arguments (users ada) or dotted (users.ada); "
            "without it, the namespaces are listed",
        ),
    ] = None,
    filter_: Annotated[
        str | None,
        typer.Option(
            "--filter",
            metavar="JSON",
            help='only items whose value matches this JSON object, e.g. {"kind": "drink"}',
        ),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query", metavar="TEXT", help="rank items by similarity to TEXT (needs --embed)"
        ),
    ] = None,
    embed: Annotated[
        str | None,
        typer.Option(
            "--embed",
            metavar="SPEC",
            help="the store's embedding: package.module:function, or a LangChain model "
            "id such as openai:text-embedding-3-small",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", metavar="N", min=1, help="show at most N items")
    ] = 20,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """The store's memory (VerifiedStore): its namespaces, or the items under one."""

    def body() -> int:
        prefix = namespace_of(namespace or [])
        wanted = parse_filter(filter_)
        if query is not None and embed is None:
            raise CommandError(
                "--query needs the store's index: pass --embed SPEC, the embedding the "
                "items were indexed with (the index is set in code, not kept in the store)"
            )
        damaged: list[Damage] = []
        memory = open_memories(store, key_file, embed=embed, on_corruption=damaged.append)
        location = memory.storage.location("")
        listing_items = bool(prefix) or wanted is not None or query is not None
        if listing_items:
            # one more than shown: says whether --limit cut the list
            found = memory.search(
                prefix, query=query, filter=wanted, limit=limit + 1, refresh_ttl=False
            )
            shown, more = found[:limit], len(found) > limit
            if as_json:
                print_json(
                    {
                        "store": location,
                        "namespace": list(prefix),
                        "items": [item_summary(item) for item in shown],
                        "more": more,
                        "damaged": [d.key for d in damaged],
                    }
                )
            else:
                print_items(location, prefix, shown, more=more, scored=query is not None)
        else:
            counts = namespace_counts(memory)
            if as_json:
                print_json(
                    {
                        "store": location,
                        "namespaces": [
                            {"namespace": list(ns), "items": n} for ns, n in counts.items()
                        ],
                        "damaged": [d.key for d in damaged],
                    }
                )
            else:
                print_namespaces(location, counts)
        warn_damage(store, damaged)
        return EXIT_OK

    return run_guarded(body, store=store)


def namespace_counts(memory: VerifiedStore) -> dict[tuple[str, ...], int]:
    """Each namespace that holds items, with how many, sorted.

    One search of the whole store, counted by namespace: the namespaces it finds
    are exactly those ``list_namespaces`` returns (both read every item), and
    calling both would read and verify every item twice.

    Args:
        memory: The opened store.

    Returns:
        Items per namespace.
    """
    counts: dict[tuple[str, ...], int] = {}
    for item in memory.search((), limit=EVERYTHING, refresh_ttl=False):
        counts[tuple(item.namespace)] = counts.get(tuple(item.namespace), 0) + 1
    return dict(sorted(counts.items()))


def item_summary(item: SearchItem) -> dict[str, Any]:
    """An item as ``--json`` prints it.

    Args:
        item: What ``search`` returned.

    Returns:
        ``namespace``, ``key``, ``value``, ``created_at``, ``updated_at`` and ``score``.
    """
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
        "score": item.score,
    }


def print_namespaces(location: str, counts: dict[tuple[str, ...], int]) -> None:
    """Print the namespaces and their item counts as a table.

    Args:
        location: Where the store is, for the title.
        counts: What ``namespace_counts`` returned.
    """
    console = out()
    if not counts:
        console.print(f"no memory items in {escape(location)}")
        return
    shown = table("NAMESPACE", "ITEMS", title=f"memory of {escape(location)}")
    for ns, n in counts.items():
        shown.add_row(escape(".".join(ns)), str(n))
    console.print(shown)


def print_items(
    location: str,
    prefix: tuple[str, ...],
    items: list[SearchItem],
    *,
    more: bool,
    scored: bool,
) -> None:
    """Print items as a table: namespace, key, value clipped, updated_at (and score).

    Args:
        location: Where the store is, for the title.
        prefix: The namespace prefix searched.
        items: What ``search`` returned.
        more: Whether ``--limit`` left items out.
        scored: Whether to show each item's score.
    """
    console = out()
    where = ".".join(prefix) or "(every namespace)"
    if not items:
        console.print(f"no items under {escape(where)} in {escape(location)}")
        return
    headers = ("NAMESPACE", "KEY", "VALUE", "UPDATED_AT", *(("SCORE",) if scored else ()))
    shown = table(*headers, title=f"{escape(where)} in {escape(location)}")
    for item in items:
        score = ("-" if item.score is None else f"{item.score:.3f}",) if scored else ()
        shown.add_row(
            escape(".".join(item.namespace)),
            escape(item.key),
            escape(clip(json.dumps(item.value, ensure_ascii=False, default=repr))),
            item.updated_at.isoformat(timespec="seconds"),
            *score,
        )
    console.print(shown)
    if more:
        console.print(f"more items than {len(items)}: raise --limit to see them")


def warn_damage(store: str, damaged: list[Damage]) -> None:
    """One warning line on stderr naming the damaged records met, if any.

    Args:
        store: The STORE argument.
        damaged: The damage reported while reading.
    """
    keys = sorted({d.key for d in damaged})
    if keys:
        named = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        print(
            f"warning: {len(keys)} damaged record(s) in {store} not shown ({named}); "
            f"a store opened to write (VerifiedStore({store!r})) moves them to quarantine/",
            file=sys.stderr,
        )
