"""A candidate's pass against the lane's judge, top to bottom, in the order it happens:

- `judge_candidate`: the candidate's compared pass, the verdict's two stages (harness.parent.verdict)
  with compute-sanitizer between them, and the parts of its record.
- `ComparedPass`: each step the worker reports is judged before the worker may go on (a wrong output
  stops it); then the worker is timed in turns with the reference. It serves candidates, the null
  candidate and the torch.compile baselines alike.
- `Pairing`: the parent's side of those paired rounds (the statistics are harness.core.pairing's).
- `Setting`: where one problem is evaluated on one lane, its settings resolved once (`Setting.of`),
  and the one place that turns them into the messages the judge, the workers and the sanitizer's
  child are started with (`judge_job`, `worker_job`, `sanitize_job`).

Only typed messages pass here, never tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
from pathlib import Path
from typing import Any, Optional

from harness.core import buildbook
from harness.core import protocol as P
from harness.core.config import Config, Device, GradientPolicy, SyncMode, TimerSettings, TimingConfig, TimingMode
from harness.core.errors import flat
from harness.core.pairing import (
    COMPARED,
    REFERENCE,
    ProblemTiming,
    choose_protocol,
    common_overhead,
    paired_speedup,
    pooled,
    schedule,
)
from harness.core.plan import Plan
from harness.core.protocol import Failure, WorkerOutcome
from harness.core.records import (
    CallProfile,
    CheckResult,
    Checks,
    Decision,
    Identity,
    Integrity,
    PairedSpeedup,
    Provenance,
    ReferenceIdentity,
    ReferenceRecord,
    SanitizerResult,
    Timing,
    TimingStats,
    to_dict,
)
from harness.core.scan import declared_kernels, scan_source
from harness.core.status import Finding, Status
from harness.core.store import RunStore
from harness.core.unrun import sanitizer_warnings
from harness.parent import verdict
from harness.parent.quiet import LaneQuiet, QuietHost
from harness.parent.sanitize import LaneSanitizer
from harness.parent.scratch import RunScratch
from harness.parent.supervise import JudgeClient, JudgeFailed, Lane, Reply, default_memory_limit, start_run
from harness.parent.verdict import Case, Compared, Reported, Verdict, VerdictRules
from harness.sources.candidate import Candidate
from harness.sources.problem import Problem

# -- a candidate's pass, top to bottom ---------------------------------------------------------------------


def judge_candidate(
    setting: Setting,
    client: JudgeClient,
    plan: Plan,
    timing: ProblemTiming,
    candidate: Candidate,
    reference: ReferenceRecord,
    restart_note: str,
    sanitizer: LaneSanitizer,
) -> tuple[Decision, Checks, Timing, Integrity, Provenance]:
    """One candidate against the lane's judge, from its worker's first message to the parts of its
    record: its compared pass (checks, then paired timing), the verdict's first stage, compute-sanitizer
    when that leaves it correct, then the verdict settled with its timing compared."""
    compared = ComparedPass(
        setting, client, plan, timing, Subject(P.Role.CANDIDATE, candidate.path, candidate.name)
    ).run()
    case = Case(
        compared,
        plan.calls,
        plan.randomize_weights,
        reference,
        setting.rules,
        setting.device,
        reported(candidate, compared.outcome),
        restart_note,
    )
    first = verdict.decide(case)
    sanitized: tuple[SanitizerResult, ...] = ()
    unsafe: list[Finding] = []
    if first.status is Status.CORRECT and sanitizer.wanted():
        job = setting.sanitize_job(candidate.path, plan.construct_seed, reference.outcome.other_size)
        call_ms = compared.timing.median_ms if compared.timing is not None else 0.0
        sanitized, unsafe = sanitizer.run(job, candidate.hash, candidate.name, call_ms)
    return decided_parts(compared, case, verdict.settle(case, first, unsafe), sanitized)


def reported(candidate: Candidate, outcome: WorkerOutcome) -> Reported:
    """What the candidate's worker reported beyond its checks (its messages), and what its
    source declares (a scan of its file), for harness.parent.verdict."""
    mapping = tuple(pair for m in outcome.every(P.WeightsMapped) for pair in m.pairs)
    by_seed = outcome.first(P.WeightsBySeed)
    why = by_seed.reason if by_seed is not None else ""
    mapped = outcome.first(P.WeightsMapped)
    scanned, declared = tuple(scan_source(candidate.path)), frozenset(declared_kernels(candidate.path))
    return Reported(
        mapping,
        outcome.first(P.ExtensionCalls),
        outcome.first(P.Threads),
        why,
        scanned,
        declared,
        mapped.by if mapped is not None else "position",
    )


def left_running(outcome: WorkerOutcome) -> tuple[str, ...]:
    """A note when the model left processes running that its worker had to end."""
    count = outcome.done.leftover if outcome.done is not None else 0
    return (
        (
            f"the model left {count} process{'es' if count > 1 else ''} running after its run; the worker ended "
            f"{'them' if count > 1 else 'it'}",
        )
        if count
        else ()
    )


def decided_parts(
    compared: Compared, case: Case, decided: Verdict, sanitized: tuple[SanitizerResult, ...]
) -> tuple[Decision, Checks, Timing, Integrity, Provenance]:
    """The parts of the record of a candidate that ran against the judge, from its settled verdict."""
    outcome, gradients = compared.outcome, compared.gradients
    mapping = case.reported.mapping
    return (
        Decision(
            decided.status,
            flat(decided.reason),
            decided.stricter,
            decided.warnings + tuple(sanitizer_warnings(sanitized)),
            decided.notes + left_running(outcome),
        ),
        Checks(
            results=tuple(compared.checks),
            same_seed=compared.same_seed,
            weights="seed" if compared.own_weights else case.reported.mapped_by if mapping else "name",
            weight_mapping=mapping,
            gradients=gradients[0] if gradients is not None else "",
        ),
        decided.timing,
        dataclasses.replace(decided.evidence, flags=decided.flags, sanitizer=sanitized),
        Provenance(
            builds=tuple(m.build for m in outcome.every(P.Built)),
            phase_seconds=outcome.done.phase_seconds if outcome.done is not None else {},
            wall_seconds=round(outcome.wall_seconds, 3),
        ),
    )


# -- one compared worker's pass ---------------------------------------------------------------------------


def publish_builds(own: Path, cache: Path, subject: "Subject") -> list[str]:
    """Publish what a finished worker compiled in its own folder `own` into `cache`, under the digest
    of the source it ran (as the worker computed it: the pinned text, else the file); the keys."""
    try:
        text = subject.text or subject.source.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return buildbook.publish(own / "builds", cache, buildbook.owner_of(text))


class ComparedPass:
    """One compared worker's pass against the lane's judge: each step it reports is judged before it
    may go on (a wrong output stops it); then it is timed in turns with the reference
    (harness.core.pairing). `run()` returns what it came to."""

    def __init__(
        self, setting: Setting, client: JudgeClient, plan: Plan, problem_timing: ProblemTiming, subject: Subject
    ) -> None:
        self.setting, self.client, self.plan, self.subject = setting, client, plan, subject
        self.problem_timing = problem_timing
        self.calls: list[CheckResult] = []
        self.found: dict[str, Any] = {}  # the other steps' verdicts, by step
        self.precision: dict[str, float] = {}
        self.unsafe: list[str] = []  # writes past an input's end, as the judge found them (the first is kept)
        self.lazy = ""  # the first output reported with no values of its own (lazy-output), with its step
        self.seen: list[P.StepKind] = []  # the steps the worker reported, in the order protocol.STEPS declares
        self.pairing: Optional[Pairing] = None
        # the GPU held from the go-ahead into timing to the last timed call's check
        self._alone = contextlib.ExitStack()

    def run(self) -> Compared:
        cfg, subject = self.setting.cfg, self.subject
        self.judge_session: P.SessionHandle = self.client.request(P.Open(subject.role), cfg.timeouts.construct)
        if cfg.timing.enabled:
            self.pairing = Pairing(
                self.client,
                self.judge_session.session,
                cfg.timing,
                cfg.timeouts.time,
                subject.name,
                LaneQuiet(self.setting.quiet, self.setting.lane.index),
                self.problem_timing,
            )
        cwd = self.setting.scratch.make(f"{subject.log_name[:20]}-")
        try:
            with start_run(
                self.setting.worker_job(self.plan, subject, self.problem_timing, self.judge_session),
                timeouts=cfg.timeouts,
                memory_limit=self.setting.memory_limit,
                log_path=self.setting.store.log_path(self.setting.problem.name, subject.log_name),
                log_limit=cfg.limits.log_kib << 10,
                cwd=cwd,
                launcher=self.setting.lane.launcher,
            ) as run:
                for message in run.messages():  # each is answered before the worker may go on
                    self.setting.gpu_step()
                    run.answer(self.on_message(message))
            assert run.outcome is not None  # every message was read
            outcome = run.outcome
        finally:
            if self.pairing is not None:
                self.pairing.close()
            self._alone.close()
            # the worker has ended: what it compiled goes into the cache under its source's digest, by
            # the parent's hand (harness.core.buildbook)
            publish_builds(cwd, cfg.path(cfg.build_cache_dir), subject)
            shutil.rmtree(cwd, ignore_errors=True)
            if self.client.alive:
                self.client.request(P.Close(self.judge_session.session), cfg.timeouts.check)
        return self.result(outcome)

    def on_message(self, message: Any) -> Optional[Failure | Reply]:
        if isinstance(message, P.Step):
            return self.on_step(message)
        if isinstance(message, (P.Ready, P.RoundTimed)):
            return self.on_timing(message)
        return None

    def on_step(self, step: P.Step) -> Optional[Failure | Reply]:
        """The judge's verdict on a step the worker reported in its role's declared order; a step
        out of that order is refused before the judge sees it."""
        role = self.subject.role
        order = P.out_of_order(
            role,
            self.seen,
            step,
            len(P.role_calls(role, self.plan.calls)),
            self.setting.cfg.check.gradients != GradientPolicy.OFF,
        )
        if order:
            return Failure(Status.FORGED_RESULT, order)
        self.seen.append(step.step)
        if not self.lazy:
            self.lazy = lazy_output(step)
        verdict: P.StepAnswer = self.client.request(
            P.Check(self.judge_session.session, step), self.setting.cfg.timeouts.check
        )
        if verdict.failure is not None:
            return verdict.failure
        if verdict.unsafe and not self.unsafe:
            self.unsafe.append(verdict.unsafe)
        if step.step == P.StepKind.CALL:
            # the judge answers a call step with a check, or with the failure handled above
            assert verdict.check is not None
            self.calls.append(verdict.check)
            self.precision.update(verdict.precision)
        elif step.step == P.StepKind.GRADS:
            self.found[P.StepKind.GRADS] = verdict.gradients
        else:
            self.found[step.step] = verdict.check
        if step.step == P.StepKind.SAME_SEED and step.own_weights:
            self.found["own_weights"] = True
        if verdict.check is not None and not verdict.check.passed and step.step != P.StepKind.SAME_SEED:
            return Failure(Status.INCORRECT, f"{verdict.check.name}: {verdict.check.reason}")
        redraw = verdict.staged is not None and verdict.staged.redraw  # timing comes after a second gradient draw
        if step.step == P.StepKind.TIMED:
            self._alone.close()
        elif step.want.kind == P.WantKind.TIMING and self.pairing is not None and not redraw:
            self._alone.enter_context(self.setting.gpu_alone())  # its warm-up, profile and rounds run on a quiet GPU
        return Reply({"staged": to_dict(verdict.staged)})

    def on_timing(self, message: P.Ready | P.RoundTimed) -> Optional[Failure | Reply]:
        pairing = self.pairing
        if pairing is None:
            return Failure(Status.FORGED_RESULT, "the worker sent a timing message in a run that times nothing")
        try:
            if isinstance(message, P.Ready):
                assert pairing.ready is None
                return Reply(pairing.on_ready(message))
            return Reply(pairing.on_round(message))
        except JudgeFailed:
            raise
        except Exception as exc:
            return Failure(
                Status.FORGED_RESULT,
                f"the worker's timing messages are not the harness's ({type(exc).__name__}: {exc})"[:300],
            )

    def result(self, outcome: WorkerOutcome) -> Compared:
        """What the run came to: a worker that finished without every check or timing round it
        owed is a harness error."""
        checks: list[CheckResult] = list(self.calls)
        planned = len(P.role_calls(self.subject.role, self.plan.calls))
        if outcome.failure is None and len(self.calls) != planned:
            outcome = dataclasses.replace(
                outcome, failure=Failure(Status.HARNESS_ERROR, f"{len(self.calls)} of {planned} checks arrived")
            )
        else:
            checks.extend(
                c for c in (self.found.get(P.StepKind.BUFFERS), self.found.get(P.StepKind.TIMED)) if c is not None
            )
        pairing = self.pairing
        timed = pairing.result() if pairing is not None and outcome.failure is None else None
        if outcome.failure is None and pairing is not None and timed is None:
            outcome = dataclasses.replace(
                outcome, failure=Failure(Status.HARNESS_ERROR, "the worker finished before every timing round arrived")
            )
        ready = pairing.ready if pairing is not None else None
        return Compared(
            outcome,
            checks,
            self.found.get(P.StepKind.SAME_SEED),
            self.precision,
            self.found.get(P.StepKind.GRADS),
            own_weights=bool(self.found.get("own_weights")),
            timing=timed[0] if timed else None,
            paired=timed[1] if timed else None,
            profile=ready.profile if ready is not None else None,
            profile_error=ready.profile_error if ready is not None else "",
            unsafe=self.unsafe[0] if self.unsafe else next((m.reason[:300] for m in outcome.every(P.Unsafe)), ""),
            lazy=self.lazy,
        )


def lazy_output(step: P.Step) -> str:
    """The first output of `step` its worker found with no values of its own (a tensor subclass, the
    meta device, a storage smaller than its shape), as the lazy-output finding says it; "" when none."""
    label = f"call_{step.index}" if step.step == P.StepKind.CALL else str(step.step)
    for position, output in enumerate(step.outputs):
        if output.lazy:
            what = output.name or (f"output {position}" if len(step.outputs) > 1 else "output")
            return f"{label}: {what} {output.lazy}"[:300]
    return ""


# -- the paired rounds ---------------------------------------------------------------------------------------


class Pairing:
    """The parent's side of one compared worker's paired timing.

    The worker says `ready` (warmed up, profiled, graphs captured or not); the parent asks the
    judge to prepare the reference, chooses the protocol, and then walks the schedule: the judge's
    rounds are asked for directly, the worker's are the replies to its messages. While rounds run,
    the host is kept quiet (harness.parent.quiet)."""

    def __init__(
        self,
        client: JudgeClient,
        judge_session: int,
        timing: TimingConfig,
        limit: float,
        compared_name: str = "the candidate",
        quiet: Optional[LaneQuiet] = None,
        problem_timing: Optional[ProblemTiming] = None,
    ) -> None:
        self.client = client  # the lane's judge
        self.judge_session = judge_session  # the compared worker's session with it
        self.timing = timing  # the run's timing config
        self.limit = limit  # seconds for each of the judge's requests
        self.compared_name = compared_name
        self.quiet = quiet
        self.problem_timing = problem_timing if problem_timing is not None else ProblemTiming(timing.mode)
        self.protocol: Optional[P.TimingProtocol] = None
        self.ready: Optional[P.Ready] = None
        self.reference_ready: Optional[P.Ready] = None
        self.rounds: dict[str, list[TimingStats]] = {REFERENCE: [], COMPARED: []}
        self._order = schedule(timing.rounds)
        self._next = 0
        self._held = contextlib.ExitStack()
        # the protocol whose median fell below the floor, when the rounds were re-timed
        self.first_protocol: Optional[P.TimingProtocol] = None

    def on_ready(self, ready: P.Ready) -> dict[str, Any]:
        """The worker is ready: prepare the reference, choose the protocol, run up to the worker's first round."""
        self.ready = ready
        self.reference_ready = self.client.request(
            P.PrepareTiming(self.judge_session, graph=self.problem_timing.timing_mode == TimingMode.GRAPH), self.limit
        )
        self.protocol = choose_protocol(
            self.problem_timing.timing_mode,
            self.timing.sync,
            self.reference_ready,
            ready,
            self.compared_name,
            self.problem_timing.reason,
            hold=self.timing.hold,
        )
        if self.quiet is not None:
            self._held.enter_context(self.quiet.hold())
        return self._advance()

    def on_round(self, timed: P.RoundTimed) -> dict[str, Any]:
        """The worker timed its round: record it, run the judge's rounds up to the worker's next one."""
        expected = self._order[self._next - 1] if self._next else None
        if expected != (COMPARED, timed.round):
            raise ValueError(f"the worker reported round {timed.round} out of turn")
        self.rounds[COMPARED].append(timed.stats)
        return self._advance()

    def _advance(self) -> dict[str, Any]:
        assert self.protocol is not None
        while True:
            while self._next < len(self._order) or self._wants_more():
                if self._next == len(self._order):
                    self._order += schedule(2, start=len(self.rounds[COMPARED]))
                side, k = self._order[self._next]
                self._next += 1
                ask = P.TimeRound(self.judge_session, k, self.timing.rounds, self.protocol)
                if side == COMPARED:
                    return {"round": P.encode(ask)}
                timed: P.RoundTimed = self.client.request(ask, self.limit)
                self.rounds[REFERENCE].append(timed.stats)
            if not self._below_floor():
                break
            self._retime()
        self.close()
        return {"round": None}

    def _below_floor(self) -> bool:
        """Whether the finished rounds put the compared model below the hard floor, under a
        protocol other than eager with device sync (which leaves nothing out)."""
        assert self.protocol is not None
        if (
            self.first_protocol is not None
            or self.problem_timing.floor_ms <= 0
            or (self.protocol.timing_mode, self.protocol.sync) == (TimingMode.EAGER, SyncMode.DEVICE)
        ):
            return False
        done = self.result()
        return done is not None and done[0].median_ms < self.problem_timing.floor_ms

    def _retime(self) -> None:
        """A time below the hard floor is not a result: both sides are timed again, once, eagerly
        (graph replays give way to calls; calls already eager get a device-wide synchronise); the
        record says why, and a median still below the floor is implausible-time.

        Graph replays give way to eager calls on the calling stream, not to a device sync: a
        device sync adds a host round trip (about 14 us on an H100) whose jitter swamps a
        few-microsecond kernel, and an honest 2.5 us kernel then read 0 ms after the round trip
        was subtracted. Eager calls run on the legacy default stream, so `<<<>>>` launches are
        inside their events."""
        assert self.protocol is not None
        done = self.result()
        assert done is not None
        sync = SyncMode.DEVICE if self.protocol.timing_mode == TimingMode.EAGER else self.protocol.sync
        how = "eagerly with device sync" if sync == SyncMode.DEVICE else "eagerly"
        why = (
            f"re-timed {how}: under {self.protocol.describe()} its median {done[0].median_ms:.4g} ms was below the "
            f"bytes floor {self.problem_timing.floor_ms:.4g} ms"
        )
        self.first_protocol = self.protocol
        self.protocol = P.TimingProtocol(
            TimingMode.EAGER,
            sync,
            "its time was below the bytes floor" if sync == SyncMode.DEVICE else self.protocol.sync_reason,
            why,
        )
        self.rounds = {REFERENCE: [], COMPARED: []}
        self._order, self._next = schedule(self.timing.rounds), 0

    def _wants_more(self) -> bool:
        """Two more rounds each while the speedup's interval is wider than ± timing.interval
        (noisy rounds get more of them), up to timing.max_rounds."""
        done = len(self.rounds[COMPARED])
        if (
            self._next < len(self._order)
            or done + 2 > self.timing.max_rounds
            or done != len(self.rounds[REFERENCE])
            or not done
        ):
            return False
        assert self.protocol is not None
        paired = paired_speedup(self.rounds[REFERENCE], self.rounds[COMPARED], self.protocol)
        return (paired.high - paired.low) / 2 > self.timing.interval * paired.speedup

    def close(self) -> None:
        """The host may be busy again (also when the worker ended early)."""
        self._held.close()

    def result(self) -> Optional[tuple[TimingStats, PairedSpeedup]]:
        """The compared model's pooled timing and the paired speedup; None unless every round arrived."""
        reference, compared = self.rounds[REFERENCE], self.rounds[COMPARED]
        scheduled = sum(side == COMPARED for side, _ in self._order)
        if self.protocol is None or not compared or len(compared) != scheduled or len(reference) != len(compared):
            return None
        return pooled(compared, self.protocol, common_overhead(reference + compared)), paired_speedup(
            reference, compared, self.protocol
        )


