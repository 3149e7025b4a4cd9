"""One ``FileStorage`` in its own process, driven by ``test_log_storage.py`` over pipes.

Usage: ``python log_child.py STORE``

Reads one command a line from stdin and answers one line on stdout (values in hex):

* ``write KEY HEX`` -> ``ok``; ``read KEY`` -> ``HEX`` or ``none``; ``delete KEY`` -> ``ok``
* ``compact PREFIX`` -> ``ok``; ``walk PREFIX`` -> the keys, space-separated
* ``append PREFIX N`` -> ``started``, then ``acked KEY`` after each of N writes of
  ``PREFIX/<pid>-<i>`` returns (its value is the key's bytes), then ``done``

The storage is kept for the life of the process, so its key directory is brought up
to date by what it reads of the log, never rebuilt from scratch.
"""

from __future__ import annotations

import os
import sys

from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage


def main() -> None:
    storage = FileStorage(sys.argv[1])

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        command, *args = line.split()
        if command == "write":
            storage.write(args[0], bytes.fromhex(args[1]))
            say("ok")
        elif command == "read":
            data = storage.read(args[0])
            say("none" if data is None else data.hex() or "-")
        elif command == "delete":
            storage.delete(args[0])
            say("ok")
        elif command == "compact":
            storage.compact(args[0])
            say("ok")
        elif command == "walk":
            say(" ".join(storage.walk(args[0])))
        elif command == "append":
            say("started")
            for i in range(int(args[1])):
                key = f"{args[0]}/{os.getpid()}-{i}"
                storage.write(key, key.encode())
                say(f"acked {key}")
            say("done")
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
