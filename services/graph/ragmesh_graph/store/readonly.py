"""What makes a raw Cypher query read-only, decided by the engine and its own plan, not by reading the text.

A raw query runs on a `ladybug.Database(path, read_only=True)`: the engine itself refuses every write (CREATE,
MERGE, SET, DELETE, DROP, ALTER, COPY FROM, ATTACH...: "Cannot execute write operations in a read-only
database"). It does not refuse what writes or reads files or changes settings without touching the graph
(`COPY (...) TO`, `LOAD FROM`, `CALL threads=1`, `CHECKPOINT`, `INSTALL`, `EXPORT DATABASE`), so before running
a statement the store asks the engine for its physical plan (`EXPLAIN`) and refuses the plan's operators that do
(`refusal`): table functions other than the catalog's and the engine's own row scans, COPY_TO, STANDALONE_CALL,
TRANSACTION, extension, attach and export operators. One thing happens before any plan: planning EXPORT DATABASE
creates its directory (LadybugDB 0.22), so a statement whose first keyword is EXPORT or IMPORT is refused first
(`first_keyword`, a tokenizer that skips comments, not a pattern over the text).
"""

from __future__ import annotations

import re

# Table functions a read-only query may call: the engine's scan of rows it built itself (RETURN 1, UNWIND,
# recursive walks) and the catalog's views. The others read files (READ_CSV_PARALLEL, READ_PARQUET, READ_JSON...),
# or the storage's internals.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"READ_FTABLE", "SHOW_TABLES", "TABLE_INFO", "SHOW_CONNECTION", "SHOW_FUNCTIONS", "SHOW_INDEXES"}
)
# First words of physical operators that write, touch files or change the session: an operator whose name starts
# with one is refused (COPY_TO, EXPORT_DATABASE, INSTALL_EXTENSION, ATTACH_DATABASE, USE_DATABASE,
# STANDALONE_CALL, TRANSACTION, CREATE_TABLE, ...; not ORDER_BY_MERGE). The read-only database refuses the writes
# among them as well.
DENIED_OPERATOR_WORDS = frozenset(
    {
        "ALTER",
        "ATTACH",
        "BATCH",
        "CHECKPOINT",
        "COPY",
        "CREATE",
        "DELETE",
        "DETACH",
        "DROP",
        "EXPORT",
        "EXTENSION",
        "IMPORT",
        "INSERT",
        "INSTALL",
        "LOAD",
        "MACRO",
        "MERGE",
        "PARTITIONER",
        "SEQUENCE",
        "SET",
        "STANDALONE",
        "TRANSACTION",
        "UNINSTALL",
        "USE",
    }
)
# Statements refused by their first keyword, before the engine plans them (see the module docstring).
DENIED_FIRST_KEYWORDS = frozenset({"EXPORT", "IMPORT"})

# A box title of EXPLAIN's plan ("COPY_TO[2]") and the function line of a TABLE_FUNCTION_CALL box.
_OPERATOR = re.compile(r"\b([A-Z][A-Z0-9_]*)\[\d+\]")
_FUNCTION = re.compile(r"\bFunction: ([A-Za-z0-9_]+)")
# What the engine answers a write on a read-only database, and a second statement.
READ_ONLY_REFUSAL = "read-only database"
MULTIPLE_STATEMENTS = "multiple statements"


def refusal(plan: str) -> str | None:
    """Why the physical plan `plan` (EXPLAIN's text) is not read-only, or None when it is."""
    for operator in _OPERATOR.findall(plan):
        if operator.split("_", 1)[0] in DENIED_OPERATOR_WORDS:
            return f"the query's plan has a {operator} operator"
    for function in _FUNCTION.findall(plan):
        if function.upper() not in ALLOWED_TABLE_FUNCTIONS:
            return f"the query calls {function}, which is not a catalog function"
    return None


def first_keyword(statement: str) -> str:
    """The statement's first word, upper-cased, after whitespace and comments (// ... and /* ... */)."""
    i, n = 0, len(statement)
    while i < n:
        if statement[i].isspace():
            i += 1
        elif statement.startswith("//", i):
            end = statement.find("\n", i)
            i = n if end < 0 else end + 1
        elif statement.startswith("/*", i):
            end = statement.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    j = i
    while j < n and (statement[j].isalnum() or statement[j] == "_"):
        j += 1
    return statement[i:j].upper()
