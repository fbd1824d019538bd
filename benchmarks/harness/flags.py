"""The command line the families share: which stores, which S3 server, how
much latency, where the JSON goes; a family's own groups (--only); and the
sizes of a --smoke, a --quick and a full run."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from harness.procs import RESULTS


def parser(doc: str | None, quick: str, groups: Sequence[str] = ()) -> argparse.ArgumentParser:
    """A family's parser: its docstring's first line, --quick (`quick` says
    what it shrinks), --smoke and, with `groups`, --only."""
    out = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    out.add_argument("--quick", action="store_true", help=quick)
    out.add_argument("--smoke", action="store_true", help="tiny: runs, measures nothing")
    if groups:
        out.add_argument("--only", default=",".join(groups), help=f"comma list of {groups}")
    return out


def store_flags(parser: argparse.ArgumentParser, *, latencies: bool = False) -> None:
    """--stores, --latency-ms (`latencies`: repeatable, an S3 run each),
    the S3 server (--endpoint, --key, --secret, --bucket) and --results."""
    parser.add_argument("--stores", default="local,s3", help="comma list: local, s3")
    if latencies:
        parser.add_argument(
            "--latency-ms",
            type=float,
            action="append",
            help="added per S3 request; repeat for several S3 runs (default: 0 and 20)",
        )
    else:
        parser.add_argument("--latency-ms", type=float, default=0.0, help="added per S3 request")
    parser.add_argument("--endpoint", help="an S3-compatible server; default: start SeaweedFS")
    for name in ("--key", "--secret", "--bucket"):
        parser.add_argument(name, default="")
    parser.add_argument("--results", default=RESULTS, help=f"folder for the JSON ({RESULTS})")


def only(parser: argparse.ArgumentParser, args: argparse.Namespace, groups: Sequence[str]) -> None:
    """args.only, a comma list of `groups`, as a set; an unknown one is an error."""
    args.only = {g.strip() for g in args.only.split(",") if g.strip()}
    if args.only - set(groups):
        parser.error(f"--only: unknown group(s) {', '.join(sorted(args.only - set(groups)))}")


def sized(args: argparse.Namespace, sizes: Iterable[tuple[str, Any, Any, Any]]) -> None:
    """Each (name, smoke, quick, full) not given: the value of this run's kind."""
    for name, smoke, quick, full in sizes:
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else quick if args.quick else full)


def stores(args: argparse.Namespace) -> list[str]:
    return [s.strip() for s in args.stores.split(",") if s.strip()]


def shown(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments as the results record them: never the S3 secret."""
    return {k: v for k, v in vars(args).items() if k != "secret"}
