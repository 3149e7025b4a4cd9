"""The file store: one append-only log per thread.

Like LevelDB's log, its parts are apart: ``entries`` is the on-disk format of
entries and hints (pure), ``key_directory`` the in-memory index of a log (and
the hint it may be opened from), ``file_storage`` the ``FileStorage`` that
appends, reads, syncs and compacts.
"""
