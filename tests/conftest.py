"""Scripts that tests start as child processes are not test modules: never import them."""

collect_ignore_glob = ["*_child.py"]
