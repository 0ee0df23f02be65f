"""The secret plan of one problem's evaluation: seeds and the ordered forward calls that the
reference and every compared model make alike. Drawn in the parent, never shown to candidates."""

from __future__ import annotations

import dataclasses
import random
import secrets
from typing import Optional

from harness.core.config import Config, ModuleMode
from harness.core.protocol import Call


@dataclasses.dataclass(frozen=True)
class Plan:
    """Secret seeds and the ordered forward calls that reference and candidate both make."""

    construct_seed: int  # manual_seed before constructing Model and ModelNew
    input_seeds: tuple[int, ...]  # one per trial; never shown to candidates (only the tensors are)
    distributions: tuple[str, ...]  # one per trial: how its floating inputs are drawn
    calls: tuple[Call, ...]  # after the same-seed call, in this order
    other_size_trial: Optional[int] = None  # index of the trial at another input size (after the regular ones)
    randomize_weights: bool = True  # the reference's weights are redrawn before candidates load them
    gradient_seed: int = 0  # the random projection of the outputs whose backward both sides take
    rng_seed: int = 0  # torch's generators are seeded with this plus the call's index before each checked call, on
    # both sides: a reference that draws random numbers (train-mode dropout) draws the same ones
    # for a candidate that draws as it does. Not derived from the input seeds, which stay secret

    @property
    def precision_call(self) -> Optional[int]:
        """The call the reference also makes in float64: the first regular eval call."""
        return next(
            (
                i
                for i, c in enumerate(self.calls)
                if c.module_mode == ModuleMode.EVAL and not c.repeat and not c.other_size
            ),
            None,
        )

    @property
    def timed_inputs(self) -> int:
        """Input sets the timer rotates over: the regular trials only."""
        return len(self.input_seeds) - (self.other_size_trial is not None)

    @classmethod
    def fresh(cls, cfg: Config) -> "Plan":
        """A plan from a problem's config (`Config.for_problem`: its declarations already applied)."""
        trials = cfg.check.trials + (1 if cfg.check.other_size else 0)
        other = cfg.check.trials if cfg.check.other_size else None
        # check.seed fixes every draw below (in this order); 0 leaves them secret
        draw = random.Random(cfg.check.seed).getrandbits if cfg.check.seed else secrets.randbits
        seeds = tuple(draw(62) for _ in range(trials))
        kinds = cfg.check.input_distributions
        distributions = tuple(kinds[i % len(kinds)] if i != other else "given" for i in range(trials))
        calls = tuple(Call(i, mode, distributions[i]) for i in range(cfg.check.trials) for mode in cfg.check.modes)
        if other is not None:
            calls += tuple(Call(other, mode, "given", other_size=True) for mode in cfg.check.modes)
        # Repeats come last: the module's state is final, as it is when the timed calls run.
        calls += tuple(Call(0, "eval", distributions[0], repeat=k) for k in range(1, cfg.check.repeats + 1))
        return cls(
            construct_seed=draw(62),
            input_seeds=seeds,
            distributions=distributions,
            calls=calls,
            other_size_trial=other,
            randomize_weights=cfg.check.randomize_weights,
            gradient_seed=draw(62),
            rng_seed=draw(62),
        )