# -- where a problem is evaluated, and the messages each process is started with ------------------------


@dataclasses.dataclass(frozen=True)
class Subject:
    """What one compared worker runs: a candidate's ModelNew, the null candidate, or a compile baseline."""

    role: P.Role
    source: Path  # the module file
    log_name: str  # its log's name under the problem's logs
    compile_mode: Optional[str] = None  # a compile baseline: torch.compile's mode
    class_name: Optional[str] = None  # None: ModelNew for a candidate, Model for a baseline
    name: str = "the candidate"  # how timing messages name it
    text: str = ""  # its pinned source (the problem's, for the null candidate and a baseline); "" = read `source`


@dataclasses.dataclass(frozen=True)
class Setting:
    """Where one problem is evaluated: what every run against its judge shares."""

    problem: Problem
    cfg: Config  # the problem's config (its declarations applied)
    device: str  # cuda | cpu
    store: RunStore  # where records and logs go
    lane: Lane  # the GPU (or the CPU) and its worker launcher
    memory_limit: int  # bytes of host memory a worker may hold
    problem_hash: str  # the problem file's hash, read once when the evaluation began
    scratch: RunScratch  # the run's scratch: the judge's and each worker's working folder go there
    quiet: QuietHost  # the run's quiet host: timed rounds hold it

    @classmethod
    def of(
        cls, problem: Problem, cfg: Config, device: str, store: RunStore, lane: Lane, scratch: RunScratch, quiet: Any
    ) -> "Setting":
        """The setting of `problem` under the run's `cfg`: its declarations applied, once."""
        memory_limit = cfg.limits.memory_mb << 20 if cfg.limits.memory_mb else default_memory_limit()
        resolved = cfg.for_problem(problem.settings)  # the problem's tolerances and backward contract
        return cls(problem, resolved, device, store, lane, memory_limit, problem.hash, scratch, quiet)

    @functools.cached_property
    def rules(self) -> VerdictRules:
        """The settings every verdict of this problem depends on, resolved once."""
        return VerdictRules.of(self.cfg)

    def gpu_alone(self) -> Any:
        """A hold of the lane's GPU for work whose times are measured (a reference's start: its
        profile and speed of light; a worker's warm-up, profile and rounds): background work and
        the other lanes on this GPU are stopped meanwhile (harness.parent.quiet). Nothing on the CPU."""
        if self.device != Device.CUDA or not self.cfg.timing.enabled or not self.quiet.sharing:
            # one lane on its GPU: the timed rounds hold the host themselves (harness.parent.compared_pass)
            return contextlib.nullcontext()
        return self.quiet.hold(self.lane.index)

    def gpu_shared(self) -> Any:
        """The lane's GPU, shared with the other lanes on it, for a candidate's checks and memcheck: a
        shared grant on the GPU's gate (harness.parent.quiet, `lane_work`); nothing when the lane has
        its GPU to itself, or on the CPU."""
        if self.device != Device.CUDA or not self.quiet.sharing:
            return contextlib.nullcontext()
        return self.quiet.lane_work(self.lane.index)

    def gpu_step(self) -> None:
        """A step boundary of the lane's worker (it waits for the answer): a timing queued on the GPU
        it shares goes first."""
        if self.device == Device.CUDA:
            self.quiet.step(self.lane.index)

    def identity(self, candidate: str, path: str, source_hash: str) -> Identity:
        """What a candidate's record of this problem on this lane was judged as."""
        return Identity(
            self.store.run_id,
            self.problem.name,
            self.problem_hash,
            candidate,
            path,
            source_hash,
            self.device,
            self.lane.label,
        )

    def reference_identity(self, device_name: str) -> ReferenceIdentity:
        """Which problem a reference record of this lane is of, and where (`device_name`: the judge's device)."""
        return ReferenceIdentity(
            self.store.run_id,
            self.problem.name,
            self.problem_hash,
            str(self.problem.path),
            self.device,
            device_name,
            self.lane.label,
        )

    # -- the messages each process is started with --------------------------------------------------------

    def judge_job(self, plan: Plan, measure: bool, profile: Optional[CallProfile] = None) -> P.JudgeJob:
        """The judge's job; with `measure`, it also measures the problem's speed-of-light at start;
        with `profile` (the reference cache's), it does not profile the reference again."""
        cfg = self.cfg
        return P.JudgeJob(
            source=str(self.problem.path.resolve()),
            source_text=self.problem.text,
            device=self.device,
            build_cache=str(cfg.path(cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            input_seeds=plan.input_seeds,
            distributions=plan.distributions,
            calls=plan.calls,
            other_size_trial=plan.other_size_trial,
            randomize_weights=plan.randomize_weights,
            precision_call=plan.precision_call,
            timed_inputs=plan.timed_inputs,
            gradients=cfg.check.gradients != GradientPolicy.OFF,
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            allow_tf32=cfg.check.allow_tf32,
            cpu_threads=cfg.timing.cpu_threads,
            tolerances={k: dataclasses.asdict(v) for k, v in cfg.check.tolerances.items()},
            gradient_tolerance_factor=cfg.check.gradient_tolerance_factor,
            timing=TimerSettings.from_config(cfg.timing) if cfg.timing.enabled else None,
            speed_of_light_cache=str(cfg.path(cfg.measurement_cache_dir))
            if measure and cfg.timing.enabled and cfg.speed_of_light.enabled
            else "",
            guard_bands=cfg.check.guard_bands,
            profile=profile,
        )

    def worker_job(self, plan: Plan, subject: Subject, timing: ProblemTiming, session: P.SessionHandle) -> P.WorkerJob:
        """A compared worker's job: `subject` checked through `plan`, timed under the problem's `timing`."""
        cfg = self.cfg
        return P.WorkerJob(
            role=subject.role,
            source=str(subject.source.resolve()),
            source_text=subject.text,
            problem_text=self.problem.text
            if cfg.check.problem_globals and subject.role is P.Role.CANDIDATE and not subject.text
            else "",
            class_name=subject.class_name or ("ModelNew" if subject.role is P.Role.CANDIDATE else "Model"),
            compile_mode=subject.compile_mode,
            device=self.device,
            build_cache=str(cfg.path(cfg.build_cache_dir)),
            construct_seed=plan.construct_seed,
            calls=P.role_calls(subject.role, plan.calls),
            timing=TimerSettings.from_config(cfg.timing, timing.timing_mode) if cfg.timing.enabled else None,
            allow_tf32=cfg.check.allow_tf32,
            gradients=cfg.check.gradients != GradientPolicy.OFF,
            gradient_seed=plan.gradient_seed,
            rng_seed=plan.rng_seed,
            cpu_threads=cfg.timing.cpu_threads,
            guard_bands=cfg.check.guard_bands,
            weights=cfg.check.weights,
            session=session,
        )

    def sanitize_job(self, source: Path, seed: int, sizes: dict[str, Any]) -> P.SanitizeJob:
        """The sanitizer child's job: one eval forward of the candidate in `source`, seeded with
        `seed`, at the other-size trial's `sizes`."""
        return P.SanitizeJob(
            source=str(source.resolve()),
            problem=str(self.problem.path.resolve()),
            problem_text=self.problem.text,
            class_name="ModelNew",
            sizes=dict(sizes),
            seed=seed,
            build_cache=str(self.cfg.path(self.cfg.build_cache_dir)),
            problem_globals=self.cfg.check.problem_globals,
        )
