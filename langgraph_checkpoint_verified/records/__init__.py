"""Records: pure, no I/O. What a record is, byte by byte, and what each kind holds.

- ``keys``: thread ids and namespaces made safe as key segments; where each record lives.
- ``format``: the frame around every record (identity, checksums or MACs, zstd).
- ``kinds``: what a checkpoint record and a writes record hold, encoded and decoded.
- ``values``: channel values stored once and lists stored as the items they gained.

Nothing here reads a file or knows a backend: any bytes can be thrown at the
decoders, and damage comes back as one ``RecordDamagedError``.
"""
