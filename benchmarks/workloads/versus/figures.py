"""run.py's figure groups on one store (writes, bases, segments, wal, list):
each figure in fresh `workloads.versus.child` processes, the two implementations
alternating, and the rows it adds to the report, with their goals and floors.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

from harness.procs import IMPLS, alternating, rotated, run_child
from harness.report import OwnRow, Report, Row, median, p99
from harness.servers import S3Server
from harness.workload import QUERIES

from workloads.versus import listing

GOAL_ROWS = 100_000  # the size the checkpoint, open and RSS goals are set at
GOAL_FLOOR = 1.2  # issue 39: every row within 1.2x of its floor ...
GOAL_FOLDER_FLUSH = 1.3  # ... the folder flush within 1.3x
MILLION = 1_000_000  # the scale point (--million): absolute cold-open goals, RSS ratio
GOAL_MILLION_OPEN_S = {"local": 0.5, "s3": 1.5}
LARGE = 100_000  # from this size on, --large-repeat samples per figure


class Bench:
    """Runs every figure on one store and adds its rows to the report."""

    def __init__(
        self,
        label: str,
        store: dict[str, Any],
        env: dict[str, str] | None,
        args: argparse.Namespace,
        report: Report,
        s3: S3Server | None = None,
    ) -> None:
        self.label, self.store, self.env, self.args, self.report = label, store, env, args, report
        self.s3 = s3
        self.samples: dict[str, Any] = report.samples.setdefault(label, {})
        self.extra: dict[int, int] = {}  # rows added to each base by its extra checkpoints
        #: (what, seconds) under the cold open of each base, from the floors run
        self.open_floors: dict[int, list[tuple[str, float]]] = {}

    # -- plumbing --------------------------------------------------------------
    def child(self, impl: str, phase: str, oid: str = "", **params: Any) -> dict[str, Any]:
        spec = {"impl": impl, "phase": phase, "oid": oid, "store": self.store, **params}
        return run_child(spec, self.env)

    def keep(self, key: str, impl: str, values: list[float]) -> list[float]:
        self.samples.setdefault(key, {}).setdefault(impl, []).extend(values)
        pooled: list[float] = self.samples[key][impl]
        return pooled

    def row(self, metric: str, unit: str, key: str, **kw: Any) -> Row:
        pick = kw.pop("stat", median)
        ours, theirs = (pick(self.samples[key].get(impl, [])) for impl in IMPLS)
        row = Row(self.label, metric, unit, ours, theirs, **kw)
        self.report.add(row)
        return row

    def floored(self, metric: str, unit: str, key: str, floor: str, how: str, **kw: Any) -> Row:
        """`row` with the floor sampled under `floor` beside it, judged
        against issue 39's goal; `how` says what the floor did."""
        under = median(self.samples[floor]["floor"])
        return self.row(
            metric, unit, key, floor=under, floor_goal=GOAL_FLOOR, note=f"floor: {how}", **kw
        )

    def progress(self, what: str, start: float) -> None:
        print(f"  [{self.label}] {what}: {time.perf_counter() - start:.1f} s", flush=True)

    def oid(self, name: str, impl: str) -> str:
        return f"{name}-{impl.replace('.', '-')}"

    def stored_of(self, oid: str) -> tuple[str, list[str]]:
        """Where `oid`'s stored base is ("": none) and its WAL segments, in
        the head's order: paths on a folder, keys on S3."""
        manifest = self.head(oid)["manifest"]

        def where(key: str) -> str:
            if self.s3 is None:
                return os.path.join(self.store["root"], oid, key)
            return f"{self.store['prefix']}/{oid}/{key}"

        base = manifest.get("base")
        return (where(base["key"]) if base else ""), [where(s["key"]) for s in manifest["wal"]]

    def head(self, oid: str) -> dict[str, Any]:
        if self.s3 is None:
            with open(os.path.join(self.store["root"], oid, "head.json"), "rb") as handle:
                head: dict[str, Any] = json.load(handle)
                return head
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.s3.endpoint,
            aws_access_key_id=self.s3.key,
            aws_secret_access_key=self.s3.secret,
            region_name="us-east-1",
        )
        key = f"{self.store['prefix']}/{oid}/head.json"
        head = json.loads(client.get_object(Bucket=self.s3.bucket, Key=key)["Body"].read())
        client.close()
        return head

    def opens(
        self, name: str, key: str, rows: int, repeat: int | None = None, floor: bool = False
    ) -> None:
        """Cold opens of `name` by both implementations, alternating; with
        `floor`, the open floor between them, its place turned every
        repetition: plain chdb RESTOREs the very base durable_obj's open
        restores (the same bytes, the same parts) and runs the statements of
        the same WAL segments, all fetched bare."""
        base, segments = self.stored_of(self.oid(name, IMPLS[0])) if floor else ("", [])
        for rep in range(repeat or self.args.repeat):
            for impl in rotated([*alternating(rep), *(["floor"] if floor else [])], rep // 2):
                if impl == "floor":
                    got = self.child(
                        "floor", "open_floor", "floor-open", archive=base, segments=segments
                    )
                    if got["rows"] != rows:
                        raise RuntimeError(f"the open floor restored {got['rows']}, not {rows}")
                    self.keep(key, "floor", [got["open_ms"] / 1e3])
                    self.keep(f"rss_{key}", "floor", [got["peak_rss_mib"]])
                    self.keep_queries(key, "floor", got)
                    continue
                got = self.child(impl, "open", self.oid(name, impl))
                if got["rows"] != rows:
                    raise RuntimeError(f"{impl} opened {got['rows']} rows of {name}, not {rows}")
                self.keep(key, impl, [got["open_ms"] / 1e3])
                self.keep(f"rss_{key}", impl, [got["peak_rss_mib"]])
                self.keep_queries(key, impl, got)

    def keep_queries(self, key: str, impl: str, got: dict[str, Any]) -> None:
        """The query times an open phase measured after its open (`QUERIES`)."""
        for name in QUERIES:
            if f"query_{name}_ms" in got:
                self.keep(f"query_{name}_{key}", impl, got[f"query_{name}_ms"])

    def query_rows(self, key: str, rows: int) -> None:
        """A row per query of `QUERIES` after the cold opens of `key`, each
        with its floor: the same query on the open floor's bare chdb, whose
        database RESTOREd the same rows (the engine's defaults, its files in
        the temporary folder)."""
        for name in QUERIES:
            qkey = f"query_{name}_{key}"
            if set(self.samples.get(qkey, {})) >= {*IMPLS, "floor"}:
                how = "the query on bare chdb after its RESTORE"
                self.floored(f"query after open: {name}, {rows:,} rows", "ms", qkey, qkey, how)

    # -- figures ---------------------------------------------------------------
    def writes(self, raw: bool) -> None:
        start = time.perf_counter()
        n = {"executes": self.args.executes, "flushes": self.args.flushes}
        lean = self.label == "local"  # durable_obj with fsync off: like for like
        for rep in range(self.args.repeat):
            for impl in alternating(rep):
                inline = {"inline_floors": True} if impl == IMPLS[0] else {}
                got = self.child(impl, "write", self.oid(f"write{rep}", impl), **n, **inline)
                for key, values in got.items():
                    if isinstance(values, list):
                        # floor*_flush_*: the floors' turns beside durable_obj's flushes
                        self.keep(key, "floor" if key.startswith("floor") else impl, values)
            if lean:
                store = {**self.store, "storage_options": {"fsync": False}}
                spec = {"impl": IMPLS[0], "phase": "write", "oid": f"lean{rep}", "store": store}
                got = run_child({**spec, **n}, self.env)
                for size in (1, 10, 100):
                    key = f"flush_{size}_ms"
                    self.keep(f"lean_{key}", IMPLS[0], got[key])
                    self.samples.setdefault(f"lean_{key}", {})[IMPLS[1]] = self.samples[key][
                        IMPLS[1]
                    ]
            if raw:
                got = run_child({"impl": "raw", "phase": "raw", **n})
                self.keep("execute_ms", "raw", got["execute_ms"])
                self.keep("bulk_ms", "raw", got["bulk_ms"])
            # the floors: the same publishes with nothing of durable_obj (on a
            # folder fsync'd in plain Python, also in the V1 layout; on S3 two
            # bare conditional PUTs through obstore), each after the same
            # INSERTs on a bare chdb connection, took turns with durable_obj's
            # flushes in its process (above); here the publish alone, in a
            # process of its own that runs no engine
            head_bytes = len(json.dumps(self.head(self.oid(f"write{rep}", IMPLS[0]))))
            spec = {"impl": "floor", "phase": "floor", "oid": f"floor_idle{rep}", **n}
            got = run_child({**spec, "store": self.store, "head_bytes": head_bytes})
            for size in (1, 10, 100):
                self.keep(f"floor_idle_flush_{size}_ms", "floor", got[f"flush_{size}_ms"])
        self.progress("execute + flush", start)
        # the floor of an execute: the same INSERT on a bare chdb connection
        lat = self.samples["execute_ms"]["raw"] if raw else []
        for name, stat, goal in (("p50", median, 1.05), ("p99", p99, None)):
            self.row(
                f"execute {name}, single-row INSERT",
                "ms",
                "execute_ms",
                stat=stat,
                goal=goal,
                floor=stat(lat) if raw else math.nan,
                floor_goal=GOAL_FLOOR if raw else None,
                note="floor: the same INSERT on a bare chdb connection" if raw else "",
            )
        self.row(
            "execute, one 1,000-row VALUES INSERT (2.3 MB)",
            "ms",
            "bulk_ms",
            floor=median(self.samples["bulk_ms"]["raw"]) if raw else math.nan,
            floor_goal=GOAL_FLOOR if raw else None,
            note="floor: the same INSERT on a bare chdb connection" if raw else "",
        )
        how = "2 files fsync'd, rename, dir fsync" if lean else "2 bare conditional PUTs"
        for size in (1, 10, 100):
            key = f"flush_{size}_ms"
            floor = median(self.samples[f"floor_flush_{size}_ms"]["floor"])
            self.row(
                f"flush, {size} buffered",
                "ms",
                key,
                goal=1.0,
                floor=floor,
                floor_goal=GOAL_FOLDER_FLUSH if lean else GOAL_FLOOR,
                note=f"floor: the same INSERTs on bare chdb, then {how}" if size == 1 else "",
            )
        # the same flushes beside another floor each: the publish alone, in
        # a process running no engine; on a folder, the V1 layout's floor
        beside = [("  over the publish alone, {}", "floor_idle", "the same publish, no engine")]
        if lean:
            v1 = "flush, {} buffered, over the V1-layout floor"
            beside.append((v1, "floor_v1", "the segment in wal/ too"))
        for metric, prefix, what in beside:
            for size in (1, 10, 100):
                self.report.add(
                    Row(
                        self.label,
                        metric.format(size),
                        "ms",
                        median(self.samples[f"flush_{size}_ms"][IMPLS[0]]),
                        median(self.samples[f"{prefix}_flush_{size}_ms"]["floor"]),
                        note=f"right: the floor ({what})" if size == 1 else "",
                    )
                )
        if lean:
            for size in (1, 10, 100):
                key = f"lean_flush_{size}_ms"
                self.row(f"flush, {size} buffered, no fsync in either", "ms", key, goal=1.0)

    def bases(self) -> None:
        for i, rows in enumerate(self.args.rows):
            start = time.perf_counter()
            # chdb.durable takes ~40 s to open 100k rows: one sample each there
            repeat = self.args.large_repeat if rows >= LARGE else self.args.repeat
            # the two implementations and the checkpoint floor, in turn
            for impl in rotated([*alternating(i), "floor"], i // 2):
                if impl == "floor":
                    self.checkpoint_floor(rows, repeat)
                    continue
                oid = self.oid(f"base{rows}", impl)
                got = self.child(impl, "load", oid, rows=rows, checkpoints=repeat)
                self.keep(f"checkpoint_{rows}", impl, got["checkpoint_ms"])
                if got.get("incremental_ms"):
                    self.keep(f"incremental_{rows}", impl, got["incremental_ms"])
                size = self.head(oid)["manifest"]["base"]["size"]
                self.keep(f"size_{rows}", impl, [size / 2**20])
            # each checkpoint after the first adds one row first
            self.extra[rows] = repeat - 1
            self.opens(f"base{rows}", f"open_{rows}", rows + repeat - 1, repeat, floor=True)
            self.progress(f"{rows:,} rows: checkpoint + cold open + their floors", start)
            goal = rows == GOAL_ROWS
            local = self.s3 is None
            how = "BACKUP (parts in RAM, as ours) + " + ("fsync" if local else "boto3 upload")
            how += " + the head's publish"
            metric, key = f"checkpoint, {rows:,} rows", f"checkpoint_{rows}"
            self.floored(metric, "ms", key, f"ckpt_floor_{rows}", how, goal=0.1 if goal else None)
            self.checkpoint_floor_rows(rows)
            if self.samples.get(f"incremental_{rows}"):
                self.report.own.append(
                    OwnRow(
                        self.label,
                        f"checkpoint, {rows:,} rows, incremental",
                        "ms",
                        median(self.samples[f"incremental_{rows}"][IMPLS[0]]),
                        note="one row added: the default after a full one (the row above: full)",
                    )
                )
            self.samples[f"size_{rows}"]["floor"] = self.samples[f"ckpt_floor_{rows}"]["size_mib"]
            how = "the BACKUP archive of the same rows by plain chdb"
            self.floored(f"stored base, {rows:,} rows", "MiB", f"size_{rows}", f"size_{rows}", how)
            how = "a fresh process: import chdb, " + ("" if local else "obstore download, ")
            metric, key = f"cold open, base of {rows:,} rows", f"open_{rows}"
            how += "RESTORE of our base (into RAM, as ours)"
            self.floored(metric, "s", key, key, how, goal=0.05 if goal else None)
            for what, floor in self.open_floors.get(rows, []):
                self.report.add(
                    Row(
                        self.label,
                        f"  over {what}",
                        "s",
                        median(self.samples[f"open_{rows}"][IMPLS[0]]),
                        floor,
                        note="right: the floor (hashlib of the archive, which an open "
                        "verifies; a bare obstore download of it)",
                    )
                )
            self.query_rows(key, rows)
            self.floored(
                f"peak RSS, opening {rows:,} rows",
                "MiB",
                f"rss_open_{rows}",
                f"rss_open_{rows}",
                "the open floor's process at its RESTORE",
                goal=1.1 if goal or rows == MILLION else None,
            )
            if rows == MILLION:
                self.report.own.append(
                    OwnRow(
                        self.label,
                        f"cold open, base of {rows:,} rows",
                        "s",
                        median(self.samples[f"open_{rows}"][IMPLS[0]]),
                        GOAL_MILLION_OPEN_S.get(self.label),
                        note="the scale point's absolute goal",
                    )
                )

    def checkpoint_floor(self, rows: int, repeat: int) -> None:
        """What bounds a checkpoint of `rows` rows, `repeat` times, in plain
        chdb and boto3: the engine's BACKUP of the same rows, then on a
        folder an fsync of the archive and its directory, on S3 a bare
        boto3 upload of it. Its archive is the open floor's."""
        got = self.child("raw", "ckpt_floor", f"floor{rows}", rows=rows, repeat=repeat)
        self.samples.setdefault(f"ckpt_floor_{rows}", {})["floor"] = [
            backup + rest + head
            for backup, rest, head in zip(
                got["backup_ms"],
                got.get("upload_ms") or got["fsync_ms"],
                got["head_ms"],
                strict=True,
            )
        ]
        parts = ("backup_ms", "fsync_ms", "upload_ms", "head_ms", "sha256_ms", "download_ms")
        for part in (*parts, "size_mib"):
            self.samples.setdefault(f"ckpt_floor_{rows}", {})[part] = got.get(part, [])

    def checkpoint_floor_rows(self, rows: int) -> None:
        """The checkpoint's floor in its parts, and what bounds a cold open
        besides the RESTORE: the SHA-256 of its base and its download."""
        parts = self.samples[f"ckpt_floor_{rows}"]
        ours = median(self.samples[f"checkpoint_{rows}"][IMPLS[0]])
        floors: list[tuple[str, float, float | None]] = [
            ("BACKUP alone", median(parts["backup_ms"]), None)
        ]
        if parts["upload_ms"]:
            upload = median(parts["upload_ms"])
            floors.append(("boto3 upload", upload, 1.2))
            floors.append(("BACKUP+upload", median(parts["backup_ms"]) + upload, None))
        else:
            synced = median(parts["backup_ms"]) + median(parts["fsync_ms"])
            floors.append(("BACKUP+fsync, no head", synced, None))
        for what, floor, goal in floors:
            self.report.add(
                Row(
                    self.label,
                    f"  over {what}",
                    "ms",
                    ours,
                    floor,
                    goal=goal if rows == GOAL_ROWS else None,
                    note="right: the floor (plain chdb; boto3 upload_file of its archive)",
                )
            )
        self.open_floors[rows] = [("SHA-256 of its base", median(parts["sha256_ms"]) / 1000)]
        if parts["download_ms"]:
            self.open_floors[rows].append(("obstore download", median(parts["download_ms"]) / 1000))

    def segments(self) -> None:
        """--segments segments x 10 statements on top of the middle base."""
        rows = self.args.rows[min(1, len(self.args.rows) - 1)]
        segs, per = self.args.segments, 10
        start = time.perf_counter()
        for impl in IMPLS:
            self.child(impl, "append", self.oid(f"base{rows}", impl), segments=segs, statements=per)
        self.opens(f"base{rows}", "open_seg", rows + self.extra[rows] + segs * per, floor=True)
        self.progress(f"base + {segs} segments: cold open", start)
        metric = f"cold open, base {rows // 1000}k + {segs} segs x {per}"
        self.floored(metric, "s", "open_seg", "open_seg", self.replayed_floor(True), goal=0.1)
        # replay rate: the statements over what they added to the base-only open
        for impl in IMPLS:
            extra = median(self.samples["open_seg"][impl]) - median(
                self.samples[f"open_{rows}"][impl]
            )
            self.samples.setdefault("replay_seg", {})[impl] = [segs * per / max(extra, 1e-3)]
        self.row("  replay statements/s (over base-only)", "st/s", "replay_seg", better="higher")

    def replayed_floor(self, base: bool) -> str:
        """What the open floor of an object with WAL segments does."""
        fetched = "" if self.s3 is None else "obstore downloads, "
        restored = "RESTORE of our base, " if base else ""
        return f"a fresh process: import chdb, {fetched}{restored}our segments' statements run"

    def long_wal(self) -> None:
        segs = self.args.wal_segments
        start = time.perf_counter()
        for impl in IMPLS:
            oid = self.oid("wal", impl)
            got = self.child(impl, "append", oid, create=True, segments=segs - 1, statements=1)
            self.keep("wal_flush_ms", impl, [got["append_ms"] / (segs - 1)])
        self.progress(f"{segs}-segment WAL written", start)
        self.opens("wal", "open_wal", segs - 1, floor=True)
        self.progress(f"{segs}-segment WAL: cold open", start)
        goal = 0.05 if self.label == "s3" else None
        how = self.replayed_floor(False)
        self.floored(f"cold open, {segs}-segment WAL", "s", "open_wal", "open_wal", how, goal=goal)
        for impl in IMPLS:
            self.samples.setdefault("replay_wal", {})[impl] = [
                (segs - 1) / median(self.samples["open_wal"][impl])
            ]
        self.row("  statements/s (whole open)", "st/s", "replay_wal", better="higher")
        # its floor, when the writes ran in this run: a bare chdb INSERT and
        # the floor of a flush of 1 (the same publishes with nothing of ours)
        raw, flush = (self.samples.get(k, {}) for k in ("execute_ms", "floor_flush_1_ms"))
        both = "raw" in raw and "floor" in flush
        self.row(
            "execute + flush per segment (writing it)",
            "ms",
            "wal_flush_ms",
            floor=median(raw["raw"]) + median(flush["floor"]) if both else math.nan,
            floor_goal=GOAL_FLOOR if both else None,
            note="floor: bare chdb INSERT + the flush-of-1 floor" if both else "",
        )

    def all(self, raw: bool) -> None:
        only = self.args.only
        if "writes" in only:
            self.writes(raw)
        if "bases" in only or "segments" in only:  # the segments go on a base
            self.bases()
        if "segments" in only:
            self.segments()
        if "wal" in only:
            self.long_wal()
        if "list" in only:
            listing.figure(self)
