"""The internal workload table: one row per request, one numpy array per column.

Every trace reader produces a ``WorkloadTable``; time transforms (window, scaling, stress)
produce another one by gathering rows once; replay walks an index over it, so nothing is
copied per request.  Columns:

- ``arrival_s`` (float64): seconds from the first request of the trace (the trace's own
  clock); NaN where the trace has no times (ShareGPT) and turns after the first of a session
  (they are sent when the previous turn finished plus ``think_s``).
- ``input_tokens``, ``output_tokens`` (int64): lengths as the trace gives them; -1 where
  the trace gives text instead (then ``text`` holds it).
- ``session`` (int64, -1: none), ``turn`` (int32), ``think_s`` (float64, NaN: none).
- ``hash_offsets``/``hash_values``: Mooncake's block hash ids as a CSR list (row i owns
  ``hash_values[hash_offsets[i]:hash_offsets[i+1]]``), each id a block of ``block_tokens``.
- ``prefix_group`` (int64, -1: none) and ``prefix_tokens`` (int64): a shared-prefix group
  and how many leading tokens the group shares (synthetic groups, our JSON-lines format).
- ``text`` (list of str or None): the user's message where the trace has text.
- ``line`` (int64): the line of the source file each row came from (for error messages).
- tasks (DAGs of calls, ``loadgen.workloads.tasks``): ``task`` (int64 code, -1: none; names
  in ``task_names``), ``node`` (str: the call's name, unique in its task), ``parents``
  (tuple of node names of the same task the call waits for; () for a root), ``tool_s``
  (float64: seconds the call waits after its last parent ended, NaN: workload.task's
  default), ``prefix`` (str: a path ``a/b`` in ``prefix_tree``, "": none).  A task call's
  ``input_tokens`` counts its own message only: the prompt also carries its prefix path and
  the messages and replies of the calls before it.  ``prefix_tree`` maps each path of the
  declared tree to its own segment's tokens (``{"sys": 1000, "sys/docA": 4000}``); the
  prompt of a call under ``sys/docA`` starts with sys's 1000 tokens, then docA's 4000.
  ``task_input="total"`` (a reader whose trace gives each call's whole prompt length): the
  call's own message fills what its prefix and context leave of ``input_tokens``, as a
  session turn's does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


def path_segments(path: str) -> list[str]:
    """``"a/b/c"`` -> ``["a", "a/b", "a/b/c"]``: the prefix tree nodes a path goes through."""
    parts = path.split("/")
    return ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]


@dataclass
class WorkloadTable:
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str = ""                       # reader name
    path: str = ""                         # file read ("" for synthetic)
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    think_s: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_values: np.ndarray | None = None
    block_tokens: int = 512
    prefix_group: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    text: list | None = None
    output_text: list | None = None        # the trace's own responses (ShareGPT), for characterisation
    line: np.ndarray | None = None
    session_names: list | None = None      # session code -> the trace's own session id
    bad_lines: int = 0                     # lines skipped under workload.on_bad_line=skip
    task: np.ndarray | None = None
    task_names: list | None = None         # task code -> the trace's own task id
    node: np.ndarray | None = None         # object array of str
    parents: np.ndarray | None = None      # object array of tuples of str
    tool_s: np.ndarray | None = None
    prefix: np.ndarray | None = None       # object array of str
    prefix_tree: dict | None = None        # path -> its own segment's tokens
    task_input: str = "message"            # what a task call's input_tokens counts: message | total
    notes: list = field(default_factory=list)

    _ROW_COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "session", "turn", "think_s",
                    "prefix_group", "prefix_tokens", "line", "task", "node", "parents", "tool_s", "prefix")

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def has_sessions(self) -> bool:
        return self.session is not None and bool((self.session >= 0).any())

    @property
    def has_tasks(self) -> bool:
        return self.task is not None and bool((self.task >= 0).any())

    @property
    def has_hashes(self) -> bool:
        return self.hash_offsets is not None

    def hashes(self, i: int) -> np.ndarray:
        return self.hash_values[self.hash_offsets[i]:self.hash_offsets[i + 1]]

    def where_text(self, i: int) -> str:
        """Where row ``i`` came from, for messages."""
        if self.line is not None and self.path:
            return f"{self.path}:{int(self.line[i])}"
        return f"request {i}"

    def take(self, idx: np.ndarray) -> WorkloadTable:
        """The rows ``idx`` (in that order) as a new table: one gather per column."""
        idx = np.asarray(idx, dtype=np.int64)
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in self._ROW_COLUMNS and v is not None:
                kw[f.name] = v[idx]
            elif f.name in ("text", "output_text") and v is not None:
                kw[f.name] = [v[i] for i in idx.tolist()]
            elif f.name in ("hash_offsets", "hash_values"):
                continue
            else:
                kw[f.name] = v
        if self.hash_offsets is not None:
            lens = np.diff(self.hash_offsets)[idx]
            offs = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            starts = self.hash_offsets[:-1][idx]
            # values of each chosen row, concatenated: start + position within the row
            pos = np.arange(int(offs[-1]), dtype=np.int64) - np.repeat(offs[:-1], lens)
            kw["hash_offsets"] = offs
            kw["hash_values"] = self.hash_values[np.repeat(starts, lens) + pos]
        kw["notes"] = list(self.notes)
        return WorkloadTable(**kw)
