"""Subcommands: each has setup_arguments(parser), run_from_args(args) and a run() that tests call.

Every command reads the config one way: `add_config_arguments` gives its parser the common options
`--config FILE` and `--set KEY=VALUE` (repeatable), and `load_config(args, ...)` layers them,
configs/default.yaml < --config < --set < the command's own flags (e.g. --device, --results).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
from typing import Iterator, Sequence

from harness.core import config
from harness.core.config import Config


def add_config_arguments(
    parser: argparse.ArgumentParser, *, section: str = "", example: str = "check.trials=3"
) -> None:
    """The common `--config` and `--set` options; `section` names the part of the config the
    command reads, `example` is a --set shown in the help."""
    parser.add_argument(
        "--config", metavar="FILE", help="YAML layered over configs/default.yaml" + (f" ({section})" if section else "")
    )
    parser.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], help=f"override one config key, e.g. {example}"
    )


def add_problems_dir_argument(parser: argparse.ArgumentParser, description: str) -> None:
    """The `--problems-dir DIR` option (config problems_dir); `problems_dir_override` reads it."""
    parser.add_argument("--problems-dir", metavar="DIR", help=description)


def problems_dir_override(args: argparse.Namespace) -> list[str]:
    """`--problems-dir` as a config override for `load_config`, when it was given."""
    return [f"problems_dir={json.dumps(args.problems_dir)}"] if args.problems_dir else []


def load_config(args: argparse.Namespace, overrides: Sequence[str] = ()) -> Config:
    """The config of a command's arguments: the default, then --config, then every --set in order,
    then `overrides` (the command's own flags, which win over --set). A bad file or key is a UserError,
    also where a flag overrides it (`--no-timing` over a malformed timing.enabled): the layers below the
    flags are validated on their own first."""
    cfg = config.load_config(args.config, list(args.set))
    return config.with_overrides(cfg, list(overrides)) if overrides else cfg


class Terminated(KeyboardInterrupt):
    """SIGTERM during a run: handled as Ctrl-C is (records kept, workers ended, exit 130)."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, once;
    a second SIGTERM does not cut the clean-up short. Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise Terminated("terminated (SIGTERM)")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
