"""What a statement's SETTINGS may name (`reach.check`).

An allow-list per place: a read's SETTINGS only shape its output and plan
(`OUTPUT_SETTINGS` by name, the rest by pattern), an INSERT's also how it
reads its data, a definition's also the table's own settings and those
that change which definitions the engine accepts. Refused everywhere: a
setting that names a file, a URL or a secret (found by attack:
`output_format_schema` wrote any host file); in a definition, the bounds
a statement must not raise and what makes an INSERT wait.
"""

from __future__ import annotations

import re

from durable_obj.gate.control import DDL_SETTING
from durable_obj.gate.isolation import refuse
from durable_obj.gate.outputs import OUTPUT_SETTINGS
from durable_obj.gate.sql import Token

#: The table settings of the other engines an object may use (Memory, Join,
#: Set, EmbeddedRocksDB), which system.merge_tree_settings does not list.
_ENGINE_SETTINGS = re.compile(
    r"(?:min|max)_(?:rows|bytes)_to_keep|compress|persistent|join_use_nulls"
    r"|max_(?:rows|bytes)_in_join|join_any_take_last_row|optimize_for_bulk_insert"
    r"|bulk_insert_block_size"
)
#: Setting names a statement's SETTINGS may hold (matched whole).
_READ_SETTINGS = re.compile(
    r"format_(?:csv|tsv|custom|pretty|json|display)\w*"
    r"|date_time_output_format|join_use_nulls|join_algorithm|join_default_strictness"
    r"|final|max_threads|max_block_size|extremes|aggregate_functions_null_for_empty"
    r"|cast_keep_nullable|enable_analyzer|allow_experimental_analyzer|optimize_\w+"
    r"|prefer_column_name_to_alias|use_skip_indexes|force_primary_key|group_by_use_nulls"
    r"|transform_null_in|data_type_default_nullable|precise_float_parsing"
    r"|allow_experimental_\w+_type|allow_suspicious_\w+|do_not_merge_across_partitions_\w+"
    # what the determinism gate writes into a logged INSERT (`determinism.py`)
    r"|session_timezone|insert_allow_materialized_columns|insert_null_as_default"
    r"|input_format_values_interpret_expressions"
    r"|input_format_values_deduce_templates_of_expressions"
    # how an INSERT reads its data (never Values' expressions: `writes`)
    r"|input_format_(?:skip_unknown_fields|null_as_default|defaults_for_omitted_fields"
    r"|import_nested_json|with_names_use_header|with_types_use_header|allow_errors_\w+"
    r"|json_\w+|csv_\w+|tsv_\w+)"
)
#: What a table's SETTINGS (or ALTER ... MODIFY SETTING) may not name: a
#: disk, a path or a storage policy reaches the host's files; the rest are
#: the bounds a statement must not raise.
_REFUSED_TABLE_SETTINGS = re.compile(
    r".*(?:disk|path|polic|keeper|zookeeper|s3|cache|remote|url|file|readonly|user|password"
    r"|secret|credential|max_execution|max_result|max_memory|overflow_mode|allow_ddl"
    # what makes an INSERT or a mutation wait, or a background thread spin
    # (found by attack: parts_to_delay_insert with min_delay_to_insert_ms
    # held each INSERT 30 s past a 2 s bound), and fault injection
    r"|delay|sleep|wait|backoff|throttl|fault_probability"
    r"|introspection|timeout|function_range|log_comment|max_ast|max_expanded_ast"
    r"|max_query_size|max_subquery|query_id).*"
)

#: Words that may follow a SETTINGS list (or `)` and `;`): anything else means
#: the list was not read to its end, and a setting after it went unseen.
_AFTER_SETTINGS = frozenset(
    {"format", "values", "select", "with", "as", "comment", "from", "empty", "into", "settings"}
)


#: Settings refused whatever else allows them: they name a file, a URL or
#: a secret. `output_format_schema` has the engine write the schema of a
#: Protobuf or CapnProto answer to a path (found by attack: a read wrote
#: any host file, with lines it chose); a schema registry is a URL.
_REACHING_SETTINGS = re.compile(
    r".*(?:schema|registry|url|uri|secret|file|path|dir|subject|credential|password).*"
)


def check(tokens: list[Token], ddl: bool, table_settings: frozenset[str]) -> None:
    """Refused unless every setting a SETTINGS (or SETTING) list of the
    statement names may be set there: a read's, an INSERT's, or a
    definition's (`ddl`, whose table may take `table_settings`)."""
    for i, tok in enumerate(tokens):
        if tok.kind != "ident" or tok.word not in ("settings", "setting"):
            continue
        start = i + 2 if i + 1 < len(tokens) and tokens[i + 1].text == "(" else i + 1
        for name in _setting_names(tokens, start):
            if _REACHING_SETTINGS.fullmatch(name):
                raise refuse(
                    f"the setting {name[:60]} (it names a file, a URL or a secret)",
                    "write the statement without that setting",
                )
            if ddl and (
                _REFUSED_TABLE_SETTINGS.fullmatch(name)
                or not (
                    name in table_settings
                    or _read_setting(name)
                    or DDL_SETTING.fullmatch(name)  # only change what DDL is accepted
                    or _ENGINE_SETTINGS.fullmatch(name)
                )
            ):
                # An allow-list: a query's SETTINGS inside DDL (CREATE ... AS
                # SELECT ... SETTINGS, a view's, an ALTER's) are the engine's
                # query settings, and a view's apply on every read of it.
                raise refuse(
                    f"the setting {name[:60]} (a table may take MergeTree settings and the "
                    "settings that change which definitions the engine accepts; the object "
                    "sets its bounds)",
                    "write the statement without that setting",
                )
            if not ddl and not _read_setting(name):
                raise refuse(
                    f"the setting {name[:60]} (a statement's SETTINGS may only shape its "
                    "output and plan, or how an INSERT reads its data; the object sets its "
                    "bounds)",
                    "write the statement without that setting",
                )


def _read_setting(name: str) -> bool:
    """Whether a read (or a query inside a definition) may set `name`."""
    return name in OUTPUT_SETTINGS or _READ_SETTINGS.fullmatch(name) is not None


def _setting_names(tokens: list[Token], i: int) -> list[str]:
    """The names of `name = value, ...` from token `i` (lower-cased). A
    value is one literal or name, maybe signed, maybe a call `f(...)`."""
    names: list[str] = []
    n = len(tokens)
    while i + 2 < n and tokens[i].kind in ("ident", "quoted") and tokens[i + 1].text == "=":
        names.append(tokens[i].word)
        i += 2
        if tokens[i].text in ("-", "+"):
            i += 1
        i += 1
        if i < n and tokens[i].text == "(":
            depth = 0
            while i < n:
                depth += {"(": 1, ")": -1}.get(tokens[i].text, 0)
                i += 1
                if depth == 0:
                    break
        if i < n and tokens[i].text == ",":
            i += 1
        else:
            break
    if (
        names  # a SETTINGS list, not a column named `settings`
        and i < n
        and tokens[i].text not in (")", ";")
        and tokens[i].word not in _AFTER_SETTINGS
    ):
        raise refuse(
            "a SETTINGS list the gate could not read to its end",
            "give each setting a single literal value",
        )
    return names
