"""Talk to the example server: submit an expense, see it wait for approval, approve it.

With ``langgraph dev`` running in this directory (see README.md)::

    python client.py submit            # starts a run; prints the thread id and the question
    python client.py show THREAD_ID    # the thread's state and history, read from the store
    python client.py approve THREAD_ID # resumes the run with Command(resume=True)

Stop the server in between (even with ``kill -9``) and start it again: ``show``
and ``approve`` carry on from the checkpoint in ``checkpoints/``.

``langgraph dev`` writes its own list of threads to ``.langgraph_api/`` only
every ten seconds, so a server killed right after ``submit`` may have
forgotten the thread (404) although its checkpoints are in the store:
``show`` and ``approve`` register it again first, which is a no-op for a
thread the server knows.
"""

from __future__ import annotations

import argparse
import os

from langgraph_sdk import get_sync_client
from langgraph_sdk.schema import Command

URL = os.environ.get("LANGGRAPH_URL", "http://127.0.0.1:2024")
GRAPH = "expenses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["submit", "show", "approve", "reject"])
    parser.add_argument("thread_id", nargs="?")
    args = parser.parse_args()
    client = get_sync_client(url=URL)

    if args.command == "submit":
        thread_id = client.threads.create()["thread_id"]
        result = client.runs.wait(thread_id, GRAPH, input={"item": "a laptop", "amount": 1500})
        print("thread:", thread_id)
        for pending in result.get("__interrupt__", []):
            print("waiting for:", pending["value"]["question"])
        return

    if args.thread_id is None:
        parser.error(f"{args.command} needs a THREAD_ID")
    # The state comes from the store; the server only needs to know the thread and its graph.
    client.threads.create(
        thread_id=args.thread_id, metadata={"graph_id": GRAPH}, if_exists="do_nothing"
    )
    if args.command == "show":
        state = client.threads.get_state(args.thread_id)
        print("values:", state["values"])
        print("next:", state["next"])
        for entry in client.threads.get_history(args.thread_id, limit=100):
            step = entry["metadata"]["step"]
            print(f"  step {step:>2}  {entry['checkpoint']['checkpoint_id']}  next={entry['next']}")
        return

    answer = args.command == "approve"
    result = client.runs.wait(args.thread_id, GRAPH, command=Command(resume=answer))
    print("values:", result)


if __name__ == "__main__":
    main()
