"""This directory is an app the LangGraph server loads, not tests: collect nothing."""

collect_ignore_glob = ["*.py"]
