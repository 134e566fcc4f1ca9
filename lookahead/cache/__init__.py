"""The raw JSONL store: the cache and the source of truth for every LLM answer.

Why this shape: queries cost money and hours, and a job can die at any moment (kill -9,
OOM, a full disk). So every answer is appended as one JSON line, flushed and fsynced
before the next one is asked for; a rerun reads the finished keys and asks only for the
rest. The only damage a crash can do to an append-only file is a torn last line, which
is detected on open, moved aside to ``<file>.torn-<time>`` and cut off. A cached line is
reused only under the identical key, and the key covers the task, model, row (or
entity + target date), exact prompt and parameters, so changing any of them re-queries.

Sharded caches (the Ray runner, docs/scaling.md): every writer appends to its own file,
so no two processes ever append to one file. A task's cache is every ``<task>.jsonl``
under ``raw_dir`` (``files.SHARD_PATTERN``, the glob dbt's raw source reads too): the
single-process file ``<raw_dir>/<task>.jsonl`` and the workers' shards
``<raw_dir>/shards/<host>-<slot>/<task>.jsonl``. Readers take the union; a key written
twice (never by this project's writers, but a hand-copied shard could) counts once, the
line with the earliest ``finished_at`` winning (then the path, then the line), the same
rule in Python (``lookup.load_cache``) and in the staging models. A store sees its
siblings' answers as they are written (``store.RawStore.refresh``), so a worker never
asks for a key another worker, or a killed one, already wrote.

Studies sharing one raw_dir (docs/scaling.md): a job of another study appends to its
own shard ``shards/study-<name>-<hash>/`` while one holds ``<raw_dir>/<task>.jsonl``, and
every writer says which keys it is about to ask in ``<its file>.plan``
(``store.RawStore.claim``), so a later job waits for those answers instead of asking them
too (``store.RawStore.earlier_plans``, llm_jobs.sharing).

Derived files (summaries, parquet) are written to a temporary path and renamed, so a
reader never sees half a file.

One module a concern, each importing only those above it in this list:

- ``atomic``: a whole file written to a temporary path and renamed over its target;
- ``locks``: a cache file's exclusive lock (the writer's pid and label in it) and the
  ``.plan`` a writer says its keys in;
- ``index``: the key index, a million keys held as sorted digests (``KeyIndex``,
  ``KeyPositions``);
- ``files``: where a task's files are (its shards, its failure lines), their line
  format read back, and the repair of a torn last line;
- ``lookup``: which line answers a key over every shard (``load_cache``, ``load_fields``);
- ``store``: ``RawStore``, the one writer of a cache file.

What is not here: the key and its hash (lookahead.keys, the one home of the key rule),
and what makes a line a complete answer to its task (lookahead.tasks, beside the task
registry). Import each name from its module; this package's own namespace is empty.
"""
