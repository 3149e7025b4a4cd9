"""The file store: one append-only log per thread.

Like LevelDB's log, its parts are apart: ``entries`` is the on-disk format of
entries and hints (pure), ``room`` the zeros kept ahead of the entries for appends
to overwrite, ``tail`` the reading of a log past what is known of it (entries,
room, torn tail, damage), ``parity`` and ``redundancy`` the sidecar that rebuilds a
damaged block, ``key_directory`` the in-memory index of a log (and the hint it may
be opened from), ``thread_log`` what a process keeps of one log, ``commits`` group commit,
``reading`` the ``LogReader`` that keeps a key directory up to date and reads
entries back, ``appending`` the ``LogAppender`` that appends and syncs, and
``file_storage`` the ``FileStorage`` that routes keys to logs, compacts and scrubs.
"""
