"""`python run.py baseline save RUN --out FILE`: keep a run's results as a baseline file to commit."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from harness.commands import add_config_arguments, load_config
from harness.core.errors import UserError
from harness.core.records import CandidateRecord, ReferenceRecord, RunHeader, latest_per_candidate
from harness.core.schema import encode_line
from harness.core.store import read_records, resolve_run


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="{save}", required=True)
    save = sub.add_parser("save", help="write a run's header, references and latest candidate records to one file")
    save.add_argument("run", metavar="RUN", help="run folder, run id or records.jsonl")
    save.add_argument(
        "--out", required=True, metavar="FILE", help="the baseline file to write (e.g. baselines/main.jsonl)"
    )
    save.add_argument(
        "--problem", action="append", default=[], metavar="NAME", help="keep only these problems (repeatable)"
    )
    add_config_arguments(
        save, section="results_dir, where run ids are looked up", example="results_dir=results/nightly"
    )


def run_from_args(args: argparse.Namespace, argv: Sequence[str]) -> int:
    cfg = load_config(args)
    path = resolve_run(args.run, cfg.path(cfg.results_dir))
    keep = set(args.problem)
    records = read_records(path)
    header = next((r for r in records if isinstance(r, RunHeader)), None)
    references: dict[tuple[str, str], ReferenceRecord] = {}
    for record in records:
        if isinstance(record, ReferenceRecord) and (not keep or record.identity.problem in keep):
            references.setdefault((record.identity.problem, record.identity.lane), record)
    candidates = latest_per_candidate(
        r for r in records if isinstance(r, CandidateRecord) and (not keep or r.identity.problem in keep)
    )
    if not candidates:
        raise UserError(f"{args.run}: no candidate records" + (f" for {', '.join(sorted(keep))}" if keep else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for row in ([header] if header else []) + list(references.values()) + list(candidates.values()):
            f.write(encode_line(row) + "\n")
    print(f"wrote {out}: {len(candidates)} candidate(s) of {len({p for p, _ in candidates})} problem(s) from {path}")
    return 0
