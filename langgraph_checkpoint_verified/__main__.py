"""``python -m langgraph_checkpoint_verified``: the same command line as ``langgraph-verified``."""

from langgraph_checkpoint_verified.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
