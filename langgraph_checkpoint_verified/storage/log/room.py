"""The room at a log's end: zeros written ahead of the entries, for appends to overwrite.

A durable append that makes the file longer costs its ``fdatasync`` a journal
commit for the new size and the new blocks; one that overwrites bytes the file
already holds, synced before, costs the data alone (on ext4, about half:
``benchmarks/sync_probe.py``). SQLite's WAL gets the same by overwriting itself
once checkpointed, RocksDB by recycling its WAL files. So an append that would
grow a log also writes zeros after its entries, the *room*, synced with them;
the appends after it overwrite the room until it is used up.

What this changes for a reader is where the log ends: at the first entry header
that is all zeros, no longer at the file's size. Entries never start with zeros
(each starts with its magic), so zeros after the last entry are room, unless the
parity says bytes were written there (``ParityFile.covers_beyond``: a record
covers bytes only once they were synced), in which case the zeros are lost
blocks, rebuilt from the parity where they can be. An entry torn by a power cut
in the middle of overwriting the room reads as complete by its header (the
zeros complete it) but fails its checksum, with nothing but zeros after it: the
parity not covering it tells it from a written entry damaged since, and it is a
torn tail, cut by the next append like any other. When the parity cannot say
(it is not synced, and a power cut may take it too), a checksum not written
whole does (still zeros, or the right checksum's first bytes and zeros after
them): the one write of an entry ends with its checksum, so that write never
finished.

Entries that would leave less room than an entry header outgrow the file as well:
a writer that knows the log up to the room learns that nobody appended from the
whole entry header of zeros it reads there (``LogReader.nothing_appended``), and a
shorter room could not tell it, so every call would look the log up again.

The room is at least ``MIN_ROOM`` and an eighth of the log, at most ``MAX_ROOM``
(give or take the 4 KB boundary the file ends on): a thread costs about 20 KB more
on disk, a long log an eighth more. A log written by a release before the room, or
compacted, has none until its next append.

The zeros are written, not allocated: space ``posix_fallocate`` reserves reads as
zeros too, and the append that makes the room is then cheaper (no room's worth of
bytes to flush), but every later append that first writes into one of its blocks
costs its sync a note that the block now holds data, which is what the room is
there to spare: on ext4, appends of 1.2 KB into allocated space synced in about
what growing the file costs, into written zeros in two thirds of it
(``benchmarks/sync_probe.py``).
"""

from __future__ import annotations

MIN_ROOM = 16 * 1024
MAX_ROOM = 1024 * 1024
ALIGNMENT = 4096


def room_after(end: int) -> int:
    """How many zeros to write after entries ending at ``end``, when they outgrow the file.

    Example:
        >>> room_after(100), room_after(80_000), (10**9 + room_after(10**9)) % ALIGNMENT
        (20380, 18304, 0)
        >>> MAX_ROOM <= room_after(10**9) < MAX_ROOM + ALIGNMENT
        True
    """
    room = min(max(end // 8, MIN_ROOM), MAX_ROOM)
    size = -(-(end + room) // ALIGNMENT) * ALIGNMENT
    return size - end


def all_zeros(data: bytes, start: int = 0) -> bool:
    """Whether ``data[start:]`` is zeros (or nothing): room, not entries.

    Example:
        >>> all_zeros(b"LGCE" + bytes(8), 4), all_zeros(b"LGCE" + bytes(8), 3), all_zeros(b"", 0)
        (True, False, True)
        >>> all_zeros(bytes(200_000), 5), all_zeros(bytes(140_000) + b"x" + bytes(9), 1)
        (True, False)
    """
    # compared with zeros a chunk at a time (memcmp): ten times what counting zero bytes
    # costs, on a room of a megabyte
    for at in range(start, len(data), len(_ZEROS)):
        chunk = data[at : at + len(_ZEROS)]
        if chunk != _ZEROS[: len(chunk)]:
            return False
    return True


def zeros_start(data: bytes) -> int:
    """Where the zeros that end ``data`` start (``len(data)`` if its last byte is not one):
    after the entries, room or lost blocks, where no entry can start.

    Example:
        >>> zeros_start(b"LGCE" + bytes(200_000)), zeros_start(b"LGCE"), zeros_start(bytes(9))
        (4, 4, 0)
        >>> zeros_start(bytes(70_000) + b"x" + bytes(140_000))
        70001
    """
    # chunks compared with zeros from the end (memcmp), then 4 KB at a time in the last
    # chunk that is not all zeros, and only those 4 KB stripped byte by byte
    end = len(data)
    for step in (len(_ZEROS), ALIGNMENT):
        while end > 0:
            start = max(0, end - step)
            if data[start:end] != _ZEROS[: end - start]:
                break
            end = start
        else:
            return 0
    start = max(0, end - ALIGNMENT)
    return start + len(data[start:end].rstrip(b"\0"))


_ZEROS = bytes(64 * 1024)
