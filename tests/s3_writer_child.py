"""One of several processes writing to the same S3 store at once (``test_s3.py``).

Usage: ``python s3_writer_child.py ENDPOINT BUCKET THREAD WRITER STEPS``

Each step reads the thread's newest checkpoint, puts a child of it whose
``log`` list is the parent's plus one item naming this writer and step, and
saves a pending write for it. After each acknowledged step it prints one line,
``<checkpoint id> <json of the log it wrote>``, and flushes: the parent test
knows exactly what was acknowledged.
"""

from __future__ import annotations

import json
import sys

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from s3server import ACCESS_KEY_ID, REGION, REQUEST_TIMEOUT, SECRET_ACCESS_KEY

from langgraph_checkpoint_verified import ObjectStorage, VerifiedSaver


def main(endpoint: str, bucket: str, thread_id: str, writer: str, steps: int) -> None:
    storage = ObjectStorage(
        f"s3://{bucket}/fleet",
        endpoint=endpoint,
        region=REGION,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        client_options={"timeout": REQUEST_TIMEOUT},
    )
    saver = VerifiedSaver(storage=storage)
    for step in range(steps):
        newest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        if newest is None:
            config: dict = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            log: list[str] = []
            version = 0
        else:
            config = newest.config
            log = list(newest.checkpoint["channel_values"]["log"])
            version = int(newest.checkpoint["channel_versions"]["log"])
        log.append(f"{writer}:{step}")
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"log": log, "writer": writer}
        checkpoint["channel_versions"] = {"log": version + 1, "writer": 1}
        saved = saver.put(
            config, checkpoint, {"step": step, "writer": writer}, {"log": version + 1}
        )
        saver.put_writes(saved, [("log", f"pending {writer}:{step}")], f"task-{writer}")
        print(saved["configurable"]["checkpoint_id"], json.dumps(log), flush=True)


if __name__ == "__main__":
    endpoint, bucket, thread_id, writer, steps = sys.argv[1:]
    main(endpoint, bucket, thread_id, writer, int(steps))
